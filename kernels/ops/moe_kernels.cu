// __global__ wrappers and launchers for the routed-expert FFN (gemv_experts.cuh for a few
// tokens, expert_gemm.cuh for many).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/ops/expert_gemm.cuh"
#include "kernels/ops/gemv_experts.cuh"
#include "kernels/ops/matmul_launch.h"

namespace rs::kern {
namespace {

template <bool kFp8, int RPW, int MT, int U>
__global__ void __launch_bounds__(kGemvThreads, 1) expert_gemv_gate_up_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  expert_gemv_gate_up_op<kFp8, RPW, MT, U>(p, sr);
}

template <bool kFp8, int RPW, int MT, int U>
__global__ void __launch_bounds__(kGemvThreads, 1) expert_gemv_down_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  expert_gemv_down_op<kFp8, RPW, MT, U>(p, sr);
}

__global__ void __launch_bounds__(kMaxExperts) expert_group_kernel(ExpertGemmParams p) {
  __shared__ GroupSmem s;
  expert_group_op(p, s);
}

template <bool kFp8, int BN>
__global__ void __launch_bounds__(mma::THREADS, 2) expert_gemm_gate_up_kernel(ExpertGemmParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  expert_gemm_gate_up_op<kFp8, BN>(p, smem);
}

template <bool kFp8, int BN>
__global__ void __launch_bounds__(mma::THREADS, 2) expert_gemm_down_kernel(ExpertGemmParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  expert_gemm_down_op<kFp8, BN>(p, smem);
}

__global__ void expert_combine_kernel(ExpertGemmParams p) { expert_combine_op(p); }

template <bool kFp8, int MT>
void expert_gemv_mt(const ExpertGemvParams& p, cudaStream_t s) {
  constexpr int U = kFp8 ? 4 : 8;
  constexpr int RPW = 1;
  const int max_active = std::min(p.experts.num_experts, p.m * p.top_k);
  const dim3 g1((p.experts.inter + kGemvWarps * RPW - 1) / (kGemvWarps * RPW), max_active);
  expert_gemv_gate_up_kernel<kFp8, RPW, MT, U><<<g1, kGemvThreads, 0, s>>>(p);
  const dim3 g2((p.experts.hidden + kGemvWarps * RPW - 1) / (kGemvWarps * RPW));
  expert_gemv_down_kernel<kFp8, RPW, MT, U><<<g2, kGemvThreads, 0, s>>>(p);
}

template <bool kFp8>
void expert_gemv_typed(const ExpertGemvParams& p, cudaStream_t s) {
  if (p.m <= 1) expert_gemv_mt<kFp8, 1>(p, s);
  else if (p.m <= 2) expert_gemv_mt<kFp8, 2>(p, s);
  else if (p.m <= 4) expert_gemv_mt<kFp8, 4>(p, s);
  else expert_gemv_mt<kFp8, 8>(p, s);
}

template <bool kFp8, int BN>
void expert_gemm_bn(const ExpertGemmParams& p, cudaStream_t s) {
  constexpr int smem = mma::SmemLayout<kFp8, BN>::bytes;
  static const cudaError_t a1 = cudaFuncSetAttribute(
      expert_gemm_gate_up_kernel<kFp8, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  static const cudaError_t a2 = cudaFuncSetAttribute(
      expert_gemm_down_kernel<kFp8, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  (void)a1;
  (void)a2;
  const dim3 g1((p.experts.inter + mma::BM / 2 - 1) / (mma::BM / 2), p.max_tiles);
  expert_gemm_gate_up_kernel<kFp8, BN><<<g1, mma::THREADS, smem, s>>>(p);
  const dim3 g2((p.experts.hidden + mma::BM - 1) / mma::BM, p.max_tiles);
  expert_gemm_down_kernel<kFp8, BN><<<g2, mma::THREADS, smem, s>>>(p);
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

void launch_expert_gemv(const ExpertGemvParams& p, bool fp8, cudaStream_t s) {
  if (fp8) expert_gemv_typed<true>(p, s);
  else expert_gemv_typed<false>(p, s);
}

void launch_expert_gemm(const ExpertGemmParams& p, bool fp8, cudaStream_t s) {
  expert_group_kernel<<<1, kMaxExperts, 0, s>>>(p);
  if (fp8) expert_gemm_typed<true>(p, s);
  else expert_gemm_typed<false>(p, s);
  expert_combine_kernel<<<p.m, 256, 0, s>>>(p);
}

}  // namespace rs::kern
