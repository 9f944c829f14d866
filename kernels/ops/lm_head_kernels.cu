#include "kernels/ops/lm_head.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(kLmHeadWarps * 32) lm_head_kernel(const LmHeadParams p) {
  const int v = blockIdx.x * kLmHeadWarps + (threadIdx.x >> 5);
  const int n0 = blockIdx.y * kLmHeadTokensPerBlock;
  if (v < p.vocab) lm_head_row(p, v, n0, min(p.n, n0 + kLmHeadTokensPerBlock));
}
__global__ void __launch_bounds__(lm_head_mma::kThreads) lm_head_mma_kernel(const LmHeadParams p) {
  lm_head_mma_tile(p, blockIdx.y * lm_head_mma::kBM, blockIdx.x * lm_head_mma::kBN);
}
void launch_lm_head(const LmHeadParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  if (p.n > 16 && p.hidden % lm_head_mma::kBK == 0) {  // enough tokens for the tensor cores to pay
    const dim3 grid((p.vocab + lm_head_mma::kBN - 1) / lm_head_mma::kBN, (p.n + lm_head_mma::kBM - 1) / lm_head_mma::kBM);
    lm_head_mma_kernel<<<grid, lm_head_mma::kThreads, 0, stream>>>(p);
    return;
  }
  const dim3 grid((p.vocab + kLmHeadWarps - 1) / kLmHeadWarps, (p.n + kLmHeadTokensPerBlock - 1) / kLmHeadTokensPerBlock);
  lm_head_kernel<<<grid, kLmHeadWarps * 32, 0, stream>>>(p);
}
}  // namespace rs::cuda
