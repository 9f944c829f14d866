#pragma once
// tokenizer.json "pre_tokenizer": splits each piece of text into smaller pieces before the model
// sees them. Sequence, Split (Regex/String pattern, every behavior, invert), ByteLevel (its options),
// Digits, Metaspace, Whitespace, WhitespaceSplit.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rs {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits; empty pieces are dropped, as HF does.
  // `first_piece_is_start`: whether pieces[0] begins the whole input (Metaspace prepend_scheme "first").
  virtual void pre_tokenize(std::vector<std::string>& pieces, bool first_piece_is_start) const = 0;
};

// nullptr for a JSON null; throws rs::Error naming an unsupported type or option.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec);

}  // namespace rs
