#pragma once
// Tensor-core tile for y^T = W x^T ("swap AB"): the weight rows are the MMA's M side (large),
// the tokens its N side (anything from 9 to thousands), so one kernel covers batched decode
// (N = 16) and prefill (N = 128) and the bf16 A operand is the weight in its stored row-major
// layout. mma.sync.m16n8k16 bf16 -> fp32 with ldmatrix fragments; a 4-stage cp.async ring
// feeds shared memory. FP8 weights arrive raw through the same ring and are dequantised per
// 16-element chunk (one 128x128 scale each) into a bf16 tile just before the MMAs.
//
// Block: 256 threads = 8 warps as 4 (rows) x 2 (tokens); tile BM=128 rows x BN tokens x BK=32.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/mma_ptx.cuh"
#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern::mma {

constexpr int BM = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int LDS = BK + 8;  // bf16 row pitch in smem: 80 B, so 8 ldmatrix rows hit 8 distinct 16B bank groups

template <bool kFp8, int BN>
struct SmemLayout {
  // bf16: w[STAGES][BM][LDS]; fp8: w8[STAGES][BM][BK] bytes + wc[BM][LDS] bf16. Then x[STAGES][BN][LDS].
  static constexpr int w_bytes = kFp8 ? STAGES * BM * BK + BM * LDS * 2 : STAGES * BM * LDS * 2;
  static constexpr int x_bytes = STAGES * BN * LDS * 2;
  static constexpr int bytes = w_bytes + x_bytes;
};

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::ldmatrix_x2;
using ptx::ldmatrix_x4;
using ptx::mma_bf16;
using ptx::smem_addr;
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// What a block multiplies: for each of its 128 tile rows a weight row (bytes + FP8 scale row),
// for each of its BN tile columns a token row of x (nullptr: padding). Filled per thread for
// the rows/columns that thread loads.
template <bool kFp8, int BN>
struct TileOperands {
  static constexpr int kWLoads = kFp8 ? 1 : 2;               // 16B chunks per thread per k-tile
  static constexpr int kXChunks = BN * (BK / 8);              // 16B chunks of x per k-tile
  static constexpr int kXLoads = (kXChunks + THREADS - 1) / THREADS;
  const uint8_t* w[kWLoads];   // row start (nullptr: outside the matrix)
  const float* wscale = nullptr;  // FP8 scale row of this thread's weight row
  const __nv_bfloat16* x[kXLoads];
  const void* any_valid = nullptr;  // a readable global address for zero-filling copies
  // The weight row and token row of each load, as tile coordinates.
  __device__ static int w_row(int i) {
    return kFp8 ? threadIdx.x / 2 : (threadIdx.x / 4) + i * (BM / 2);
  }
  __device__ static int w_chunk(int) { return kFp8 ? threadIdx.x % 2 : threadIdx.x % 4; }
  __device__ static int x_row(int i) { return (threadIdx.x + i * THREADS) / 4; }
  __device__ static int x_chunk() { return threadIdx.x % 4; }
};

