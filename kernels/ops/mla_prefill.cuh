#pragma once
// MLA prefill attention in the expanded form, FlashAttention-2 style: causal, online softmax in
// base 2, everything but the K/V tiles in registers.
//
// A block owns kRows = 16 * MT * kWarps queries of one head; warp w owns 16 * MT consecutive rows
// (MT m16 tiles of mma.sync m16n8k16) and never exchanges data with the other warps, so the only
// barriers are the ones that hand the double-buffered K/V tiles around. Per key tile:
//  - S = Q K^T: with MT = 1, Q's A fragments are loaded once (ldmatrix) and stay in registers
//    (DK/16 x 4 registers); with MT = 2 they are reloaded per k-step, and every K fragment feeds
//    two MMAs. K's B fragments come from the [key][dim] tile by ldmatrix (rows = keys, which is
//    the "col" operand layout as stored);
//  - online softmax on the accumulators themselves: a row's 2 x kTile/8 values sit in the four
//    lanes of a quad, so the row max needs two shuffles; the row sum stays per lane until the end;
//  - O += P V: the S accumulator of n-tiles 2k, 2k+1 is exactly the A fragment of k-step k once
//    packed to bf16 (no shared-memory round trip); V's B fragments by ldmatrix.trans of [key][dim].
// Keys are walked from 0 upward; only tiles that reach past the first query of a warp are masked,
// and tiles past the block's last query are never loaded. Tile 0 holds key 0, which every query sees, so the running max is finite after it.
// K = [k_nope | k_pe] and V are streamed by 16-byte cp.async, one tile ahead (double buffer).
#include <cstdint>

#include "kernels/ops/mla_decode.cuh"  // cp.async, ldmatrix and mma.sync helpers
#include "kernels/ops/mla_prefill_params.h"

