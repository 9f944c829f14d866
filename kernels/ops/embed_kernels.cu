#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/embed.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void embed_kernel(const EmbedParams p) {
  pdl::wait();
  pdl::launch_dependents();
  embed_row(p, blockIdx.x);
}
void launch_embed(const EmbedParams& p, cudaStream_t stream) {
  if (p.n > 0) kern::launch_pdl(embed_kernel, dim3(p.n), dim3(256), 0, stream, p);
}
}  // namespace rs::cuda
