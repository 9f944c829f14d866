#include "kernels/common/sm_count.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/lm_head.cuh"
#include "kernels/ops/matmul_launch.h"

#include <cstdint>

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
namespace {
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool lm_head_gemv_ok(const LmHeadParams& p) {
  return p.hidden % 8 == 0 && aligned16(p.w) && aligned16(p.x) && p.vocab > 0;
}
int sm_count() {
  const int n = kern::current_sm_count();
  return n > 0 ? n : 132;  // only sizes the grid; a launch error would surface at the caller's check
}
}  // namespace

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
  // Few rows (decode): the dense GEMV with fp32 outputs, which streams the weights at ~4 TB/s
  // (the warp-per-row kernel below reached ~1.7 TB/s on the 420 MB V2 lm_head): several rows a
  // warp, up to 8 loads in flight a lane, balanced shares over one wave of resident blocks, and
  // the weight prefetch overlapping the predecessor (PDL). Needs whole 16-byte chunks.
  if (p.n <= kLmHeadGemvMaxRows && lm_head_gemv_ok(p) && !kern::gemv_ab(kern::GemvAb::kOldLmHead)) {
    kern::DenseGemvParams g;
    g.w[0].type = WeightType::BF16;
    g.w[0].rows = p.vocab;
    g.w[0].cols = p.hidden;
    g.w[0].data = p.w;
    g.y[0] = p.logits;
    g.jobs = 1;
    g.x = p.x;
    g.x_rows = p.rows;
    g.m = p.n;
    g.out_fp32 = true;
    if (kern::launch_gemv_dense_jobs(g, sm_count(), stream)) return;
    // Not launched (cannot happen for checked bf16 inputs): the warp-per-row kernel below.
  }
  // Few vocab rows (the router: 64 experts = 8 blocks across) get 8-token chunks over grid.y so
  // the grid still fills the GPU; a wide vocab keeps 32-token chunks (fewer passes over the weights).
  const int vocab_blocks = (p.vocab + kLmHeadWarps - 1) / kLmHeadWarps;
  const int tpb = vocab_blocks >= 64 ? kLmHeadTokensPerBlock : kLmHeadTokens;
  const dim3 grid(vocab_blocks, (p.n + tpb - 1) / tpb);
  kern::launch_pdl(lm_head_kernel, grid, dim3(kLmHeadWarps * 32), 0, stream, p, tpb);
}
}  // namespace rs::cuda
