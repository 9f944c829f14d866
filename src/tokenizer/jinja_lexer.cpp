#include "tokenizer/jinja_lexer.h"

#include <cctype>

#include "common/error.h"

namespace rs::jinja {
namespace {

[[noreturn]] void fail(Pos p, const std::string& msg) {
  throw Error("chat template line " + std::to_string(p.line) + " column " + std::to_string(p.column) + ": " + msg);
}

struct Lexer {
  const std::string& src;
  size_t i = 0;
  std::vector<Token> out;

  explicit Lexer(const std::string& s) : src(s) {}

  // Line/column tracking incrementally, since pos_at is O(n).
  size_t tracked_off = 0;
  Pos tracked;
  Pos pos(size_t off) {
    if (off < tracked_off) {
      tracked_off = 0;
      tracked = Pos{};
    }
    for (; tracked_off < off && tracked_off < src.size(); ++tracked_off) {
      if (src[tracked_off] == '\n') {
        ++tracked.line;
        tracked.column = 1;
      } else if ((static_cast<unsigned char>(src[tracked_off]) & 0xC0) != 0x80) {
        ++tracked.column;
      }
    }
    return tracked;
  }

  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

  void lex_expression(size_t& k, const char* close, Pos tag_pos) {
    // Tokens until the closing delimiter (optionally preceded by '-' or '+').
    const size_t close_len = 2;
    while (true) {
      while (k < src.size() && is_space(src[k])) ++k;
      if (k >= src.size()) fail(tag_pos, std::string("unterminated tag, expected '") + close + "'");
      if ((src[k] == '-' || src[k] == '+') && src.compare(k + 1, close_len, close) == 0) return;
      if (src.compare(k, close_len, close) == 0) return;
      const Pos p = pos(k);
      const char c = src[k];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = k;
        while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        out.push_back({Tok::Name, src.substr(k, e - k), p});
        k = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = k;
        bool is_float = false;
        while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
        }
        if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
          size_t f = e + 1;
          if (f < src.size() && (src[f] == '+' || src[f] == '-')) ++f;
          if (f < src.size() && std::isdigit(static_cast<unsigned char>(src[f]))) {
            is_float = true;
            e = f;
            while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
          }
        }
        std::string num;
        for (size_t q = k; q < e; ++q)
          if (src[q] != '_') num.push_back(src[q]);
        out.push_back({is_float ? Tok::Float : Tok::Int, num, p});
        k = e;
      } else if (c == '"' || c == '\'') {
        std::string s;
        size_t e = k + 1;
        while (true) {
          if (e >= src.size()) fail(p, "unterminated string literal");
          const char d = src[e];
          if (d == c) break;
          if (d == '\\' && e + 1 < src.size()) {
            const char x = src[e + 1];
            switch (x) {
              case 'n': s.push_back('\n'); break;
              case 't': s.push_back('\t'); break;
              case 'r': s.push_back('\r'); break;
              case '\\': s.push_back('\\'); break;
              case '\'': s.push_back('\''); break;
              case '"': s.push_back('"'); break;
              case '0': s.push_back('\0'); break;
              case '\n': break;
              default:
                s.push_back('\\');
                s.push_back(x);
            }
            e += 2;
            continue;
          }
          s.push_back(d);
          ++e;
        }
        out.push_back({Tok::String, s, p});
        k = e + 1;
      } else {
        static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                    "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        bool matched = false;
        for (const char* op : ops) {
          const size_t n = std::char_traits<char>::length(op);
          if (src.compare(k, n, op) == 0) {
            out.push_back({Tok::Op, op, p});
            k += n;
            matched = true;
            break;
          }
        }
        if (!matched) fail(p, std::string("unexpected character '") + c + "'");
      }
    }
  }

  void run() {
    // Whitespace control needs to see the next tag before emitting text: collect raw pieces,
    // then trim them.
    bool strip_next_leading = false;   // previous tag ended with '-'
    bool trim_next_newline = false;    // previous tag was a block/comment (trim_blocks)
    while (i <= src.size()) {
      size_t open = std::string::npos;
      for (size_t k = i; k + 1 < src.size(); ++k) {
        if (src[k] == '{' && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')) {
          open = k;
          break;
        }
      }
      std::string text = src.substr(i, (open == std::string::npos ? src.size() : open) - i);
      const Pos text_pos = pos(i);
      if (strip_next_leading) {
        size_t b = 0;
        while (b < text.size() && is_space(text[b])) ++b;
        text.erase(0, b);
      } else if (trim_next_newline) {
        if (text.compare(0, 1, "\n") == 0) text.erase(0, 1);
        else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2);
      }
      if (open == std::string::npos) {
        if (!text.empty()) out.push_back({Tok::Text, text, text_pos});
        break;
      }
      const char kind = src[open + 1];
      const bool minus_open = open + 2 < src.size() && src[open + 2] == '-';
      const bool plus_open = open + 2 < src.size() && src[open + 2] == '+';
      if (minus_open) {
        size_t e = text.size();
        while (e > 0 && is_space(text[e - 1])) --e;
        text.erase(e);
      } else if ((kind == '%' || kind == '#') && !plus_open) {
        // lstrip_blocks: when only spaces/tabs sit between the line start and a block or comment
        // tag, they go.
        size_t b = open;
        while (b > i && (src[b - 1] == ' ' || src[b - 1] == '\t')) --b;
        if (b == 0 || src[b - 1] == '\n') {
          size_t e = text.size();
          while (e > 0 && (text[e - 1] == ' ' || text[e - 1] == '\t')) --e;
          text.erase(e);
        }
      }
      if (!text.empty()) out.push_back({Tok::Text, text, text_pos});

      const Pos tag_pos = pos(open);
      size_t k = open + 2 + ((minus_open || plus_open) ? 1 : 0);
      if (kind == '#') {
        const size_t close = src.find("#}", k);
        if (close == std::string::npos) fail(tag_pos, "unterminated comment");
        strip_next_leading = close > 0 && src[close - 1] == '-';
        trim_next_newline = !(close > 0 && src[close - 1] == '+');
        i = close + 2;
        continue;
      }
      if (kind == '%' && is_raw_tag(k)) {
        // {% raw %}...{% endraw %}: the body is text, untouched.
        const size_t tag_end = src.find("%}", k);
        const size_t end = find_endraw(tag_end + 2);
        if (end == std::string::npos) fail(tag_pos, "unterminated raw block");
        std::string body = src.substr(tag_end + 2, end - (tag_end + 2));
        if (src[tag_end - 1] == '-') {
          size_t b = 0;
          while (b < body.size() && is_space(body[b])) ++b;
          body.erase(0, b);
        }
        if (src[end + 2] == '-') {
          size_t e = body.size();
          while (e > 0 && is_space(body[e - 1])) --e;
          body.erase(e);
        }
        if (!body.empty()) out.push_back({Tok::Text, body, pos(tag_end + 2)});
        const size_t close = src.find("%}", end);
        strip_next_leading = src[close - 1] == '-';
        trim_next_newline = src[close - 1] != '+';
        i = close + 2;
        continue;
      }
      out.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", tag_pos});
      const char* close = kind == '{' ? "}}" : "%}";
      lex_expression(k, close, tag_pos);
      const bool minus_close = src[k] == '-';
      const bool plus_close = src[k] == '+';
      if (minus_close || plus_close) ++k;
      out.push_back({kind == '{' ? Tok::VarEnd : Tok::BlockEnd, "", pos(k)});
      i = k + 2;
      strip_next_leading = minus_close;
      trim_next_newline = kind == '%' && !plus_close;
    }
    out.push_back({Tok::End, "", pos(src.size())});
  }

  bool is_raw_tag(size_t k) const {
    while (k < src.size() && is_space(src[k])) ++k;
    if (src.compare(k, 3, "raw") != 0) return false;
    k += 3;
    while (k < src.size() && is_space(src[k])) ++k;
    return src.compare(k, 2, "%}") == 0 || src.compare(k, 3, "-%}") == 0;
  }
  size_t find_endraw(size_t from) const {
    for (size_t k = src.find("{%", from); k != std::string::npos; k = src.find("{%", k + 2)) {
      size_t q = k + 2;
      if (q < src.size() && (src[q] == '-' || src[q] == '+')) ++q;
      while (q < src.size() && is_space(src[q])) ++q;
      if (src.compare(q, 6, "endraw") == 0) return k;
    }
    return std::string::npos;
  }
};
}  // namespace

std::vector<Token> lex(const std::string& source) {
  Lexer l(source);
  l.run();
  return std::move(l.out);
}

}  // namespace rs::jinja
