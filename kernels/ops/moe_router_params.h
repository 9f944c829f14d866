#pragma once
// MoE router on the GPU: from fp32 router logits (computed by the lm_head GEMV over the bf16
// router weight, fp32 accumulation), scoring (softmax | sigmoid), expert selection (greedy |
// group_limited_greedy | noaux_tc, the correction bias used for selection only), normalisation
// and routed scaling.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops/lm_head_params.h"

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
  // [n] nullable: the smallest gap at this token's group/expert cut; null also spares both
  // selections (moe_router.cuh) their extra rounds for it.
  float* margins = nullptr;
  // Nullable: the ids and weights again, one copy homed on each L2 side (kernels/common/l2_sides.h).
  int32_t* topk_ids_side[2] = {nullptr, nullptr};
  float* topk_weights_side[2] = {nullptr, nullptr};
  bool compact_select = true;        // the compact selection where it applies (moe_router.cuh); false: the general path
  bool warm_select = false;          // cluster router: a dry run of the selection before the wait (moe_router_cluster.cuh)
  bool select_out_of_line = false;   // cluster router: the compact selection as one out-of-line copy (moe_router_cluster.cuh)
};
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream);

// Router logits (fp32 GEMV over the bf16 router weight, lg.vocab = experts) and selection in one
// launch, for decode-sized token counts. `counters`: one int per chunk of 8 tokens
// (moe_router_fused_counters(n)), zero before the first launch; the kernel leaves them zero.
bool moe_router_fused_supported(const LmHeadParams& lg, const MoeRouterParams& p);
bool moe_router_fused_fits(int n, int hidden, int experts, int n_group, int top_k);
inline int moe_router_fused_counters(int n) { return (n + 7) / 8; }

// Optionally the fused router also does the post-attention add + RMSNorm of its input rows:
// x = bf16(RMSNorm(residual + delta) * weight) is computed in every block from the fp32 residual
// (not lg.x) and written to `out` by the blocks of expert 0, for the experts that follow. The
// residual itself is not updated: the caller adds `delta` in the next add + RMSNorm (as its first
// delta, so the fp32 additions happen in the reference's order). Up to kRouterNormMaxTokens rows.
struct RouterNormIn {
  const float* residual = nullptr;      // [n, hidden] fp32
  const __nv_bfloat16* delta = nullptr;  // [n, hidden] the attention output
  const float* weight = nullptr;         // [hidden] post_attention_layernorm
  __nv_bfloat16* out = nullptr;          // [n, hidden]
  __nv_bfloat16* out_side[2] = {nullptr, nullptr};  // nullable: out again on each L2 side (one token)
  // Nullable, one token, the cluster router only: delta as mla_v_up_o's fixed-point sums
  // (MlaVUpOParams::fixed) instead of `delta`; the router rounds them to bf16 (the value `delta`
  // would hold), writes that to delta_out for the next layer's add + RMSNorm, and zeroes the
  // words for the next layer's sums.
  unsigned long long* delta_fixed = nullptr;
  __nv_bfloat16* delta_out = nullptr;
  float eps = 1e-6f;
};
constexpr int kRouterNormMaxTokens = 16;
// allow_cluster: one or two tokens whose router rows fit the registers of an 8-block cluster
// (V2-Lite: 64 experts x 2048) take the cluster kernel (moe_router_cluster.cuh), the same bits
// with fewer trips through L2; set_router_cluster(false) keeps them all on the 64-block kernel
// (tests, A/B runs).
void launch_moe_router_fused(const LmHeadParams& lg, const MoeRouterParams& p, int* counters, cudaStream_t stream,
                             const RouterNormIn* norm = nullptr, bool allow_cluster = true);
void set_router_cluster(bool on);
bool moe_router_cluster_fits(int n, int hidden, int experts, int n_group, int top_k);
// Whether launch_moe_router_fused(..., allow_cluster = true) takes the cluster kernel (the only
// one that reads RouterNormIn::delta_fixed) for these shapes.
bool moe_router_cluster_takes(int n, int hidden, int experts, int n_group, int top_k);

}  // namespace rs::cuda
