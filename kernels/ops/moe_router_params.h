#pragma once
// MoE router on the GPU: fp32 logits from the bf16 hidden state and the fp32 router weight,
// scoring (softmax | sigmoid), expert selection (greedy | group_limited_greedy | noaux_tc, the
// correction bias used for selection only), normalisation and routed scaling.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

enum class RouterScoring : uint8_t { Softmax, Sigmoid };
enum class RouterTopk : uint8_t { Greedy, GroupLimitedGreedy, NoauxTc };

struct MoeRouterParams {
  const __nv_bfloat16* x = nullptr;  // [n, hidden]
  const float* weight = nullptr;     // [experts, hidden]
  const float* bias = nullptr;       // [experts] e_score_correction_bias, nullable
  int n = 0, hidden = 0, experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  RouterScoring scoring = RouterScoring::Softmax;
  RouterTopk method = RouterTopk::Greedy;
  bool normalize = false;              // divide by the selected scores' sum (host decides: V2 needs k > 1)
  bool scale_after_normalize = true;  // V3 always scales; V2 scales only when not normalising
  float routed_scaling = 1.0f;
  int32_t* topk_ids = nullptr;       // [n, top_k]
  float* topk_weights = nullptr;     // [n, top_k]
};
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream);

}  // namespace rs::cuda
