#include "kernels/ops/activation.cuh"

namespace rs::cuda {
__global__ void silu_mul_kernel(const SiluMulParams p) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += int64_t(gridDim.x) * blockDim.x)
    silu_mul_elem(p, i);
}
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.count <= 0) return;
  const int64_t blocks = std::min<int64_t>((p.count + 255) / 256, 65535);
  silu_mul_kernel<<<int(blocks), 256, 0, stream>>>(p);
}
}  // namespace rs::cuda
