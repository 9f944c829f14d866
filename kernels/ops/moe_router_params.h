#pragma once
// MoE router on the GPU: from fp32 router logits (computed by the lm_head GEMV over the bf16
// router weight, fp32 accumulation), scoring (softmax | sigmoid), expert selection (greedy |
// group_limited_greedy | noaux_tc, the correction bias used for selection only), normalisation
// and routed scaling.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

enum class RouterScoring : uint8_t { Softmax, Sigmoid };
enum class RouterTopk : uint8_t { Greedy, GroupLimitedGreedy, NoauxTc };

struct MoeRouterParams {
  const float* logits = nullptr;     // [n, experts]
  const float* bias = nullptr;       // [experts] e_score_correction_bias, nullable
  int n = 0, experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  RouterScoring scoring = RouterScoring::Softmax;
  RouterTopk method = RouterTopk::Greedy;
  bool normalize = false;              // divide by the selected scores' sum (host decides: V2 needs k > 1)
  bool scale_after_normalize = true;  // V3 always scales; V2 scales only when not normalising
  float routed_scaling = 1.0f;
  int32_t* topk_ids = nullptr;       // [n, top_k]
  float* topk_weights = nullptr;     // [n, top_k]
  float* margins = nullptr;          // [n] nullable: smallest gap at this token's group/expert cut
};
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream);

}  // namespace rs::cuda
