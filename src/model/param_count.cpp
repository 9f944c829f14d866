#include "model/param_count.h"

#include <string>

#include "model/weights.h"

namespace rs {

namespace {
bool is_routed_expert(const std::string& name) {
  auto p = name.find(".mlp.experts.");
  return p != std::string::npos;
}
uint64_t stored_bytes(const TensorInfo& t, const QuantSpec& q) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  uint64_t b = n * dtype_size(t.dtype);
  if (t.block_scaled)
    b += uint64_t((t.shape[0] + q.block_rows - 1) / q.block_rows) *
         uint64_t((t.shape[1] + q.block_cols - 1) / q.block_cols) * 4;
  return b;
}
}  // namespace

ParamCounts count_params(const ModelSpec& s) {
  ParamCounts c;
  uint64_t expert_params = 0, expert_bytes = 0;
  for (const TensorInfo& t : expected_tensors(s)) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    const uint64_t bytes = stored_bytes(t, s.quant);
    c.total += n;
    c.weight_bytes += bytes;
    if (is_routed_expert(t.name)) {
      expert_params += n;
      expert_bytes += bytes;
    } else if (t.name == "model.embed_tokens.weight") {
      c.bytes_per_decoded_token += uint64_t(s.hidden_size) * dtype_size(t.dtype);
    } else {
      c.bytes_per_decoded_token += bytes;
    }
  }
  if (s.tie_word_embeddings)  // lm_head reads the whole (shared) embedding matrix
    c.bytes_per_decoded_token += uint64_t(s.vocab_size) * s.hidden_size * dtype_size(DType::BF16);
  int moe_layers = 0;
  for (int l = 0; l < s.num_hidden_layers; ++l) moe_layers += s.is_moe_layer(l) ? 1 : 0;
  if (moe_layers > 0 && s.n_routed_experts > 0) {
    const uint64_t per_layer = expert_params / moe_layers, per_layer_bytes = expert_bytes / moe_layers;
    c.routed_expert = per_layer / s.n_routed_experts;
    const uint64_t unused = uint64_t(s.n_routed_experts - s.num_experts_per_tok) * c.routed_expert;
    c.active = c.total - unused * moe_layers;
    c.bytes_per_decoded_token +=
        per_layer_bytes / s.n_routed_experts * s.num_experts_per_tok * moe_layers;
  } else {
    c.active = c.total;
  }
  // An embedding lookup reads one row, computes nothing: not an active parameter (DeepSeek's
  // 37B / 2.4B activated count it the same way), unless lm_head shares the matrix.
  if (!s.tie_word_embeddings) c.active -= uint64_t(s.vocab_size) * s.hidden_size;
  for (const TensorInfo& t : expected_mtp_tensors(s)) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    c.mtp += n;
  }
  c.kv_elements_per_token = uint64_t(s.num_hidden_layers) * s.kv_cache_dim();
  return c;
}

}  // namespace rs
