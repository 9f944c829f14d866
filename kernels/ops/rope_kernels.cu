#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/rope.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void rope_q_kernel(const RopeQParams p, int64_t total) {
  pdl::wait();
  pdl::launch_dependents();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) rope_q_pair(p, i);
}
void launch_rope_q(const RopeQParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.heads * (p.rope.rope_dim / 2);
  if (total > 0) kern::launch_pdl(rope_q_kernel, dim3(unsigned((total + 255) / 256)), dim3(256), 0, stream, p, total);
}
}  // namespace rs::cuda
