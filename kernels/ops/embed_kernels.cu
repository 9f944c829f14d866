#include "kernels/ops/embed.cuh"

namespace rs::cuda {
__global__ void embed_kernel(const EmbedParams p) { embed_row(p, blockIdx.x); }
void launch_embed(const EmbedParams& p, cudaStream_t stream) {
  if (p.n > 0) embed_kernel<<<p.n, 256, 0, stream>>>(p);
}
}  // namespace rs::cuda
