#pragma once
// Matrix-vector products for up to 8 tokens on tensor cores (mma.sync m16n8k16, fp32
// accumulate), so no per-element conversion or FMA runs on the CUDA cores: a warp owns a tile of
// 16 weight rows, lane (g = lane/4, c = lane%4) loads 16 bytes of rows g and g+8 at the same
// columns, and those registers ARE the MMA's A fragment under a permutation of k (a dot product
// does not care about the order of k as long as A and B agree; B is loaded with the same
// permutation). The 8 token rows are the MMA's N side, so m = 1..8 cost the same weight traffic.
//   bf16: 8 columns per lane per step (2 MMAs), no conversion at all.
//   FP8:  16 columns per lane per step (4 MMAs); e4m3x2 -> f16x2 is one cvt per pair, exact;
//         activations go to f16 (saturating: |x| > 65504 clamps); the step's 64 columns lie in
//         one 128x128 scale block, applied to the step's fp32 partial.
// The 8 warps of a block split the width; their fragments meet in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/mma_ptx.cuh"
#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern {

constexpr int kTcGemvWarps = 8;
constexpr int kTcGemvThreads = kTcGemvWarps * 32;
constexpr int kTcGemvMaxTokens = 8;

using ptx::mma_bf16_16816;
using ptx::mma_f16_16816;

// Two e4m3 (low 16 bits) -> f16x2, exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return *reinterpret_cast<uint32_t*>(&h);
}
// bf16x2 -> f16x2, saturating to +-65504.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(bf16_hi(v)), "f"(bf16_lo(v)));
  return r;
}

// y[t, row] for t < m <= 8. Requires cols % 8 (bf16) / % 16 (FP8) == 0, 16-byte aligned rows,
// and for FP8 block_rows % 16 == 0, block_cols % 64 == 0 (checked on the host).
template <bool kFp8, int U, bool kPdl>
__device__ __forceinline__ void gemv_tc_op(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x,
                                           int m, __nv_bfloat16* y, float* red /* smem [8][32][4] */) {
  constexpr int LC = kFp8 ? 16 : 8;  // columns per lane per step
  constexpr int SC = 4 * LC;         // columns per step (4 lanes per row)
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t steps = (cols + SC - 1) / SC;
  const int64_t per_warp = (steps + kTcGemvWarps - 1) / kTcGemvWarps;
  const int64_t s_begin = warp * per_warp;
  const int64_t s_end = s_begin + per_warp < steps ? s_begin + per_warp : steps;
  const int64_t tiles = (rows + 15) / 16;
  const int64_t esize = kFp8 ? 1 : 2;
  const int64_t scale_cols = kFp8 ? (cols + w.block_cols - 1) / w.block_cols : 0;
  const auto* wbase = static_cast<const uint8_t*>(w.data);

  if constexpr (kPdl) {
    pdl_launch_dependents();
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 16;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = r0 + g + 8 * h;
      if (row >= rows) continue;
      for (int64_t st = s_begin; st < s_end && st < s_begin + U; ++st) {
        const int64_t col = st * SC + c * LC;
        if (col < cols) asm volatile("prefetch.global.L2 [%0];" ::"l"(wbase + (row * cols + col) * esize));
      }
    }
    pdl_wait();
  }

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t r0 = tile * 16;
    const int64_t row_a = r0 + g, row_b = r0 + g + 8;
    const uint8_t* pa = row_a < rows ? wbase + row_a * cols * esize : nullptr;
    const uint8_t* pb = row_b < rows ? wbase + row_b * cols * esize : nullptr;
    const __nv_bfloat16* px = g < m ? x + static_cast<int64_t>(g) * cols : nullptr;
    const float* srow = kFp8 ? w.scale_inv + (r0 / w.block_rows) * scale_cols : nullptr;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t s0 = s_begin; s0 < s_end; s0 += U) {
      uint4 wa[U], wb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t col = (s0 + u) * SC + c * LC;
        const bool ok = s0 + u < s_end && col < cols;
        wa[u] = ok && pa ? ld_stream16(pa + col * esize) : make_uint4(0, 0, 0, 0);
        wb[u] = ok && pb ? ld_stream16(pb + col * esize) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t col = (s0 + u) * SC + c * LC;
        if (s0 + u >= s_end) break;  // warp-uniform
        const bool xok = px && col < cols;
        if constexpr (kFp8) {
          const uint4 x0 = xok ? ld_cached16(px + col) : make_uint4(0, 0, 0, 0);
          const uint4 x1 = xok ? ld_cached16(px + col + 8) : make_uint4(0, 0, 0, 0);
          const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
          const uint32_t av[4] = {wa[u].x, wa[u].y, wa[u].z, wa[u].w};
          const uint32_t bv[4] = {wb[u].x, wb[u].y, wb[u].z, wb[u].w};
          float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int j = 0; j < 4; ++j)  // MMA j: lane's columns 4j..4j+3
            mma_f16_16816(part, e4m3x2_to_f16x2(av[j]), e4m3x2_to_f16x2(bv[j]), e4m3x2_to_f16x2(av[j] >> 16),
                          e4m3x2_to_f16x2(bv[j] >> 16), bf16x2_to_f16x2(xw[2 * j]), bf16x2_to_f16x2(xw[2 * j + 1]));
          const int64_t kcol = (s0 + u) * SC;  // the step's 64 columns share one scale block
          const float s = __ldg(srow + kcol / w.block_cols);
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[q] = fmaf(s, part[q], acc[q]);
        } else {
          const uint4 xv = xok ? ld_cached16(px + col) : make_uint4(0, 0, 0, 0);
          mma_bf16_16816(acc, wa[u].x, wb[u].x, wa[u].y, wb[u].y, xv.x, xv.y);
          mma_bf16_16816(acc, wa[u].z, wb[u].z, wa[u].w, wb[u].w, xv.z, xv.w);
        }
      }
    }
    // acc: (row g, tokens 2c, 2c+1), (row g+8, tokens 2c, 2c+1); add the 8 width slices.
#pragma unroll
    for (int q = 0; q < 4; ++q) red[(warp * 32 + lane) * 4 + q] = acc[q];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float v = 0.f;
        for (int k = 0; k < kTcGemvWarps; ++k) v += red[(k * 32 + lane) * 4 + q];  // fixed order
        const int64_t row = q < 2 ? row_a : row_b;
        const int t = 2 * c + (q & 1);
        if (row < rows && t < m) y[static_cast<int64_t>(t) * rows + row] = __float2bfloat16_rn(v);
      }
    }
    __syncthreads();
  }
}

}  // namespace rs::kern
