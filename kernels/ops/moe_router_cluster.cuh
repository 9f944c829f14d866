#pragma once
// The fused router (post-attention add + RMSNorm, logits, selection) for one or two tokens, as
// one cluster of 8 blocks. Why: in the 64-block fused router (moe_router.cuh) every logit went
// through L2 (store, __threadfence, an atomic count, the last block's reload) after two more
// serial L2 trips for x and the norm weight. On the H200 that chain ended 9.7 us after o_proj
// (bf16; 11.8 us FP8, timeline of 2026-11-30) while the experts' weights streamed behind it.
// Here each block holds its experts' weight rows and the norm weight in registers from before
// the wait, and the logits meet in block 0's shared memory through distributed shared memory
// and one cluster barrier. Measured: its chain ends 8.4 us (bf16) and 7.9 us (FP8) after o_proj;
// the wait's release, x's load and the kernel's completion are most of what is left. The forward
// pass uses it with FP8 experts only (forward_pass.cpp says why).
//
// The arithmetic is the 64-block kernel's, in the same order (per-thread sums over the same
// vectors, warp sums, warps added 0..7), so both give the same bits.
#include <cooperative_groups.h>

#include "kernels/ops/moe_router.cuh"

namespace rs::cuda {

constexpr int kRouterClusterBlocks = 8;     // portable cluster size
constexpr int kRouterClusterSlots = 8;      // 16-byte weight vectors a thread holds
constexpr int kRouterClusterMaxTokens = 2;

// 16-byte vectors of one hidden row per thread.
__host__ __device__ inline int router_cluster_vecs(int hidden) {
  return (hidden / 8 + kRouterThreads - 1) / kRouterThreads;
}
__host__ __device__ inline bool router_cluster_supported(int n, int hidden, int experts, int n_group, int top_k) {
  return n >= 1 && n <= kRouterClusterMaxTokens && router_fused_supported(hidden, experts, n_group, top_k) &&
         experts % kRouterClusterBlocks == 0 &&
         (experts / kRouterClusterBlocks) * router_cluster_vecs(hidden) <= kRouterClusterSlots;
}

// The compact selection of one token from block 0's shared logits, as one out-of-line copy: the
// dry run before the wait and the real selection after it then execute the same instructions.
// Inlined (as the selection is everywhere else), each call site is its own copy of the code and
// the dry run warms only itself. Scalars, not the parameter struct: a struct passed to an
// out-of-line call would go through local memory on the launch's critical path.
static __device__ __noinline__ void router_cluster_select_compact(int experts, int top_k, bool normalize,
                                                                  bool scale_after_normalize, float routed_scaling,
                                                                  int32_t* ids, float* weights, float* margins, int t,
                                                                  const float* logits_row, int32_t* ids_s0,
                                                                  int32_t* ids_s1, float* weights_s0, float* weights_s1) {
  MoeRouterParams q;
  q.experts = experts;
  q.top_k = top_k;
  q.normalize = normalize;
  q.scale_after_normalize = scale_after_normalize;
  q.routed_scaling = routed_scaling;
  q.topk_ids = ids;
  q.topk_weights = weights;
  q.margins = margins;
  q.topk_ids_side[0] = ids_s0;
  q.topk_ids_side[1] = ids_s1;
  q.topk_weights_side[0] = weights_s0;
  q.topk_weights_side[1] = weights_s1;
  router_select_compact<true>(q, t, logits_row);
}
__device__ __forceinline__ void router_cluster_select(const MoeRouterParams& p, int t, const float* logits_row,
                                                      float* wscratch) {
  if (p.select_out_of_line && router_compact_ok(p))
    router_cluster_select_compact(p.experts, p.top_k, p.normalize, p.scale_after_normalize, p.routed_scaling,
                                  p.topk_ids, p.topk_weights, p.margins, t, logits_row, p.topk_ids_side[0],
                                  p.topk_ids_side[1], p.topk_weights_side[0], p.topk_weights_side[1]);
  else
    moe_router_select_warp<true>(p, t, logits_row, wscratch);
}

// V = router_cluster_vecs(hidden). Block `rank` of the cluster owns experts [rank*EB, (rank+1)*EB).
template <int V>
__device__ __forceinline__ void moe_router_cluster_block(const LmHeadParams& lg, const MoeRouterParams& p,
                                                         const RouterNormIn& norm, float* wscratch) {
  namespace cg = cooperative_groups;
  constexpr int EBmax = kRouterClusterSlots / V;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  __shared__ float logits_s[kRouterClusterMaxTokens][kRouterMaxExperts];  // read in block 0 only
  __shared__ float red[kRouterWarps][EBmax][kRouterClusterMaxTokens];
  __shared__ float nscratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vecs = lg.hidden / 8, EB = p.experts / kRouterClusterBlocks, e0 = rank * EB;
  const int n = p.n;
  // Weights (router rows, norm weight) are constant: into registers before the wait.
  uint4 wv[EBmax][V];
  float g[V][8];
#pragma unroll
  for (int e = 0; e < EBmax; ++e)
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int v = threadIdx.x + k * kRouterThreads;
      wv[e][k] = e < EB && v < vecs ? reinterpret_cast<const uint4*>(lg.w + static_cast<int64_t>(e0 + e) * lg.hidden)[v]
                                    : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int v = threadIdx.x + k * kRouterThreads;
#pragma unroll
    for (int j = 0; j < 8; ++j) g[k][j] = 0.f;
    if (norm.residual && v < vecs) router_norm_weight(norm, v, g[k]);
  }
  if (p.warm_select && rank == 0 && warp == 0) {
    // A dry run of the selection on zero logits into shared scratch, outputs discarded: its
    // instructions reach this SM's instruction caches before the wait instead of after it. Why:
    // block 0's one-warp selection is the launch's last step, and its SM ran the FFN's code since
    // the last layer; the wait probe put the selection at ~2.8 us after the cluster barrier
    // (H200, 2026-12-01). It warms the real selection's instructions only when both calls run
    // one out-of-line copy (router_cluster_select_compact): so, bf16 b1 1.821-1.834 ms a step
    // against 1.850-1.864 with the dry run and the selection inlined as two copies, and 1.841-1.866
    // with no dry run (docs/perf/cuda.md, twenty-first session).
    __shared__ float dry_logits[kRouterMaxExperts];
    __shared__ int32_t dry_ids[kRouterMaxGroups];
    __shared__ float dry_weights[kRouterMaxGroups];
    for (int e = lane; e < p.experts; e += 32) dry_logits[e] = 0.f;
    __syncwarp();
    MoeRouterParams dry = p;
    dry.topk_ids = dry_ids;
    dry.topk_weights = dry_weights;
    dry.margins = nullptr;
    dry.topk_ids_side[0] = dry.topk_ids_side[1] = nullptr;
    dry.topk_weights_side[0] = dry.topk_weights_side[1] = nullptr;
    router_cluster_select(dry, 0, dry_logits, wscratch);
  }
  pdl::wait();
  // Right away: the expert launch's blocks then start on the other SMs and copy their first
  // stages during this chain (H200 bf16: 2.056-2.063 ms a step; 2.074-2.091 triggering after the
  // cluster barrier, 2.139-2.163 after the selection).
  pdl::launch_dependents();
  float acc[EBmax][kRouterClusterMaxTokens];
#pragma unroll
  for (int e = 0; e < EBmax; ++e)
#pragma unroll
    for (int t = 0; t < kRouterClusterMaxTokens; ++t) acc[e][t] = 0.f;
#pragma unroll
  for (int t = 0; t < kRouterClusterMaxTokens; ++t) {
    if (t >= n) break;  // block-uniform
    const int64_t row = static_cast<int64_t>(t) * lg.hidden;
    float y[V][8];
    if (norm.residual) {  // x = residual + delta in fp32, RMSNorm, bf16 (moe_router_fused_block's steps)
      float ss = 0.f;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int v = threadIdx.x + k * kRouterThreads;
#pragma unroll
        for (int j = 0; j < 8; ++j) y[k][j] = 0.f;
        // One block writes a fixed-point delta back as bf16 (ranks 0 and 1 have stores of their own).
        if (v < vecs) router_residual_add(norm, row, v, y[k], ss, rank == 2 ? norm.delta_out : nullptr);
      }
      const float inv = rsqrtf(block_sum(ss, nscratch) / lg.hidden + norm.eps);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int v = threadIdx.x + k * kRouterThreads;
        const uint4 yb = router_norm_round(y[k], inv, g[k], y[k]);  // in place: element by element
        if (rank == 0 && v < vecs) reinterpret_cast<uint4*>(norm.out + row)[v] = yb;
        if (rank == 1 && norm.out_side[0] && v < vecs) {  // every block has x: block 1 writes the copies
          reinterpret_cast<uint4*>(norm.out_side[0] + row)[v] = yb;
          reinterpret_cast<uint4*>(norm.out_side[1] + row)[v] = yb;
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int v = threadIdx.x + k * kRouterThreads;
        if (v < vecs) bf16x8_to_float(reinterpret_cast<const uint4*>(lg.x + row)[v], y[k]);
        else
#pragma unroll
          for (int j = 0; j < 8; ++j) y[k][j] = 0.f;
      }
    }
#pragma unroll
    for (int e = 0; e < EBmax; ++e)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float wf[8];
        bf16x8_to_float(wv[e][k], wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[e][t] += wf[j] * y[k][j];
      }
  }
