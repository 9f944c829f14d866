#pragma once
// HF tokenizer.json (byte-level BPE with its normalizer / pre-tokenizer / decoder pipeline) and
// tokenizer_config.json (special tokens, chat template). Immutable after load; thread-safe.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rs {

class Tokenizer {
 public:
  // Throws rs::Error naming the file and what is wrong.
  static std::unique_ptr<Tokenizer> from_json(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json);
  // tokenizer.json + tokenizer_config.json (+ generation_config.json's eos ids); chat_template,
  // when given, replaces tokenizer_config's (serve --chat-template).
  static std::unique_ptr<Tokenizer> from_dir(const std::string& dir,
                                             const std::optional<std::string>& chat_template = std::nullopt);
  static bool dir_has_tokenizer(const std::string& dir);
  virtual ~Tokenizer() = default;

  // Throws rs::Error("invalid UTF-8 ...") on malformed input.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  // The raw text of one token (byte-level pieces mapped back to bytes; may be partial UTF-8).
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool add_bos_token() const = 0;

  // Renders tokenizer_config.json's chat_template. `messages` is OpenAI's array of
  // {role, content, ...}; `extra` adds template variables (tools, ...). Throws rs::Error with
  // the template line and column on a template error, or the template's raise_exception text.
  virtual std::string apply_chat_template(const nlohmann::json& messages, bool add_generation_prompt,
                                          const nlohmann::json* extra = nullptr) const = 0;
  // The same with key order kept (ordered_json): `tojson` of tool schemas then prints keys in the
  // order the client sent them, as transformers does. Default: converts and calls the above.
  virtual std::string apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json* extra = nullptr) const;
  virtual bool has_chat_template() const = 0;
};

// Streaming detokenizer: text appears as soon as it is valid UTF-8; a character split over
// tokens is held back until complete.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tok, bool skip_special_tokens);
  std::string push(int32_t id);  // newly completed text (possibly empty)
  std::string flush();           // whatever is held, invalid bytes replaced by U+FFFD

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace rs
