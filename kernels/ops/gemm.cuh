#pragma once
// Dense y[m, rows] = x[m, cols] @ W^T on tensor cores, for m above the GEMV range. Split-K
// (blockIdx.z) is used when the row x token tiles alone cannot fill the GPU; each split then
// writes fp32 partials and a second pass adds them in a fixed order (deterministic).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/ops/gemm_mma.cuh"
#include "kernels/ops/matmul_launch.h"

namespace rs::kern {

template <bool kFp8, int BN>
__device__ __forceinline__ void dense_gemm_op(const DenseGemmParams& p, uint8_t* smem) {
  pdl_launch_dependents();
  using Ops = mma::TileOperands<kFp8, BN>;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * mma::BM;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int64_t rows = p.w.rows, cols = p.w.cols;
  const int64_t esize = kFp8 ? 1 : 2;
  Ops op;
  op.any_valid = p.w.data;
#pragma unroll
  for (int i = 0; i < Ops::kWLoads; ++i) {
    const int64_t r = row0 + Ops::w_row(i);
    op.w[i] = r < rows ? static_cast<const uint8_t*>(p.w.data) + r * cols * esize : nullptr;
  }
  if constexpr (kFp8) {
    const int64_t r = row0 + Ops::w_row(0);
    const int64_t scale_cols = (cols + p.w.block_cols - 1) / p.w.block_cols;
    op.wscale = r < rows ? p.w.scale_inv + (r / p.w.block_rows) * scale_cols : nullptr;
  }
#pragma unroll
  for (int i = 0; i < Ops::kXLoads; ++i) {
    const int64_t t = tok0 + Ops::x_row(i);
    op.x[i] = t < p.m ? p.x + t * cols : nullptr;
  }
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * p.k_per_split;
  const int64_t k_end = k_begin + p.k_per_split < cols ? k_begin + p.k_per_split : cols;
  float acc[2][BN / 16][4];
  mma::mainloop<kFp8, BN>(op, k_begin, k_end, p.w.block_cols, smem, acc);
  mma::for_each_acc<BN>(acc, [&](int r, int n, float v) {
    const int64_t row = row0 + r, tok = tok0 + n;
    if (row >= rows || tok >= p.m) return;
    if (gridDim.z == 1) p.y[tok * rows + row] = __float2bfloat16_rn(v);
    else p.partial[(static_cast<int64_t>(blockIdx.z) * p.m + tok) * rows + row] = v;
  });
}

// y[i] = sum over splits of partial[s][i], in split order.
__device__ __forceinline__ void splitk_reduce_op(const float* partial, int splits, int64_t n,
                                                 __nv_bfloat16* y) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < splits; ++k) s += partial[k * n + i];
    y[i] = __float2bfloat16_rn(s);
  }
}

}  // namespace rs::kern
