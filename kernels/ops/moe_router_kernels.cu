#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/moe_router.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void moe_router_kernel(const MoeRouterParams p) {
  pdl::wait();
  pdl::launch_dependents();
  moe_router_token(p, blockIdx.x);
}
void launch_moe_router(const MoeRouterParams& p, cudaStream_t stream) {
  if (p.n > 0) kern::launch_pdl(moe_router_kernel, dim3(p.n), dim3(256), 0, stream, p);
}
}  // namespace rs::cuda
