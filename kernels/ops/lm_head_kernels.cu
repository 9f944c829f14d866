#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/lm_head.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void __launch_bounds__(kLmHeadWarps * 32) lm_head_kernel(const LmHeadParams p, int tokens_per_block) {
  pdl::wait();
  pdl::launch_dependents();
  const int v = blockIdx.x * kLmHeadWarps + (threadIdx.x >> 5);
  const int n0 = blockIdx.y * tokens_per_block;
  if (v < p.vocab) lm_head_row(p, v, n0, min(p.n, n0 + tokens_per_block));
}
__global__ void __launch_bounds__(lm_head_mma::kThreads) lm_head_mma_kernel(const LmHeadParams p) {
  pdl::wait();
  pdl::launch_dependents();
  lm_head_mma_tile(p, blockIdx.y * lm_head_mma::kBM, blockIdx.x * lm_head_mma::kBN);
}
void launch_lm_head(const LmHeadParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const dim3 grid_mma((p.vocab + lm_head_mma::kBN - 1) / lm_head_mma::kBN, (p.n + lm_head_mma::kBM - 1) / lm_head_mma::kBM);
  // Tensor cores pay with enough tokens, but only with enough tiles: one 64x64 tile walking all
  // of hidden alone (the MoE router at batch 64: 64 experts x 64 tokens) is a single block on one
  // SM, far slower than the warp-per-row path spread over the grid.
  if (p.n > 16 && p.hidden % lm_head_mma::kBK == 0 && grid_mma.x * grid_mma.y >= 32) {
    const dim3 grid = grid_mma;
    kern::launch_pdl(lm_head_mma_kernel, grid, dim3(lm_head_mma::kThreads), 0, stream, p);
    return;
  }
  // Few vocab rows (the router: 64 experts = 8 blocks across) get 8-token chunks over grid.y so
  // the grid still fills the GPU; a wide vocab keeps 32-token chunks (fewer passes over the weights).
  const int vocab_blocks = (p.vocab + kLmHeadWarps - 1) / kLmHeadWarps;
  const int tpb = vocab_blocks >= 64 ? kLmHeadTokensPerBlock : kLmHeadTokens;
  const dim3 grid(vocab_blocks, (p.n + tpb - 1) / tpb);
  kern::launch_pdl(lm_head_kernel, grid, dim3(kLmHeadWarps * 32), 0, stream, p, tpb);
}
}  // namespace rs::cuda
