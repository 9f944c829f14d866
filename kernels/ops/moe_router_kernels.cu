#include "kernels/common/carveout.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/moe_router.cuh"

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
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream) {
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
                             const RouterNormIn* norm) {
  if (p.n <= 0) return;
  const size_t smem = size_t(kRouterWarps) * router_warp_scratch_floats(p.experts) * 4;
  const dim3 grid(p.experts, (p.n + kRouterWarps - 1) / kRouterWarps);
  kern::apply_carveout(moe_router_fused_kernel, "router");
  kern::launch_pdl(moe_router_fused_kernel, grid, dim3(kRouterThreads), smem, stream, lg, p, counters,
                   norm ? *norm : RouterNormIn{});
}
}  // namespace rs::cuda
