#include "kernels/ops/moe_router.cuh"

namespace rs::cuda {
__global__ void moe_router_kernel(const MoeRouterParams p) { moe_router_token(p, blockIdx.x); }
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream) {
  if (p.n > 0) moe_router_kernel<<<p.n, 256, 0, stream>>>(p);
}
}  // namespace rs::cuda