#pragma unroll
  for (int e = 0; e < EBmax; ++e)
#pragma unroll
    for (int t = 0; t < kRouterClusterMaxTokens; ++t) {
      const float s = warp_sum(acc[e][t]);
      if (lane == 0) red[warp][e][t] = s;
    }
  __syncthreads();
  pdl::probe_mark(kern::kProbeStep1);  // the block's logits
  if (threadIdx.x < EB * n) {
    const int e = threadIdx.x % EB, t = threadIdx.x / EB;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kRouterWarps; ++w) s += red[w][e][t];
    cluster.map_shared_rank(&logits_s[0][0], 0)[t * kRouterMaxExperts + e0 + e] = s;
  }
  cluster.sync();  // release / acquire: every block's logits are in block 0's shared memory
  pdl::probe_mark(kern::kProbeStep2);
  if (norm.delta_fixed && rank != 0) {
    // Every block has read the sums (its logits, which used them, are in): blocks 1..7 zero them
    // for the next layer's mla_v_up_o, whose adds come after its wait, so after this grid; block
    // 0 goes straight on to the selection.
    constexpr int kZeroers = kRouterClusterBlocks - 1;
    const int words = n * lg.hidden, per = (words + kZeroers - 1) / kZeroers;
    for (int i = (rank - 1) * per + threadIdx.x; i < min(words, rank * per); i += kRouterThreads) norm.delta_fixed[i] = 0ull;
  }
  if (rank != 0 || warp >= n) return;
  for (int e = lane; e < p.experts; e += 32) lg.logits[static_cast<int64_t>(warp) * lg.vocab + e] = logits_s[warp][e];
  router_cluster_select(p, warp, logits_s[warp], wscratch + warp * router_warp_scratch_floats(p.experts));
  pdl::probe_mark(kern::kProbeStep3);
}

}  // namespace rs::cuda
