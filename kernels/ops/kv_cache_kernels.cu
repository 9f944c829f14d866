#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/kv_cache.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void kv_write_kernel(const KvWriteParams p) {
  pdl::wait();
  pdl::launch_dependents();
  kv_write_token(p, blockIdx.x);
}
__global__ void kv_gather_kernel(const KvGatherParams p) { kv_gather_row(p, blockIdx.x); }
__global__ void kv_copy_kernel(const KvCopyParams p) { kv_copy_block(p, blockIdx.x, blockIdx.y); }
void launch_kv_write(const KvWriteParams& p, cudaStream_t stream) {
  if (p.n > 0) kern::launch_pdl(kv_write_kernel, dim3(p.n), dim3(128), 0, stream, p);
}
void launch_kv_gather(const KvGatherParams& p, cudaStream_t stream) {
  if (p.len > 0) kv_gather_kernel<<<p.len, 128, 0, stream>>>(p);
}
void launch_kv_copy(const KvCopyParams& p, cudaStream_t stream) {
  if (p.count > 0) kv_copy_kernel<<<dim3(p.count, p.layers), 256, 0, stream>>>(p);
}
}  // namespace rs::cuda
