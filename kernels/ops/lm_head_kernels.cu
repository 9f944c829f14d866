#include "kernels/ops/lm_head.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(kLmHeadWarps * 32) lm_head_kernel(const LmHeadParams p) {
  const int v = blockIdx.x * kLmHeadWarps + (threadIdx.x >> 5);
  if (v < p.vocab) lm_head_row(p, v);
}
void launch_lm_head(const LmHeadParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  lm_head_kernel<<<(p.vocab + kLmHeadWarps - 1) / kLmHeadWarps, kLmHeadWarps * 32, 0, stream>>>(p);
}
}  // namespace rs::cuda
