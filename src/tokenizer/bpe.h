#pragma once
// tokenizer.json "model" of type BPE: vocab, merges applied lowest rank first (leftmost on ties),
// ignore_merges, continuing_subword_prefix / end_of_word_suffix, unk_token (+fuse_unk), byte_fallback.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rs {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Throws rs::Error naming the offending field or merge.
  explicit BpeModel(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized piece.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  VocabMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false, byte_fallback_ = false;
  uint64_t uid_;  // keys this model's per-thread word cache
};

}  // namespace rs
