#pragma once
// Which routed experts a token uses and with what weights: every scoring_func x topk_method
// combination of DeepSeek V2/V3, as HF transformers computes it (see docs/arch/model.md).
#include <vector>

#include "model/model_spec.h"

namespace rs::cpu {

struct Route {
  std::vector<int> experts;     // num_experts_per_tok ids, best first
  std::vector<float> weights;   // matching weights (after normalisation and scaling)
};

// `logits`: the router's fp32 output [n_routed_experts]; `bias`: e_score_correction_bias
// (noaux_tc only; may be null otherwise).
Route route_token(const ModelSpec& spec, const float* logits, const float* bias);

}  // namespace rs::cpu
