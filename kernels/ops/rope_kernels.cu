#include "kernels/ops/rope.cuh"

namespace rs::cuda {
__global__ void rope_q_kernel(const RopeQParams p, int64_t total) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) rope_q_pair(p, i);
}
void launch_rope_q(const RopeQParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.heads * (p.rope.rope_dim / 2);
  if (total > 0) rope_q_kernel<<<(total + 255) / 256, 256, 0, stream>>>(p, total);
}
}  // namespace rs::cuda
