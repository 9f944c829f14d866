#pragma once
// Bandwidth-bound matrix-vector products for a few token rows (decode). The weight matrix is
// streamed once: each warp owns RPW rows (and one of KS slices of their width), its lanes split
// the slice into 16-byte chunks, and U chunks per row are loaded before the first use so that
// RPW*U 16-byte loads per lane are in flight. Activations (a few KB) are re-read through L1/L2.
// Partial sums stay in registers and are reduced with one butterfly per (row, token) at the
// end; with KS > 1 the slices of a row meet in shared memory.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern {

using rs::cuda::warp_sum;

constexpr int kGemvWarps = 8;  // warps per block
constexpr int kGemvThreads = kGemvWarps * 32;

// Elements per 16-byte chunk of a weight row.
template <bool kFp8>
constexpr int chunk_elems() { return kFp8 ? 16 : 8; }

// One weight row as the warp sees it: its bytes and, for FP8, its row of block scales.
struct WeightRow {
  const uint8_t* data = nullptr;  // nullptr: row outside the matrix, contributes nothing
  const float* scale = nullptr;   // FP8: scale_inv + (row / block_rows) * scale_cols
};

__device__ __forceinline__ WeightRow weight_row(const rs::cuda::DeviceMatrix& w, int64_t row,
                                                bool fp8) {
  WeightRow r;
  if (row >= w.rows) return r;
  const int64_t elem_bytes = fp8 ? 1 : 2;
  r.data = static_cast<const uint8_t*>(w.data) + row * w.cols * elem_bytes;
  if (fp8) {
    const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
    r.scale = w.scale_inv + (row / w.block_rows) * scale_cols;
  }
  return r;
}

// part[r][t] = this lane's share of dot(row r, x row t) over chunks [c_begin, c_end). Rows with
// data == nullptr and tokens with x == nullptr are skipped (their part stays 0). With kXPerRow
// each row has its own token rows x[r][t] (experts with their own activations), else all rows
// use x[0][t]. The caller reduces across the warp. FP8 rows are dequantised per 16-element
// chunk (a chunk never straddles a scale block because block_cols % 16 == 0), fp32 accumulate.
// pdl_wait() sits between the first weight loads and the first activation read.
template <bool kFp8, int RPW, int MT, int U, bool kXPerRow = false>
__device__ __forceinline__ void gemv_warp_partial(const WeightRow (&rows)[RPW],
                                                  const __nv_bfloat16* const (&x)[kXPerRow ? RPW : 1][MT],
                                                  int64_t c_begin, int64_t c_end, int block_cols,
                                                  float (&part)[RPW][MT]) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int t = 0; t < MT; ++t) part[r][t] = 0.f;

  for (int64_t c0 = c_begin; c0 < c_end; c0 += 32 * U) {
    uint4 w[RPW][U];
    float s[RPW][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * 32 + lane;
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        if (c < c_end && rows[r].data) {
          w[r][u] = ld_stream16(rows[r].data + c * 16);
          if constexpr (kFp8) s[r][u] = __ldg(rows[r].scale + (c * E) / block_cols);
        } else {
          w[r][u] = make_uint4(0, 0, 0, 0);
          if constexpr (kFp8) s[r][u] = 0.f;
        }
      }
    }
    if constexpr (!kXPerRow) {
      // One activation load per (token, chunk), used by all RPW rows: fewer registers and L1
      // loads than per-row loads (measured: 68 vs 95 registers for one row, one token).
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const __nv_bfloat16* xr = x[0][t];
        if (!xr) continue;  // warp-uniform
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * 32 + lane;
          if (c >= c_end) continue;
          if constexpr (kFp8) {
            const uint4 x0 = ld_cached16(xr + c * 16);
            const uint4 x1 = ld_cached16(xr + c * 16 + 8);
#pragma unroll
            for (int r = 0; r < RPW; ++r) part[r][t] = fmaf(s[r][u], dot16_e4m3(w[r][u], x0, x1), part[r][t]);
          } else {
            const uint4 xv = ld_cached16(xr + c * 8);
#pragma unroll
            for (int r = 0; r < RPW; ++r) part[r][t] = dot8_bf16(w[r][u], xv, part[r][t]);
          }
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const __nv_bfloat16* xr = x[r][t];
          if (!xr || !rows[r].data) continue;  // warp-uniform
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t c = c0 + u * 32 + lane;
            if (c >= c_end) continue;
            if constexpr (kFp8) {
              const uint4 x0 = ld_cached16(xr + c * 16);
              const uint4 x1 = ld_cached16(xr + c * 16 + 8);
              part[r][t] = fmaf(s[r][u], dot16_e4m3(w[r][u], x0, x1), part[r][t]);
            } else {
              part[r][t] = dot8_bf16(w[r][u], ld_cached16(xr + c * 8), part[r][t]);
            }
          }
        }
      }
    }
  }
}

