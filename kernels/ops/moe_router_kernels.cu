#include <cstdio>
#include <cstdlib>

#include "kernels/common/carveout.h"
#include "kernels/common/env_int.h"
#include "kernels/common/l2_sides.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/moe_router.cuh"
#include "kernels/ops/expert_stream_geom.h"
#include "kernels/ops/moe_router_cluster.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void __launch_bounds__(kRouterThreads) moe_router_kernel(const MoeRouterParams p) {
  extern __shared__ float router_scratch[];
  pdl::wait();
  pdl::launch_dependents();
  const int warp = threadIdx.x >> 5;
  const int t = blockIdx.x * kRouterWarps + warp;
  if (t < p.n)
    moe_router_select_warp(p, t, p.logits + static_cast<int64_t>(t) * p.experts,
                           router_scratch + warp * router_warp_scratch_floats(p.experts));
}
__global__ void __launch_bounds__(kRouterThreads) moe_router_fused_kernel(const LmHeadParams lg, const MoeRouterParams p,
                                                                          int* counters, const RouterNormIn norm) {
  extern __shared__ float router_scratch[];
  moe_router_fused_block(lg, p, counters, norm, blockIdx.x, blockIdx.y, router_scratch);
}
template <int V>
__global__ void __launch_bounds__(kRouterThreads) moe_router_cluster_kernel(const LmHeadParams lg, const MoeRouterParams p,
                                                                            const RouterNormIn norm) {
  extern __shared__ float router_scratch[];
  moe_router_cluster_block<V>(lg, p, norm, router_scratch);
  pdl::probe_mark(kern::kProbeEnd);
}
namespace {
static_assert(kern::kXsLateBlocks == kRouterClusterBlocks, "the FFN's late blocks are the cluster router's SMs");
// RS_ROUTER_CLUSTER=0: the 64-block fused router where the cluster one applies (A/B runs);
// set_router_cluster() switches at run time.
bool g_router_cluster = kern::env_int("RS_ROUTER_CLUSTER", 1, 0, 1) == 1;
// The cluster router's dry run of its selection before the wait, and that selection as one
// out-of-line function so that the dry run warms the instructions the real one runs
// (moe_router_cluster.cuh); H200, V2-Lite bf16 b1, 2026-12-01: 1.821-1.834 ms a step against
// 1.850-1.864 with two inlined copies and 1.841-1.866 without the dry run (one call; ~1% in a
// second). RS_ROUTER_WARM=0 / RS_ROUTER_SELECT_CALL=0 turn them off (A/B runs).
const bool g_router_warm = kern::env_int("RS_ROUTER_WARM", 1, 0, 1) == 1;
// One token's routing and x also into pages homed on each L2 side (kernels/common/l2_sides.h), where
// the sides were measured; RS_ROUTER_L2_SIDES=0 switches it off.
const bool g_router_l2_sides = kern::env_int("RS_ROUTER_L2_SIDES", 1, 0, 1) == 1;
const bool g_router_select_call = kern::env_int("RS_ROUTER_SELECT_CALL", 1, 0, 1) == 1;
template <int V>
void launch_router_cluster(const LmHeadParams& lg, const MoeRouterParams& p, size_t smem, cudaStream_t stream,
                           const RouterNormIn& norm) {
  kern::apply_carveout(moe_router_cluster_kernel<V>, "router_cluster");
  (void)kern::launch_with_pdl(moe_router_cluster_kernel<V>, dim3(kRouterClusterBlocks), dim3(kRouterThreads),
                              kRouterClusterBlocks, smem, stream, kern::matmul_pdl(), lg, p, norm);
}
}  // namespace
void set_router_cluster(bool on) { g_router_cluster = on; }
bool moe_router_cluster_fits(int n, int hidden, int experts, int n_group, int top_k) {
  return router_cluster_supported(n, hidden, experts, n_group, top_k) && router_cluster_vecs(hidden) != 3;
}
bool moe_router_cluster_takes(int n, int hidden, int experts, int n_group, int top_k) {
  const int vecs = router_cluster_vecs(hidden);  // the widths launch_moe_router_fused instantiates
  return g_router_cluster && moe_router_cluster_fits(n, hidden, experts, n_group, top_k) &&
         (vecs == 1 || vecs == 2 || vecs == 4);
}
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream) {
  kern::l2_sided_inputs_mark(nullptr, nullptr, nullptr);  // this routing has no sided copies
  if (p.n <= 0) return;
  const size_t smem = size_t(kRouterWarps) * router_warp_scratch_floats(p.experts) * 4;
  kern::launch_pdl(moe_router_kernel, dim3((p.n + kRouterWarps - 1) / kRouterWarps), dim3(kRouterThreads), smem,
                   stream, p);
}
bool moe_router_fused_fits(int n, int hidden, int experts, int n_group, int top_k) {
  return n <= kRouterFusedMaxTokens && router_fused_supported(hidden, experts, n_group, top_k);
}
bool moe_router_fused_supported(const LmHeadParams& lg, const MoeRouterParams& p) {
  return lg.n == p.n && lg.vocab == p.experts && lg.rows == nullptr &&
         moe_router_fused_fits(lg.n, lg.hidden, p.experts, p.n_group, p.top_k);
}
void launch_moe_router_fused(const LmHeadParams& lg, const MoeRouterParams& p, int* counters, cudaStream_t stream,
                             const RouterNormIn* norm, bool allow_cluster) {
  kern::l2_sided_inputs_mark(nullptr, nullptr, nullptr);  // until this launch writes sided copies
  if (p.n <= 0) return;
  const size_t smem = size_t(kRouterWarps) * router_warp_scratch_floats(p.experts) * 4;
  if (allow_cluster && g_router_cluster && moe_router_cluster_fits(p.n, lg.hidden, p.experts, p.n_group, p.top_k)) {
    RouterNormIn nin = norm ? *norm : RouterNormIn{};
    MoeRouterParams pc = p;
    pc.warm_select = g_router_warm;
    pc.select_out_of_line = g_router_select_call;
    // One token: its routing and x again on each L2 side, for the expert launch that follows.
    const kern::L2Sides& sides = kern::l2_sides(false);
    const bool sided = g_router_l2_sides && sides.valid && p.n == 1 && norm && nin.residual && nin.out &&
                       kern::l2_sided_inputs_fit(lg.hidden, p.top_k);
    if (sided) {
      for (int side = 0; side < 2; ++side) {
        pc.topk_ids_side[side] = kern::l2_side_ids(sides, side);
        pc.topk_weights_side[side] = kern::l2_side_weights(sides, side);
        nin.out_side[side] = static_cast<__nv_bfloat16*>(kern::l2_side_x(sides, side));
      }
      kern::l2_sided_inputs_mark(nin.out, pc.topk_ids, pc.topk_weights);
    }
    switch (router_cluster_vecs(lg.hidden)) {
      case 1: launch_router_cluster<1>(lg, pc, smem, stream, nin); return;
      case 2: launch_router_cluster<2>(lg, pc, smem, stream, nin); return;
      case 4: launch_router_cluster<4>(lg, pc, smem, stream, nin); return;
      default: break;  // 3: the 64-block kernel
    }
  }
  if (norm && norm->delta_fixed) {  // the caller checked moe_router_cluster_takes: a bug if reached
    std::fprintf(stderr, "launch_moe_router_fused: a fixed-point delta needs the cluster router\n");
    std::abort();
  }
  kern::l2_sided_inputs_mark(nullptr, nullptr, nullptr);  // the 64-block kernel writes none
  const dim3 grid(p.experts, (p.n + kRouterWarps - 1) / kRouterWarps);
  kern::apply_carveout(moe_router_fused_kernel, "router");
  kern::launch_pdl(moe_router_fused_kernel, grid, dim3(kRouterThreads), smem, stream, lg, p, counters,
                   norm ? *norm : RouterNormIn{});
}
}  // namespace rs::cuda
