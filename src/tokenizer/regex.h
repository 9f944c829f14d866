#pragma once
// PCRE2 (UTF + UCP, JIT-compiled) for the regexes tokenizer.json declares. HF compiles them with
// Oniguruma; the patterns used by real tokenizers (\p{..} classes, lookahead, (?i:..)) mean the
// same in both.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rs {

class Regex {
 public:
  // Throws rs::Error naming `what` and the PCRE2 message with the offset.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping leftmost matches as byte ranges [begin, end), like Rust's find_iter.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // Whether the pattern matches at exactly `offset` (anchored).
  bool matches_at(std::string_view text, size_t offset) const;

  static std::string escape(std::string_view literal);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rs
