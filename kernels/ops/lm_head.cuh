#pragma once
#include "kernels/common/reduce.cuh"
#include "kernels/ops/lm_head_params.h"

namespace rs::cuda {

constexpr int kLmHeadWarps = 8;
constexpr int kLmHeadTokens = 8;        // tokens per pass over a weight row (register accumulators)
constexpr int kLmHeadTokensPerBlock = 32;  // token chunk of one block: many tokens spread over grid.y

// One vocab row per warp; each lane takes 8 contiguous elements per 256-wide step.
__device__ __forceinline__ void lm_head_row(const LmHeadParams& p, int v, int n_begin, int n_end) {
  const int lane = threadIdx.x & 31;
  const __nv_bfloat16* wr = p.w + static_cast<int64_t>(v) * p.hidden;
  for (int n0 = n_begin; n0 < n_end; n0 += kLmHeadTokens) {
    const int nt = min(kLmHeadTokens, n_end - n0);
    float acc[kLmHeadTokens] = {};
    // Unrolled so several 16-byte weight loads per lane are in flight (the lm_head streams 420 MB).
#pragma unroll 4
    for (int k = lane * 8; k < p.hidden; k += 256) {
      float wf[8];
      bf16x8_to_float(*reinterpret_cast<const uint4*>(wr + k), wf);
#pragma unroll
      for (int t = 0; t < kLmHeadTokens; ++t) {
        if (t < nt) {
          float xf[8];
          const int64_t row = p.rows ? p.rows[n0 + t] : n0 + t;
          bf16x8_to_float(*reinterpret_cast<const uint4*>(p.x + row * p.hidden + k), xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[t] += wf[j] * xf[j];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kLmHeadTokens; ++t) {
      const float s = warp_sum(acc[t]);
      if (lane == 0 && t < nt) p.logits[static_cast<int64_t>(n0 + t) * p.vocab + v] = s;
    }
  }
}

}  // namespace rs::cuda

#include <mma.h>

namespace rs::cuda {

// Many tokens (a wide decode batch, the router over a prefill chunk): a WMMA GEMM with fp32
// output, tile 64 tokens x 64 weight rows, so each weight byte is read once per 64 tokens.
namespace lm_head_mma {
constexpr int kBM = 64, kBN = 64, kBK = 64, kLd = kBK + 8;
constexpr int kThreads = 256;
}  // namespace lm_head_mma

__device__ __forceinline__ void lm_head_mma_tile(const LmHeadParams& p, int m0, int n0) {
  using namespace nvcuda;
  using namespace lm_head_mma;
  __shared__ __align__(128) __nv_bfloat16 xs[kBM * kLd];
  __shared__ __align__(128) __nv_bfloat16 ws[kBN * kLd];
  __shared__ __align__(128) float cs[kBM * (kBN + 4)];
  const int warp = threadIdx.x >> 5;
  const int wm = (warp >> 1) * 16, wn = (warp & 1) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.f);
  wmma::fill_fragment(acc[1], 0.f);
  for (int k0 = 0; k0 < p.hidden; k0 += kBK) {
    for (int i = threadIdx.x; i < kBM * (kBK / 8); i += blockDim.x) {
      const int r = i >> 3, v = i & 7;
      uint4 xv = make_uint4(0, 0, 0, 0), wv = make_uint4(0, 0, 0, 0);
      if (m0 + r < p.n) {
        const int64_t row = p.rows ? p.rows[m0 + r] : m0 + r;
        xv = *reinterpret_cast<const uint4*>(p.x + row * p.hidden + k0 + v * 8);
      }
      if (n0 + r < p.vocab) wv = *reinterpret_cast<const uint4*>(p.w + static_cast<int64_t>(n0 + r) * p.hidden + k0 + v * 8);
      *reinterpret_cast<uint4*>(xs + r * kLd + v * 8) = xv;
      *reinterpret_cast<uint4*>(ws + r * kLd + v * 8) = wv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::load_matrix_sync(a, xs + wm * kLd + kk, kLd);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(b, ws + (wn + j * 16) * kLd + kk, kLd);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }
  wmma::store_matrix_sync(cs + wm * (kBN + 4) + wn, acc[0], kBN + 4, wmma::mem_row_major);
  wmma::store_matrix_sync(cs + wm * (kBN + 4) + wn + 16, acc[1], kBN + 4, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < kBM * kBN; i += blockDim.x) {
    const int r = i >> 6, c = i & 63;
    if (m0 + r < p.n && n0 + c < p.vocab) p.logits[static_cast<int64_t>(m0 + r) * p.vocab + n0 + c] = cs[r * (kBN + 4) + c];
  }
}

}  // namespace rs::cuda
