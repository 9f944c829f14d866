#include "kernels/ops/rmsnorm.cuh"

namespace rs::cuda {
__global__ void add_rmsnorm_kernel(const AddRmsNormParams p) { add_rmsnorm_row(p, blockIdx.x); }
__global__ void rmsnorm_rows_kernel(const RmsNormRowsParams p) { rmsnorm_row(p, blockIdx.x); }
void launch_add_rmsnorm(const AddRmsNormParams& p, cudaStream_t stream) {
  if (p.n > 0) add_rmsnorm_kernel<<<p.n, 512, 0, stream>>>(p);
}
void launch_rmsnorm_rows(const RmsNormRowsParams& p, cudaStream_t stream) {
  if (p.n > 0) rmsnorm_rows_kernel<<<p.n, 256, 0, stream>>>(p);
}
}  // namespace rs::cuda
