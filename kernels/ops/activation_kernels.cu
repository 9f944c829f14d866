#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/activation.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void silu_mul_kernel(const SiluMulParams p) {
  pdl::wait();
  pdl::launch_dependents();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += int64_t(gridDim.x) * blockDim.x)
    silu_mul_elem(p, i);
}
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.count <= 0) return;
  const int64_t blocks = std::min<int64_t>((p.count + 255) / 256, 65535);
  kern::launch_pdl(silu_mul_kernel, dim3(unsigned(blocks)), dim3(256), 0, stream, p);
}
}  // namespace rs::cuda