// acc[i][j][*]: warp rows wm*32 + i*16 (+g, +8+g), warp tokens wn*(BN/2) + j*8 (+2c, +2c+1).
template <bool kFp8, int BN>
__device__ __forceinline__ void mainloop(const TileOperands<kFp8, BN>& op, int64_t k_begin,
                                         int64_t k_end, int block_cols, uint8_t* smem,
                                         float (&acc)[2][BN / 16][4]) {
  using Ops = TileOperands<kFp8, BN>;
  using L = SmemLayout<kFp8, BN>;
  constexpr int NF = BN / 16;
  uint8_t* wsm = smem;
  __nv_bfloat16* xsm = reinterpret_cast<__nv_bfloat16*>(smem + L::w_bytes);
  __nv_bfloat16* wc = reinterpret_cast<__nv_bfloat16*>(smem + STAGES * BM * BK);  // FP8 only

  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int wm = warp % 4, wn = warp / 4;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NF; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

  const int64_t ntiles = (k_end - k_begin + BK - 1) / BK;
  auto load_w = [&](int64_t kt, int stage) {
    const int64_t k0 = k_begin + kt * BK;
#pragma unroll
    for (int i = 0; i < Ops::kWLoads; ++i) {
      const int row = Ops::w_row(i), ch = Ops::w_chunk(i);
      const int64_t k = k0 + ch * (kFp8 ? 16 : 8);
      const bool ok = op.w[i] && k < k_end;
      if constexpr (kFp8) {
        cp_async16(wsm + (stage * BM + row) * BK + ch * 16, ok ? op.w[i] + k : op.any_valid, ok);
      } else {
        cp_async16(reinterpret_cast<__nv_bfloat16*>(wsm) + (stage * BM + row) * LDS + ch * 8,
                   ok ? op.w[i] + k * 2 : op.any_valid, ok);
      }
    }
  };
  auto load_x = [&](int64_t kt, int stage) {
    const int64_t k0 = k_begin + kt * BK;
#pragma unroll
    for (int i = 0; i < Ops::kXLoads; ++i) {
      if (Ops::kXChunks % THREADS != 0 && threadIdx.x + i * THREADS >= Ops::kXChunks) continue;
      const int row = Ops::x_row(i), ch = Ops::x_chunk();
      const int64_t k = k0 + ch * 8;
      const bool ok = op.x[i] && k < k_end;
      cp_async16(xsm + (stage * BN + row) * LDS + ch * 8, ok ? static_cast<const void*>(op.x[i] + k) : op.any_valid, ok);
    }
  };

  // Weights of the first stages go out before the PDL wait (they are constant); activations
  // only after it. The first commit group then holds those weights, so the first wait below
  // also covers them.
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s)
    if (s < ntiles) load_w(s, s);
  pdl_wait();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ntiles) load_x(s, s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < ntiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile kt landed for everyone; everyone is done with tile kt-1's stage
    if (kt + STAGES - 1 < ntiles) {
      load_w(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
      load_x(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    }
    cp_async_commit();
    const int stage = kt % STAGES;
    const __nv_bfloat16* wtile;
    if constexpr (kFp8) {
      const int row = threadIdx.x / 2, ch = threadIdx.x % 2;
      const int64_t k = k_begin + kt * BK + ch * 16;
      const float s = (op.w[0] && k < k_end) ? __ldg(op.wscale + k / block_cols) : 0.f;
      const uint4 raw = *reinterpret_cast<const uint4*>(wsm + (stage * BM + row) * BK + ch * 16);
      const uint2 a = e4m3x4_to_bf16x4(raw.x, s), b = e4m3x4_to_bf16x4(raw.y, s);
      const uint2 c = e4m3x4_to_bf16x4(raw.z, s), d = e4m3x4_to_bf16x4(raw.w, s);
      uint4* dst = reinterpret_cast<uint4*>(wc + row * LDS + ch * 16);
      dst[0] = make_uint4(a.x, a.y, b.x, b.y);
      dst[1] = make_uint4(c.x, c.y, d.x, d.y);
      __syncthreads();
      wtile = wc;
    } else {
      wtile = reinterpret_cast<const __nv_bfloat16*>(wsm) + stage * BM * LDS;
    }
    const __nv_bfloat16* xtile = xsm + stage * BN * LDS;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        ldmatrix_x4(af[i], wtile + (wm * 32 + i * 16 + (lane % 16)) * LDS + ks * 16 + (lane / 16) * 8);
      uint32_t bf[NF][2];
      if constexpr (NF == 1) {
        uint32_t r[2];
        ldmatrix_x2(r, xtile + (wn * 8 + (lane % 8)) * LDS + ks * 16 + ((lane / 8) % 2) * 8);
        bf[0][0] = r[0];
        bf[0][1] = r[1];
      } else {
#pragma unroll
        for (int jp = 0; jp < NF / 2; ++jp) {
          uint32_t r[4];
          ldmatrix_x4(r, xtile + (wn * (BN / 2) + jp * 16 + (lane % 8) + 8 * (lane / 16)) * LDS +
                             ks * 16 + ((lane / 8) % 2) * 8);
          bf[2 * jp][0] = r[0];
          bf[2 * jp][1] = r[1];
          bf[2 * jp + 1][0] = r[2];
          bf[2 * jp + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j) mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: epilogues may reuse shared memory
}

// Visit every accumulator with its tile coordinates (row in [0,BM), token column in [0,BN)).
template <int BN, class F>
__device__ __forceinline__ void for_each_acc(const float (&acc)[2][BN / 16][4], F&& f) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int wm = warp % 4, wn = warp / 4, g = lane / 4, c = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < BN / 16; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        f(wm * 32 + i * 16 + g + (q >= 2 ? 8 : 0), wn * (BN / 2) + j * 8 + 2 * c + (q & 1), acc[i][j][q]);
}

}  // namespace rs::kern::mma
