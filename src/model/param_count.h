#pragma once
// Parameter and memory-traffic arithmetic of a model, from its spec alone (no weights needed).
#include <cstdint>

#include "model/model_spec.h"

namespace rs {

struct ParamCounts {
  uint64_t total = 0;            // every parameter of the main model (MTP excluded)
  uint64_t active = 0;           // a token's compute: all but unchosen experts and the embedding table
  uint64_t mtp = 0;              // the MTP layers' parameters (num_nextn_predict_layers)
  uint64_t routed_expert = 0;    // one routed expert (gate + up + down)
  uint64_t weight_bytes = 0;     // stored bytes of the main model (FP8 scales included)
  // Weight bytes a single decoding token reads: everything but unchosen experts, and one row
  // of the embedding.
  uint64_t bytes_per_decoded_token = 0;
  uint64_t kv_elements_per_token = 0;  // layers x (kv_lora_rank + qk_rope_head_dim)
};

ParamCounts count_params(const ModelSpec& spec);

}  // namespace rs