// y[t, row] for t < m. Warp w of a block owns row group (block group * 8/KS + w/KS) and width
// slice w % KS; blocks loop over block groups (persistent), uniformly so the barrier is safe.
// With kPdl the warp first asks L2 for its first rows (prefetch: no registers, nothing to wait
// for), then waits for the predecessor grid, then loads for real: the weight traffic of this
// kernel overlaps the tail of the previous one. (A real load before griddepcontrol.wait was
// measured slower: the wait held the warp until its loads had landed.)
template <bool kFp8, int RPW, int MT, int U, bool kPdl>
__device__ __forceinline__ void gemv_dense_op(const rs::cuda::DeviceMatrix& w,
                                              const __nv_bfloat16* x, int m, __nv_bfloat16* y,
                                              int ks, float* red /* smem [kGemvWarps][RPW*MT] */) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int groups_per_block = kGemvWarps / ks;
  const int slice = warp % ks;
  const int64_t nchunks = w.cols / E;
  const int64_t per_slice = ((nchunks + ks - 1) / ks + 31) / 32 * 32;
  const int64_t c_begin = slice * per_slice;
  const int64_t c_end = c_begin + per_slice < nchunks ? c_begin + per_slice : nchunks;
  const int64_t groups = (w.rows + RPW - 1) / RPW;
  const int64_t block_groups = (groups + groups_per_block - 1) / groups_per_block;
  if constexpr (kPdl) {
    pdl_launch_dependents();
    const int64_t g = static_cast<int64_t>(blockIdx.x) * groups_per_block + warp / ks;
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const WeightRow row = weight_row(w, g * RPW + r, kFp8);
      if (!row.data) continue;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c_begin + u * 32 + lane;
        if (c < c_end) asm volatile("prefetch.global.L2 [%0];" ::"l"(row.data + c * 16));
      }
    }
    pdl_wait();
  }
  for (int64_t bg = blockIdx.x; bg < block_groups; bg += gridDim.x) {
    const int64_t g = bg * groups_per_block + warp / ks;
    WeightRow rows[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) rows[r] = weight_row(w, g * RPW + r, kFp8);
    for (int t0 = 0; t0 < m; t0 += MT) {
      const __nv_bfloat16* xr[1][MT];
#pragma unroll
      for (int t = 0; t < MT; ++t) xr[0][t] = (t0 + t < m) ? x + (int64_t)(t0 + t) * w.cols : nullptr;
      float part[RPW][MT];
      gemv_warp_partial<kFp8, RPW, MT, U>(rows, xr, c_begin, c_end, w.block_cols, part);
#pragma unroll
      for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int t = 0; t < MT; ++t) part[r][t] = warp_sum(part[r][t]);
      if (ks > 1) {
        if (lane == 0)
#pragma unroll
          for (int i = 0; i < RPW * MT; ++i) red[warp * RPW * MT + i] = part[i / MT][i % MT];
        __syncthreads();
        if (slice == 0)
#pragma unroll
          for (int i = 0; i < RPW * MT; ++i) {
            float v = 0.f;
            for (int k = 0; k < ks; ++k) v += red[(warp + k) * RPW * MT + i];  // fixed order
            part[i / MT][i % MT] = v;
          }
        __syncthreads();
      }
      if (slice != 0) continue;
#pragma unroll
      for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const int64_t row = g * RPW + r;
          if (lane == ((r * MT + t) & 31) && row < w.rows && t0 + t < m)
            y[(int64_t)(t0 + t) * w.rows + row] = __float2bfloat16_rn(part[r][t]);
        }
    }
  }
}

// Any shape, any alignment: one warp per (row, token), element by element. Only for matrices
// whose width is not a multiple of the 16-byte chunk (no real checkpoint has one).
__device__ __forceinline__ float load_weight(const rs::cuda::DeviceMatrix& w, int64_t row,
                                             int64_t col) {
  const int64_t i = row * w.cols + col;
  if (w.type == rs::cuda::WeightType::BF16)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(w.data)[i]);
  const uint8_t b = static_cast<const uint8_t*>(w.data)[i];
  const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
  return e4m3x2_to_float2(b).x * w.scale_inv[(row / w.block_rows) * scale_cols + col / w.block_cols];
}

__device__ __forceinline__ void gemv_scalar_op(const rs::cuda::DeviceMatrix& w,
                                               const __nv_bfloat16* x, int m, __nv_bfloat16* y) {
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t nwarps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t item = warp; item < w.rows * m; item += nwarps) {
    const int64_t row = item % w.rows, t = item / w.rows;
    float acc = 0.f;
    for (int64_t c = lane; c < w.cols; c += 32)
      acc = fmaf(load_weight(w, row, c), __bfloat162float(x[t * w.cols + c]), acc);
    acc = warp_sum(acc);
    if (lane == 0) y[t * w.rows + row] = __float2bfloat16_rn(acc);
  }
}

}  // namespace rs::kern
