#pragma once
// The Tokenizer contract implemented over a HF tokenizer.json + tokenizer_config.json.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace rs {

class HfTokenizer final : public Tokenizer {
 public:
  // `eos_extra`: more end-of-sequence ids (generation_config.json's eos_token_id).
  HfTokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, std::vector<int32_t> eos_extra);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  bool is_special(int32_t id) const override;
  int vocab_size() const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  bool add_bos_token() const override;
  std::string apply_chat_template(const nlohmann::json& messages, bool add_generation_prompt,
                                  const nlohmann::json* extra) const override;
  std::string apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const nlohmann::ordered_json* extra) const override;
  bool has_chat_template() const override { return chat_template_ != nullptr; }

 private:
  const std::string* token_string(int32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  bool byte_level_decoder_ = false;
  // add_special_tokens=true: ids placed before and after the text.
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  std::string bos_token_, eos_token_;
  nlohmann::ordered_json special_tokens_map_ = nlohmann::ordered_json::object();
  std::unique_ptr<ChatTemplate> chat_template_;
  int vocab_size_ = 0;
};

}  // namespace rs
