#pragma once
// tokenizer.json "decoder": turns token strings back into text. ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip and Sequence; with no decoder, tokens are joined by spaces (HF).
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rs {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of HF's decode_chain: tokens in, tokens out (their concatenation is the text).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec);

// Runs the decoder (or the space join) and guarantees valid UTF-8 (U+FFFD for invalid bytes).
std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace rs
