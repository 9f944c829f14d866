#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/rmsnorm.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
// The norm weight is read before the wait (see add_rmsnorm_row); the residual only after it.
__global__ void __launch_bounds__(kAddRmsNormThreads) add_rmsnorm_kernel(const AddRmsNormParams p) {
  add_rmsnorm_row(p, blockIdx.x);
}
__global__ void __launch_bounds__(kAddRmsNormThreads) add_rmsnorm_any_kernel(const AddRmsNormParams p) {
  add_rmsnorm_row_any(p, blockIdx.x);
}
__global__ void rmsnorm_rows_kernel(const RmsNormRowsParams p) {
  pdl::wait();
  pdl::launch_dependents();
  rmsnorm_row(p, blockIdx.x);
}
void launch_add_rmsnorm(const AddRmsNormParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  if (add_rmsnorm_vectorized(p.hidden))
    kern::launch_pdl(add_rmsnorm_kernel, dim3(p.n), dim3(kAddRmsNormThreads), 0, stream, p);
  else
    kern::launch_pdl(add_rmsnorm_any_kernel, dim3(p.n), dim3(kAddRmsNormThreads), 0, stream, p);
}
void launch_rmsnorm_rows(const RmsNormRowsParams& p, cudaStream_t stream) {
  if (p.n > 0) kern::launch_pdl(rmsnorm_rows_kernel, dim3(p.n), dim3(256), 0, stream, p);
}
}  // namespace rs::cuda
