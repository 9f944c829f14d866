#pragma once
// tokenizer.json "added_tokens": matched in the text before the model runs, with HF's flags:
// normalized (matched after normalization, else in the raw text), lstrip/rstrip (swallow
// neighbouring whitespace), single_word (only when not inside a word), special.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rs {

class Normalizer;
class Regex;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
  // What decoding yields: HF keeps a normalized token's content in its normalized form.
  std::string decoded;
};

// One piece of input after added-token extraction: an added token's id, or (normalized) text.
struct Segment {
  int32_t id = -1;
  std::string text;
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) normalizes the content of normalized tokens, as HF does.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  ~AddedVocabulary();

  // Splits out added tokens, normalizing the text between them.
  std::vector<Segment> extract_and_normalize(const std::string& text, const Normalizer* normalizer) const;

  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(const std::string& content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie giving the leftmost-longest match, like HF's Aho-Corasick (MatchKind::LeftmostLongest).
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child
    std::vector<int32_t> token_at;                // node -> index into tokens_, or -1
    std::array<bool, 256> first_byte{};
    Trie() : token_at(1, -1) {}
    void insert(const std::string& key, int32_t token_index);
    // Longest key starting at `pos`: (token index, length) or (-1, 0).
    std::pair<int32_t, size_t> longest_at(const std::string& text, size_t pos) const;
  };
  void split(const std::string& text, const Trie& trie, std::vector<Segment>& out,
             const Normalizer* normalize_rest, const Trie* then) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_trie_, normalized_trie_;
  std::unique_ptr<Regex> word_char_;
};

}  // namespace rs
