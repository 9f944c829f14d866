#include "engine/request_validation.h"

#include <cmath>
#include <string>

#include "common/error.h"

namespace rs {

namespace {
std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

void validate_request(const GenerationRequest& req, const RequestLimits& lim) {
  const auto& sp = req.sampling;
  const int P = static_cast<int>(req.prompt.size());
  if (P == 0) throw Error("prompt: must contain at least one token");
  for (int i = 0; i < P; ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= lim.vocab_size)
      throw Error("prompt: token id " + std::to_string(req.prompt[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(lim.vocab_size) + ")");
  if (req.n < 1) throw Error("n: must be at least 1 (got " + std::to_string(req.n) + ")");
  if (req.n > lim.max_num_seqs)
    throw Error("n: " + std::to_string(req.n) + " exceeds max_num_seqs " + std::to_string(lim.max_num_seqs));
  if (req.max_tokens < 1) throw Error("max_tokens: must be at least 1 (got " + std::to_string(req.max_tokens) + ")");
  if (static_cast<int64_t>(P) + req.max_tokens > lim.max_model_len)
    throw Error("This model's maximum context length is " + std::to_string(lim.max_model_len) +
                " tokens. However, you requested " + std::to_string(static_cast<int64_t>(P) + req.max_tokens) +
                " tokens (" + std::to_string(P) + " in the prompt, " + std::to_string(req.max_tokens) +
                " in the completion). Please reduce the length of the prompt or max_tokens.");
  if (req.min_tokens < 0 || req.min_tokens > req.max_tokens)
    throw Error("min_tokens: must be in [0, max_tokens = " + std::to_string(req.max_tokens) + "] (got " +
                std::to_string(req.min_tokens) + ")");
  for (const auto& [t, b] : sp.logit_bias)
    if (t < 0 || t >= lim.vocab_size || std::isnan(b))
      throw Error("logit_bias: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                  std::to_string(lim.vocab_size) + ") or its bias is NaN");
  const int64_t blocks = (static_cast<int64_t>(P) + req.max_tokens + lim.block_size - 1) / lim.block_size;
  if (blocks > lim.num_kv_blocks)
    throw Error("request needs " + std::to_string(blocks) + " KV blocks of " + std::to_string(lim.block_size) +
                " tokens (" + std::to_string(P) + " prompt + " + std::to_string(req.max_tokens) +
                " max_tokens) but the KV cache holds only " + std::to_string(lim.num_kv_blocks) + " blocks");
  if (!std::isfinite(sp.temperature) || sp.temperature < 0)
    throw Error("temperature: must be >= 0 (got " + num(sp.temperature) + ")");
  if (!std::isfinite(sp.top_p) || sp.top_p <= 0 || sp.top_p > 1)
    throw Error("top_p: must be in (0, 1] (got " + num(sp.top_p) + ")");
  if (sp.top_k < -1) throw Error("top_k: must be -1 (off), 0 (off) or positive (got " + std::to_string(sp.top_k) + ")");
  if (!std::isfinite(sp.min_p) || sp.min_p < 0 || sp.min_p > 1)
    throw Error("min_p: must be in [0, 1] (got " + num(sp.min_p) + ")");
  if (!std::isfinite(sp.presence_penalty) || sp.presence_penalty < -2 || sp.presence_penalty > 2)
    throw Error("presence_penalty: must be in [-2, 2] (got " + num(sp.presence_penalty) + ")");
  if (!std::isfinite(sp.frequency_penalty) || sp.frequency_penalty < -2 || sp.frequency_penalty > 2)
    throw Error("frequency_penalty: must be in [-2, 2] (got " + num(sp.frequency_penalty) + ")");
  if (!std::isfinite(sp.repetition_penalty) || sp.repetition_penalty <= 0)
    throw Error("repetition_penalty: must be > 0 (got " + num(sp.repetition_penalty) + ")");
  if (sp.logprobs < -1 || sp.logprobs > RequestLimits::kMaxLogprobs)
    throw Error("logprobs: must be between 0 and " + std::to_string(RequestLimits::kMaxLogprobs) + " (got " +
                std::to_string(sp.logprobs) + ")");
  for (int32_t t : req.stop_token_ids)
    if (t < 0 || t >= lim.vocab_size)
      throw Error("stop_token_ids: " + std::to_string(t) + " is outside the vocabulary [0, " +
                  std::to_string(lim.vocab_size) + ")");
  for (const auto& s : req.stop)
    if (s.empty()) throw Error("stop: stop strings must not be empty");
  if (req.json_object && !lim.has_tokenizer)
    throw Error("response_format: JSON mode needs the model's tokenizer to know each token's bytes");
  if (!req.stop.empty() && !lim.has_tokenizer)
    throw Error("stop: stop strings need a tokenizer to match text, and this model has none; use stop_token_ids");
}

}  // namespace rs
