// __global__ wrappers and launchers for the routed-expert FFN (gemv_experts.cuh for a few
// tokens, expert_gemm.cuh for many).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/common/smem_optin.h"
#include "kernels/ops/expert_gemm.cuh"
#include "kernels/ops/expert_lt_glue.cuh"
#include "kernels/ops/gemv_experts.cuh"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern {
namespace {

template <bool kFp8, int RPW, int MT, int U>
__global__ void __launch_bounds__(kGemvThreads, 1) expert_gemv_gate_up_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  expert_gemv_gate_up_op<kFp8, RPW, MT, U>(p, sr);
}

template <bool kFp8, int EPI, int MT, int U>
__global__ void __launch_bounds__(kGemvThreads, 1) expert_gemv_down_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  expert_gemv_down_op<kFp8, EPI, MT, U>(p, sr);
}

__global__ void __launch_bounds__(kMaxExperts) expert_group_kernel(ExpertGemmParams p) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ GroupSmem s;
  expert_group_op(p, s);
}

template <bool kFp8, int BN>
__global__ void __launch_bounds__(mma::THREADS, 2) expert_gemm_gate_up_kernel(ExpertGemmParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  pdl_wait();  // tile table from the group kernel, x / h from upstream
  expert_gemm_gate_up_op<kFp8, BN>(p, smem);
}

template <bool kFp8, int BN>
__global__ void __launch_bounds__(mma::THREADS, 2) expert_gemm_down_kernel(ExpertGemmParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  pdl_wait();  // tile table from the group kernel, x / h from upstream
  expert_gemm_down_op<kFp8, BN>(p, smem);
}

__global__ void expert_combine_kernel(ExpertGemmParams p) {
  pdl_launch_dependents();
  pdl_wait();
  expert_combine_op(p);
}

// cuBLASLt expert path glue (plain launches: the neighbours are cuBLASLt kernels and a host
// sync, so there is no PDL chain to join).
__global__ void expert_gather_rows_kernel(const __nv_bfloat16* x, const int* pair_token, int hidden,
                                          __nv_bfloat16* xs) {
  expert_gather_rows_op(x, pair_token, hidden, xs);
}

__global__ void swiglu_inplace_kernel(__nv_bfloat16* gu, int rows, int inter) { swiglu_inplace_op(gu, rows, inter); }

template <bool kFp8, int MT>
void expert_gemv_mt(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  constexpr int U = kFp8 ? 4 : 8;
  constexpr int RPW = 1;
  // Down: EPI experts' rows per warp at once; U' covers one expert row of width inter in a
  // single pass for V2-Lite (1408 = 176 bf16 chunks <= 32*6, 88 FP8 chunks <= 32*3).
  constexpr int EPI = 3, UD = kFp8 ? 3 : 6;
  const int max_active = std::min(p.experts.num_experts, p.m * p.top_k);
  // Gate/up: about two resident blocks per SM over all active experts (register-bound), each
  // looping over row groups; more blocks would only repeat the routing prologue in later waves.
  const int row_groups = (p.experts.inter + kGemvWarps * RPW - 1) / (kGemvWarps * RPW);
  const int per_expert = std::max(1, std::min(row_groups, (2 * sm_count + max_active - 1) / max_active));
  const dim3 g1(per_expert, max_active);
  launch_pdl(expert_gemv_gate_up_kernel<kFp8, RPW, MT, U>, g1, dim3(kGemvThreads), 0, s, p);
  const dim3 g2((p.experts.hidden + kGemvWarps - 1) / kGemvWarps);
  launch_pdl(expert_gemv_down_kernel<kFp8, EPI, MT, UD>, g2, dim3(kGemvThreads), 0, s, p);
}

template <bool kFp8>
void expert_gemv_typed(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  if (p.m <= 1) expert_gemv_mt<kFp8, 1>(p, sm_count, s);
  else if (p.m <= 2) expert_gemv_mt<kFp8, 2>(p, sm_count, s);
  else if (p.m <= 4) expert_gemv_mt<kFp8, 4>(p, sm_count, s);
  else expert_gemv_mt<kFp8, 8>(p, sm_count, s);
}

template <bool kFp8, int BN>
void expert_gemm_bn(const ExpertGemmParams& p, cudaStream_t s) {
  constexpr int smem = mma::SmemLayout<kFp8, BN>::bytes;
  // A refusal shows as the launch's error, which the caller checks.
  allow_dynamic_smem(expert_gemm_gate_up_kernel<kFp8, BN>, smem);
  allow_dynamic_smem(expert_gemm_down_kernel<kFp8, BN>, smem);
  const dim3 g1((p.experts.inter + mma::BM / 2 - 1) / (mma::BM / 2), p.max_tiles);
  launch_pdl(expert_gemm_gate_up_kernel<kFp8, BN>, g1, dim3(mma::THREADS), smem, s, p);
  const dim3 g2((p.experts.hidden + mma::BM - 1) / mma::BM, p.max_tiles);
  launch_pdl(expert_gemm_down_kernel<kFp8, BN>, g2, dim3(mma::THREADS), smem, s, p);
}

template <bool kFp8>
void expert_gemm_typed(const ExpertGemmParams& p, cudaStream_t s) {
  switch (p.tile_tokens) {
    case 16: expert_gemm_bn<kFp8, 16>(p, s); break;
    case 32: expert_gemm_bn<kFp8, 32>(p, s); break;
    case 64: expert_gemm_bn<kFp8, 64>(p, s); break;
    default: expert_gemm_bn<kFp8, 128>(p, s); break;
  }
}

}  // namespace

void launch_expert_gemv(const ExpertGemvParams& p, bool fp8, int sm_count, cudaStream_t s) {
  if (fp8) expert_gemv_typed<true>(p, sm_count, s);
  else expert_gemv_typed<false>(p, sm_count, s);
}

void launch_expert_gemm(const ExpertGemmParams& p, bool fp8, cudaStream_t s) {
  launch_pdl(expert_group_kernel, dim3(1), dim3(kMaxExperts), 0, s, p);
  if (fp8) expert_gemm_typed<true>(p, s);
  else expert_gemm_typed<false>(p, s);
  launch_pdl(expert_combine_kernel, dim3(p.m), dim3(256), 0, s, p);
}

void launch_expert_group(const ExpertGemmParams& p, cudaStream_t s) {
  launch_pdl(expert_group_kernel, dim3(1), dim3(kMaxExperts), 0, s, p);
}

void launch_expert_combine(const ExpertGemmParams& p, cudaStream_t s) {
  launch_pdl(expert_combine_kernel, dim3(p.m), dim3(256), 0, s, p);
}

void launch_expert_gather_rows(const __nv_bfloat16* x, const int* pair_token, int pairs, int hidden,
                               __nv_bfloat16* xs, cudaStream_t s) {
  if (pairs <= 0) return;
  expert_gather_rows_kernel<<<pairs, 256, 0, s>>>(x, pair_token, hidden, xs);
}

void launch_swiglu_inplace(__nv_bfloat16* gu, int rows, int inter, cudaStream_t s) {
  if (rows <= 0) return;
  const int64_t n = int64_t(rows) * inter;
  const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  swiglu_inplace_kernel<<<grid, 256, 0, s>>>(gu, rows, inter);
}

}  // namespace rs::kern