namespace rs::cuda {

namespace mla_prefill {
constexpr float kLog2e = 1.4426950408889634f;

// WARPS warps of MT m16 tiles each (a warp owns 16 * MT consecutive rows), TILE keys per K/V
// tile, MIN_BLOCKS blocks per SM asked of the register allocator. MT = 1 keeps Q's fragments in
// registers; MT = 2 reloads them per k-step from shared memory but uses every K/V fragment for
// two MMAs (half the ldmatrix traffic of K and V per FLOP).
template <int NOPE, int ROPE, int DV, int WARPS, int MT, int TILE, int MIN_BLOCKS>
struct Config {
  static_assert((NOPE + ROPE) % 16 == 0 && DV % 16 == 0 && NOPE % 8 == 0 && ROPE % 8 == 0 && TILE % 16 == 0);
  static constexpr int kNope = NOPE, kRope = ROPE, kDk = NOPE + ROPE, kDv = DV;
  static constexpr int kWarps = WARPS, kMt = MT, kThreads = WARPS * 32, kRows = 16 * MT * WARPS, kTile = TILE;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  // Row strides padded by 16 bytes: the 8 rows one ldmatrix reads fall in 8 different bank quads.
  static constexpr int kQs = kDk + 8, kVs = DV + 8;
  static constexpr size_t kQBytes = size_t(kRows) * kQs * 2;
  static constexpr size_t kKBytes = size_t(TILE) * kQs * 2;
  static constexpr size_t kVBytes = size_t(TILE) * kVs * 2;
  static constexpr size_t kSmem = kQBytes + 2 * (kKBytes + kVBytes);
};

__device__ __forceinline__ float fast_exp2(float x) {  // MUFU.EX2; exp2(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace mla_prefill

// One block: query tile `qtile` (rows [qtile * kRows, +kRows) of the chunk) of head h.
template <class C>
__device__ __forceinline__ void mla_prefill_block(const MlaPrefillParams& p, int qtile, int h, char* smem) {
  using namespace mla_decode;  // cp_async16, ldmatrix_*, mma_bf16, pack_bf16
  using mla_prefill::fast_exp2;
  constexpr int kDk = C::kDk, kDv = C::kDv, kNope = C::kNope, kRope = C::kRope, kMt = C::kMt;
  constexpr int kTile = C::kTile, kRows = C::kRows, kThreads = C::kThreads, kQs = C::kQs, kVs = C::kVs;
  constexpr int kKSteps = kDk / 16;    // k-steps of Q K^T
  constexpr int kSTiles = kTile / 8;   // n8 tiles of S per m-tile
  constexpr int kOTiles = kDv / 8;     // n8 tiles of O per m-tile
  constexpr int kPSteps = kTile / 16;  // k-steps of P V
  constexpr bool kQInRegs = kMt == 1;
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem + C::kQBytes);
  __nv_bfloat16* Vs = reinterpret_cast<__nv_bfloat16*>(smem + C::kQBytes + 2 * C::kKBytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;  // fragment row group and column pair
  const int q0 = qtile * kRows;
  const int key_end = min(p.start + p.T, p.start + q0 + kRows);  // the block's last query sees key_end - 1
  const int tiles = (key_end + kTile - 1) / kTile;
  const int64_t kv_stride = int64_t(p.heads) * (kNope + kDv);
  const __nv_bfloat16* kv_head = p.kv + int64_t(h) * (kNope + kDv);

  {  // Q rows of the block (rows past T are zero and never stored); same commit group as tile 0
    constexpr int vecs = kDk / 8, total = kRows * vecs;
#pragma unroll
    for (int c = 0; c < (total + kThreads - 1) / kThreads; ++c) {
      const int i = tid + c * kThreads;
      if (total % kThreads != 0 && i >= total) break;
      const int r = i / vecs, v = i - r * vecs;
      const bool valid = q0 + r < p.T;
      const int64_t row = valid ? q0 + r : 0;
      cp_async16(Qs + r * kQs + v * 8, p.q + (row * p.heads + h) * kDk + v * 8, valid);
    }
  }
  // Tile `tile` of K = [k_nope | k_pe] and V into buffer `buf`; keys >= key_end are zero-filled.
  auto load_tile = [&](int tile, int buf) {
    constexpr int kv_vecs = kNope / 8, pe_vecs = kRope / 8, v_vecs = kDv / 8;
    constexpr int per_row = kv_vecs + pe_vecs + v_vecs, total = kTile * per_row;
    __nv_bfloat16* Kb = Ks + buf * kTile * kQs;
    __nv_bfloat16* Vb = Vs + buf * kTile * kVs;
    const int k0 = tile * kTile;
#pragma unroll
    for (int c = 0; c < (total + kThreads - 1) / kThreads; ++c) {
      const int i = tid + c * kThreads;
      if (total % kThreads != 0 && i >= total) break;
      const int r = i / per_row, v = i - r * per_row;  // constant divisor: a multiply and shift
      const bool valid = k0 + r < key_end;
      const int64_t j = valid ? k0 + r : 0;
      if (v < kv_vecs) cp_async16(Kb + r * kQs + v * 8, kv_head + j * kv_stride + v * 8, valid);
      else if (v < kv_vecs + pe_vecs) cp_async16(Kb + r * kQs + v * 8, p.kpe + j * kRope + (v - kv_vecs) * 8, valid);
      else cp_async16(Vb + r * kVs + (v - kv_vecs - pe_vecs) * 8, kv_head + j * kv_stride + kNope + (v - kv_vecs - pe_vecs) * 8, valid);
    }
    cp_async_commit();
  };
  load_tile(0, 0);

  unsigned qf[kQInRegs ? kKSteps : 1][4];  // MT = 1: Q A-fragments of the warp's 16 rows, all k-steps
  float o[kMt][kOTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
  float m_lo[kMt], m_hi[kMt];  // running max (raw scores) of rows g and g + 8 of each m-tile
  float l_lo[kMt], l_hi[kMt];  // this lane's share of the running sums
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
    m_lo[mt] = m_hi[mt] = -INFINITY;
    l_lo[mt] = l_hi[mt] = 0.f;
  }
  const float sl2 = p.scale * mla_prefill::kLog2e;  // exp(x * scale) = exp2(x * sl2)
  const int warp_row0 = warp * 16 * kMt;            // the warp's first row in the block
  const int warp_first = p.start + q0 + warp_row0;  // ... and its position
  // ldmatrix lane addresses (fragment layouts: see mma_bf16).
  const __nv_bfloat16* q_lane = Qs + (warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kQs + (lane >> 4) * 8;
  const int k_row = (lane >> 4) * 8 + (lane & 7), k_col = ((lane >> 3) & 1) * 8;  // K: x4 = 2 n-tiles x (b0, b1)
  const int v_row = ((lane >> 3) & 1) * 8 + (lane & 7), v_col = (lane >> 4) * 8;  // V: x4.trans, same grouping

  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      load_tile(it + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile `it` (and on the first pass Q) visible to every warp
    if (kQInRegs && it == 0) {
#pragma unroll
      for (int k = 0; k < kKSteps; ++k) ldmatrix_x4(qf[kQInRegs ? k : 0], q_lane + k * 16);
    }
    const __nv_bfloat16* Kt = Ks + buf * kTile * kQs;
    const __nv_bfloat16* Vt = Vs + buf * kTile * kVs;

    float s[kMt][kSTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      unsigned a[kMt][4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[0][e] = qf[kQInRegs ? k : 0][e];
      } else {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) ldmatrix_x4(a[mt], q_lane + mt * 16 * kQs + k * 16);
      }
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        unsigned b[4];
        ldmatrix_x4(b, Kt + (np * 16 + k_row) * kQs + k * 16 + k_col);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma_bf16(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    const int k0 = it * kTile;
    if (k0 + kTile - 1 > warp_first) {  // the tile reaches past this warp's first query: causal mask
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        const int pos_lo = warp_first + mt * 16 + g;  // row g + 8 sits at pos_lo + 8
#pragma unroll
        for (int n = 0; n < kSTiles; ++n) {
          const int key = k0 + n * 8 + 2 * t4;
          if (key > pos_lo) s[mt][n][0] = -INFINITY;
          if (key + 1 > pos_lo) s[mt][n][1] = -INFINITY;
          if (key > pos_lo + 8) s[mt][n][2] = -INFINITY;
          if (key + 1 > pos_lo + 8) s[mt][n][3] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      float mx_lo = m_lo[mt], mx_hi = m_hi[mt];
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        mx_lo = fmaxf(mx_lo, fmaxf(s[mt][n][0], s[mt][n][1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[mt][n][2], s[mt][n][3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {  // the quad's four lanes hold the same two rows
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
      }
      // The max is finite from tile 0 on (key 0 is visible to every row); exp2(-inf) = 0 gives
      // the first tile's alpha and every masked score.
      const float al_lo = fast_exp2((m_lo[mt] - mx_lo) * sl2), al_hi = fast_exp2((m_hi[mt] - mx_hi) * sl2);
      m_lo[mt] = mx_lo;
      m_hi[mt] = mx_hi;
      const float mb_lo = mx_lo * sl2, mb_hi = mx_hi * sl2;
      float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        s[mt][n][0] = fast_exp2(fmaf(s[mt][n][0], sl2, -mb_lo));
        s[mt][n][1] = fast_exp2(fmaf(s[mt][n][1], sl2, -mb_lo));
        s[mt][n][2] = fast_exp2(fmaf(s[mt][n][2], sl2, -mb_hi));
        s[mt][n][3] = fast_exp2(fmaf(s[mt][n][3], sl2, -mb_hi));
        sum_lo += s[mt][n][0] + s[mt][n][1];
        sum_hi += s[mt][n][2] + s[mt][n][3];
      }
      l_lo[mt] = l_lo[mt] * al_lo + sum_lo;
      l_hi[mt] = l_hi[mt] * al_hi + sum_hi;
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o[mt][n][0] *= al_lo;
        o[mt][n][1] *= al_lo;
        o[mt][n][2] *= al_hi;
        o[mt][n][3] *= al_hi;
      }
    }
#pragma unroll
    for (int k = 0; k < kPSteps; ++k) {  // O += P V, 16 keys per step; P never leaves registers
      unsigned a[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        a[mt][0] = pack_bf16(s[mt][2 * k][0], s[mt][2 * k][1]);
        a[mt][1] = pack_bf16(s[mt][2 * k][2], s[mt][2 * k][3]);
        a[mt][2] = pack_bf16(s[mt][2 * k + 1][0], s[mt][2 * k + 1][1]);
        a[mt][3] = pack_bf16(s[mt][2 * k + 1][2], s[mt][2 * k + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < kOTiles / 2; ++np) {
        unsigned b[4];
        ldmatrix_x4_trans(b, Vt + (k * 16 + v_row) * kVs + np * 16 + v_col);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma_bf16(o[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(o[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer `buf` before the next pass refills it
  }

#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
    float sl = l_lo[mt], sh = l_hi[mt];
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      sl += __shfl_xor_sync(0xffffffffu, sl, off);
      sh += __shfl_xor_sync(0xffffffffu, sh, off);
    }
    const float inv_lo = 1.f / sl, inv_hi = 1.f / sh;
    const int r_lo = q0 + warp_row0 + mt * 16 + g, r_hi = r_lo + 8;
    __nv_bfloat16* out_lo = p.out + (int64_t(r_lo) * p.heads + h) * kDv + 2 * t4;
    __nv_bfloat16* out_hi = p.out + (int64_t(r_hi) * p.heads + h) * kDv + 2 * t4;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      if (r_lo < p.T) *reinterpret_cast<unsigned*>(out_lo + n * 8) = pack_bf16(o[mt][n][0] * inv_lo, o[mt][n][1] * inv_lo);
      if (r_hi < p.T) *reinterpret_cast<unsigned*>(out_hi + n * 8) = pack_bf16(o[mt][n][2] * inv_hi, o[mt][n][3] * inv_hi);
    }
  }
}

}  // namespace rs::cuda
