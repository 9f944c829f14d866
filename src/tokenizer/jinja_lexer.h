#pragma once
// Jinja source -> tokens, with the whitespace control transformers configures:
// trim_blocks and lstrip_blocks on, {%- -%} / {{- -}} / {#- -#} strip, {%+ / +%} opt out.
#include <string>
#include <vector>

namespace rs::jinja {

struct Pos {
  int line = 1, column = 1;
};

enum class Tok {
  Text,        // literal template text (value)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,
  Int,
  Float,
  Op,  // punctuation/operator (value)
  End
};

struct Token {
  Tok type;
  std::string value;
  Pos pos;
};

// Throws rs::Error "chat template line L column C: ..." on an unterminated tag or string.
std::vector<Token> lex(const std::string& source);

}  // namespace rs::jinja
