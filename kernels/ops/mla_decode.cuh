#pragma once
// Flash-decoding over the paged latent cache with register-resident tensor-core tiles
// (mma.sync m16n8k16, bf16 in, fp32 accumulate). All heads of a sequence share one latent cache
// row (MQA), so a block takes 16 heads of one sequence (the MMA M dimension) and one KV split:
// every cache tile is read from HBM once for all 16 heads, and the same shared-memory tile is the
// key (all kv_dim columns) and the value (its first kv_lora columns).
//
// Per 32-token tile, with 4 warps:
//  - S = Q K^T: warp w owns tokens [8w, 8w+8) over the whole kv_dim (one n8 MMA tile), and puts
//    its scaled, masked scores in shared memory (16 x 32 floats);
//  - every warp then reads all 32 scores of its rows straight into the A-fragment layout of
//    the PV product and runs the same online softmax (the same data and order, so the running
//    max and sum agree bit for bit between warps without another exchange);
//  - O += P V: warp w owns latent columns [w*kv_lora/4, (w+1)*kv_lora/4), kept in registers for
//    the whole split (at kv_lora 512: 16 n8 tiles, 64 floats per thread).
// Tiles are double-buffered with cp.async (16-byte copies); the block is small (128 threads,
// ~96 KB of shared memory at kv_dim 576) so two blocks share an SM and keep ~4 tiles in flight.
// A grid that fits one wave with one block per SM (batch 1 and 2) runs 8 warps a block instead:
// warps w and w + 4 split the dims of S for tokens [8(w%4), +8), and each warp owns kv_lora / 8
// columns of O (see mla_decode_split_block).
#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/mma_ptx.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/kv_cache.cuh"
#include "kernels/ops/mla_decode_params.h"

namespace rs::cuda {

namespace mla_decode {
constexpr int kHeads = 16;   // MMA M: heads per block
constexpr int kTile = 32;    // cache tokens per tile: 8 per warp group in S = Q K^T
constexpr int kWarps = 4;    // many blocks (a wave or more); one wave or less runs 8 (launch_mla_decode)
constexpr int kThreads = kWarps * 32;
constexpr int kMaxLora = 512;                          // checked on the host
constexpr float kLog2e = 1.4426950408889634f;

struct Layout {  // shared-memory carve-up, in bytes; row strides padded by 16 bytes so that the
                 // 8 rows an ldmatrix reads fall in 8 different bank quads
  int qs, ks, ss;  // element strides
  size_t q_off, k_off, s_off, slot_off, new_off, consts_off, total;
  // s_parts: partial scores per token (8 warps: the two warps of an 8-token group of S split its
  // dims).
  // new_row: room for launch_mla_decode's new_kv row and constants, only where it is set (3.5 KB
  // more a block would leave batch 64's two blocks an SM one).
  __host__ __device__ Layout(int kv_dim, int s_parts = 1, bool new_row = false) {
    qs = kv_dim + 8; ks = kv_dim + 8; ss = kTile + 4;
    q_off = 0;
    k_off = q_off + size_t(kHeads) * qs * 2;
    s_off = k_off + 2 * size_t(kTile) * ks * 2;
    slot_off = s_off + size_t(s_parts) * kHeads * ss * 4;
    // The newest row when formed in its own split (launch_mla_decode's new_kv), then its norm
    // weight and rope frequencies (fp32, kv_lora + rope / 2 < kv_dim of them).
    new_off = slot_off + 2 * kTile * 8;
    consts_off = new_off + (size_t(kv_dim) * 2 + 15) / 16 * 16;
    total = new_row ? consts_off + size_t(kv_dim) * 4 : new_off;
  }
};

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::ldmatrix_x2;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_bf16;
using ptx::smem_addr;
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lower column) in the low half
  return *reinterpret_cast<const unsigned*>(&v);
}
}  // namespace mla_decode

// Sequence b's absorbed queries of heads [h0, h0 + 16) into Qs (row stride qs) by cp.async, one
// commit group: all 16-byte copies in flight at once.
__device__ __forceinline__ void issue_q_rows(const MlaDecodeParams& p, __nv_bfloat16* Qs, int qs, int h0, int b) {
  using namespace mla_decode;
  const int vecs = p.kv_dim / 8;
  const int64_t qrow = p.q_rows ? p.q_rows[b] : b;
  for (int i = threadIdx.x; i < kHeads * vecs; i += blockDim.x) {
    const int r = i / vecs, v = i - r * vecs;
    const bool valid = h0 + r < p.heads;
    cp_async16(Qs + r * qs + v * 8, p.q + (qrow * p.heads + (valid ? h0 + r : 0)) * p.kv_dim + v * 8, valid);
  }
  cp_async_commit();
}

// The newest cache row's own split (launch_mla_decode with new_kv: split 0, so the merges'
// non-empty splits stay the leading ones, and its block is dispatched first): forms the row from
// kv_a (kv_form_row: its norm and rope; head group 0 writes it to the cache) and scores it
// against the group's 16 heads; one row, so its partial is the row itself with weight 1 and its
// lse the scaled score (log2 units). The tiles of the other splits hold only older rows.
//
// Why a split of its own: formed inside the split that held it, the row (kv_a's trip to L2, the
// norm's two block barriers) kept that block's tile waiting ~3.6 us after the release, and that
// block ended ~1.3 us after every other (H200 wait probe, V2-Lite bf16 b1, 2026-12-02: the row
// formed 4.61 us after the release, the others' tiles visible at 1.28; the launch's last end
// 7.68 against 6.40). As split 0: bf16 step 1.816-1.817 against 1.844-1.846 ms; as the last
// split (dispatched last) it was 1.875 against 1.848.
template <int kNumWarps>
__device__ __forceinline__ void mla_decode_new_row_split(const MlaDecodeParams& p, int head_group, int b, char* smem,
                                                         const KvWriteParams& new_kv) {
  using namespace mla_decode;
  constexpr int kThreadsB = kNumWarps * 32;
  const Layout L(p.kv_dim, kNumWarps / 4, true);
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem + L.q_off);
  __nv_bfloat16* new_s = reinterpret_cast<__nv_bfloat16*>(smem + L.new_off);  // [kv_dim]
  float* consts = reinterpret_cast<float*>(smem + L.consts_off);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h0 = head_group * kHeads;
  const int vecs = p.kv_dim / 8;
  KvWriteParams nk = new_kv;
  // Before the wait: the row's constant inputs (weights; the step's metadata, uploaded before its
  // first kernel), so that after it only kv_a and q travel from L2.
  const int nw4 = nk.kv_lora / 4, if4 = nk.rope.rope_dim / 8;  // 16-byte pieces
  for (int i = tid; i < nw4; i += kThreadsB) cp_async16(consts + 4 * i, nk.norm_weight + 4 * i, true);
  nk.norm_weight = consts;
  if ((nk.rope.rope_dim / 2) % 4 == 0) {
    for (int i = tid; i < if4; i += kThreadsB) cp_async16(consts + nk.kv_lora + 4 * i, nk.rope.inv_freq + 4 * i, true);
    nk.rope.inv_freq = consts + nk.kv_lora;
  }
  cp_async_commit();
  const int pos = nk.positions[b], slot = nk.slots[b];
  pdl::wait();
  pdl::launch_dependents();
  issue_q_rows(p, Qs, L.qs, h0, b);
  cp_async_wait<1>();  // the constants (q may still be in flight while the row is formed)
  __syncthreads();
  kv_form_row(nk, nk.kv_a + static_cast<int64_t>(b) * nk.kv_a_stride,
              head_group == 0 ? nk.cache + static_cast<int64_t>(slot) * p.kv_dim : new_s, pos, new_s);
  cp_async_wait<0>();
  __syncthreads();
  pdl::probe_mark(kern::kProbeStep1);  // the newest row formed (wait-probe builds only)
  const int64_t part = (static_cast<int64_t>(b) * p.heads) * p.splits;  // split 0; + h * splits
  const float scale2 = p.scale * kLog2e;
  for (int r = warp; r < kHeads; r += kNumWarps) {
    if (h0 + r >= p.heads) break;  // warp-uniform
    float acc = 0.f;
    for (int v = lane; v < vecs; v += 32)
      acc = kern::dot8_bf16(*reinterpret_cast<const uint4*>(Qs + r * L.qs + v * 8),
                            *reinterpret_cast<const uint4*>(new_s + v * 8), acc);
    acc = warp_sum(acc);
    if (lane == 0) p.part_lse[part + static_cast<int64_t>(h0 + r) * p.splits] = acc * scale2;
  }
  const int heads_here = min(kHeads, p.heads - h0), c4 = p.kv_lora / 4;
  for (int i = tid; i < heads_here * c4; i += blockDim.x) {
    const int r = i / c4, c = 4 * (i - r * c4);
    const float4 v = make_float4(__bfloat162float(new_s[c]), __bfloat162float(new_s[c + 1]), __bfloat162float(new_s[c + 2]),
                                 __bfloat162float(new_s[c + 3]));
    *reinterpret_cast<float4*>(p.part_o + (part + static_cast<int64_t>(h0 + r) * p.splits) * p.kv_lora + c) = v;
  }
}

// kNumWarps = 4 (one warp per 8-token group of S = Q K^T) or 8 (grids of at most one wave, e.g.
// batch 1: twice the warps on each tile): with 8, the two warps of a group each take half of the
// dims (their partial scores meet in shared memory, added in a fixed order) and each warp owns
// kv_lora / 8 columns of O, so the serial MMA chain of a tile is half as long.
// new_kv: launch_mla_decode's (kNewRow only).
template <int kNumWarps, bool kNewRow = false>
__device__ __forceinline__ void mla_decode_split_block(const MlaDecodeParams& p, int split, int head_group, int b,
                                                       char* smem, const KvWriteParams* new_kv = nullptr) {
  using namespace mla_decode;
  constexpr int kGroups = kTile / 8;  // 8-token groups of S = Q K^T (one n8 MMA tile each)
  static_assert(kNumWarps % kGroups == 0, "every group gets the same number of warps");
  constexpr int kThreadsB = kNumWarps * 32;
  constexpr int kSParts = kNumWarps / kGroups;
  constexpr int kMaxColTiles = kMaxLora / kNumWarps / 8;  // n8 tiles of O per warp at kv_lora 512
  const Layout L(p.kv_dim, kSParts, kNewRow);
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem + L.q_off);
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem + L.k_off);
  float* Ss = reinterpret_cast<float*>(smem + L.s_off);
  int64_t* slot_s = reinterpret_cast<int64_t*>(smem + L.slot_off);  // [2][kTile] cache rows of a tile
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;  // MMA fragment row group and column pair
  const int h0 = head_group * kHeads;
  // new_kv: split 0 is the newest row's own (mla_decode_new_row_split); the tiles of the others
  // hold the older rows only, every one of them written before this step.
  if constexpr (kNewRow) {
    if (split == 0) {
      mla_decode_new_row_split<kNumWarps>(p, head_group, b, smem, *new_kv);
      return;
    }
  }
  const int len = p.seq_lens[b] - (kNewRow ? 1 : 0);  // rows the tiles attend
  const int tile_splits = p.splits - (kNewRow ? 1 : 0), tile_split = split - (kNewRow ? 1 : 0);
  const int per_split = ((len + tile_splits - 1) / tile_splits + kTile - 1) / kTile * kTile;
  const int t0 = tile_split * per_split, t1 = min(len, t0 + per_split);
  const int64_t part = (static_cast<int64_t>(b) * p.heads) * p.splits + split;  // + h * splits

  if (t0 >= t1) {  // empty split: contributes nothing to the merge
    pdl::wait();
    pdl::launch_dependents();
    for (int r = tid; r < kHeads; r += blockDim.x)
      if (h0 + r < p.heads) p.part_lse[part + static_cast<int64_t>(h0 + r) * p.splits] = -INFINITY;
    return;
  }

  const int vecs = p.kv_dim / 8;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(b) * p.bt_stride;
  const int tiles = (t1 - t0 + kTile - 1) / kTile;
  // Block-table lookups (an L2 round trip) run one tile ahead of the copies that need them: the
  // lookups of tile i + 2 are issued right after the copies of tile i + 1 and land in a register
  // while tile i is computed, so no tile's cp.async waits behind a lookup.
  auto lookup = [&](int tile) -> int64_t {
    const int t = min(t0 + tile * kTile + tid, t1 - 1);
    return static_cast<int64_t>(bt[t / p.block_size]) * p.block_size + t % p.block_size;
  };
  auto issue_tile = [&](int tile, int buf) {  // slots of `tile` already in slot_s[buf]
    const int64_t* slots = slot_s + buf * kTile;
    __nv_bfloat16* dst = Ks + buf * kTile * L.ks;
    const int rows = min(kTile, t1 - (t0 + tile * kTile));
    // (row, vector) walked incrementally: no integer division per 16-byte copy.
    int r = tid / vecs, v = tid - (tid / vecs) * vecs;
    const int dr = kThreadsB / vecs, dv = kThreadsB - dr * vecs;
    while (r < kTile) {
      cp_async16(dst + r * L.ks + v * 8, p.cache + slots[r] * p.kv_dim + v * 8, r < rows);
      v += dv;
      r += dr;
      if (v >= vecs) { v -= vecs; ++r; }
    }
    cp_async_commit();
  };

  // Before the wait: the sequence lengths and block tables come from the step's upload, done
  // before the first kernel of the step started, and every cache row but each sequence's newest
  // one (which the previous kernel, the fused absorb + cache write, may be writing) was written
  // by earlier steps or by kernels that completed before the previous kernel got past its wait.
  // So the first tile's copies overlap the previous kernel unless that tile holds the newest row
  // (with new_kv the tiles never do: its own split forms it).
  int64_t next_slot = 0;
  if (tid < kTile) {
    slot_s[tid] = lookup(0);
    if (tiles > 1) next_slot = lookup(1);
  }
  __syncthreads();
  const bool early = tiles > 1 || t1 < len || kNewRow;
  if (early) issue_tile(0, 0);
  pdl::wait();
  pdl::launch_dependents();
  if (!early) issue_tile(0, 0);
  // Q by cp.async too (its own group, after tile 0's): all of its 16-byte copies are in flight at
  // once instead of a load-then-store loop (batch 64: split kernel 69 -> 59.5 us under ncu).
  issue_q_rows(p, Qs, L.qs, h0, b);

  const int col_tiles = p.kv_lora / (kNumWarps * 8);  // n8 tiles of O per warp (<= kMaxColTiles)
  const int col0 = warp * (p.kv_lora / kNumWarps);
  float o[kMaxColTiles][4];
#pragma unroll
  for (int n = 0; n < kMaxColTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY;  // running max of rows g and g + 8 (log2 units)
  float l_lo = 0.f, l_hi = 0.f;              // this thread's share of the running sums

  const int ksteps = p.kv_dim / 16;
  // Dims [kb, ke) of S for this warp: all of them with 4 warps, one half with 8.
  const int spart = warp / kGroups, group = warp % kGroups;
  const int kb = spart * ksteps / kSParts, ke = (spart + 1) * ksteps / kSParts;
  const float scale2 = p.scale * kLog2e;  // softmax in base 2: exp2 is one instruction
  // ldmatrix row addresses of this lane (see mma_bf16 for the fragment layouts).
  const __nv_bfloat16* q_lane = Qs + (lane & 15) * L.qs + (lane >> 4) * 8;
  const int k_row = group * 8 + (lane & 7), k_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = col0 + (lane >> 4) * 8;

  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      // slot_s[buf ^ 1] was last read when tile it - 1 was issued, before the previous barrier.
      if (tid < kTile) slot_s[(buf ^ 1) * kTile + tid] = next_slot;
      __syncthreads();
      issue_tile(it + 1, buf ^ 1);
      if (it + 2 < tiles && tid < kTile) next_slot = lookup(it + 2);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile `it` (and on the first pass Q) visible to every warp
    if (it == 0) pdl::probe_mark(kern::kProbeInputReady);
    const __nv_bfloat16* Kt = Ks + buf * kTile * L.ks;
    {  // S[:, 8*group .. +8) over dims [kb, ke); two accumulators for independent MMAs
      float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
      const __nv_bfloat16* k_lane = Kt + k_row * L.ks + k_col;
      int k = kb;
      for (; k + 1 < ke; k += 2) {
        unsigned a0[4], a1[4], b0[2], b1[2];
        ldmatrix_x4(a0, q_lane + k * 16);
        ldmatrix_x2(b0, k_lane + k * 16);
        ldmatrix_x4(a1, q_lane + (k + 1) * 16);
        ldmatrix_x2(b1, k_lane + (k + 1) * 16);
        mma_bf16(s0, a0, b0[0], b0[1]);
        mma_bf16(s1, a1, b1[0], b1[1]);
      }
      if (k < ke) {
        unsigned a0[4], b0[2];
        ldmatrix_x4(a0, q_lane + k * 16);
        ldmatrix_x2(b0, k_lane + k * 16);
        mma_bf16(s0, a0, b0[0], b0[1]);
      }
      const int tok = t0 + it * kTile + group * 8 + 2 * t4;  // token of column 2*t4
      const bool v0 = tok < t1, v1 = tok + 1 < t1;
      float* srow = Ss + (spart * kHeads + g) * L.ss + group * 8 + 2 * t4;
      *reinterpret_cast<float2*>(srow) =
          make_float2(v0 ? (s0[0] + s1[0]) * scale2 : -INFINITY, v1 ? (s0[1] + s1[1]) * scale2 : -INFINITY);
      *reinterpret_cast<float2*>(srow + 8 * L.ss) =
          make_float2(v0 ? (s0[2] + s1[2]) * scale2 : -INFINITY, v1 ? (s0[3] + s1[3]) * scale2 : -INFINITY);
    }
    __syncthreads();
    if (it == 0) pdl::probe_mark(kern::kProbeStep2);  // S of the first tile in shared memory
    // Scores of rows g and g+8 in the A-fragment layout of P V: chunk c (16 tokens) holds
    // columns 16c + 2*t4 + {0,1} and 16c + 8 + 2*t4 + {0,1}.
    constexpr int kPer = kTile / 4;  // scores per row held by one lane
    float lo[kPer], hi[kPer];        // index 4c + 2*half + j
#pragma unroll
    for (int c = 0; c < kTile / 16; ++c) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = 16 * c + 8 * half + 2 * t4;
        float2 x = *reinterpret_cast<const float2*>(Ss + g * L.ss + col);
        float2 y = *reinterpret_cast<const float2*>(Ss + (g + 8) * L.ss + col);
#pragma unroll
        for (int sp = 1; sp < kSParts; ++sp) {  // the other dims' partial scores, in a fixed order
          const float2 x2 = *reinterpret_cast<const float2*>(Ss + (sp * kHeads + g) * L.ss + col);
          const float2 y2 = *reinterpret_cast<const float2*>(Ss + (sp * kHeads + g + 8) * L.ss + col);
          x.x += x2.x; x.y += x2.y; y.x += y2.x; y.y += y2.y;
        }
        lo[4 * c + 2 * half] = x.x;
        lo[4 * c + 2 * half + 1] = x.y;
        hi[4 * c + 2 * half] = y.x;
        hi[4 * c + 2 * half + 1] = y.y;
      }
    }
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      mx_lo = fmaxf(mx_lo, lo[i]);
      mx_hi = fmaxf(mx_hi, hi[i]);
    }
    // The four lanes of a quad hold the 32 columns of the same two rows.
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    // Every split's first tile holds a valid token, so the running max is finite from tile 0 on.
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    const float al_lo = exp2f(m_lo - mn_lo), al_hi = exp2f(m_hi - mn_hi);  // 0 on the first tile
    m_lo = mn_lo;
    m_hi = mn_hi;
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      lo[i] = exp2f(lo[i] - mn_lo);  // masked columns: exp2(-inf) = 0
      hi[i] = exp2f(hi[i] - mn_hi);
      sum_lo += lo[i];
      sum_hi += hi[i];
    }
    l_lo = l_lo * al_lo + sum_lo;
    l_hi = l_hi * al_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < kMaxColTiles; ++n) {
      o[n][0] *= al_lo;
      o[n][1] *= al_lo;
      o[n][2] *= al_hi;
      o[n][3] *= al_hi;
    }
    if (it == 0) pdl::probe_mark(kern::kProbeStep3);  // warp 0's softmax of the first tile done
#pragma unroll
    for (int c = 0; c < kTile / 16; ++c) {  // O += P V, 16 tokens per step
      unsigned a[4];
      a[0] = pack_bf16(lo[4 * c + 0], lo[4 * c + 1]);
      a[1] = pack_bf16(hi[4 * c + 0], hi[4 * c + 1]);
      a[2] = pack_bf16(lo[4 * c + 2], lo[4 * c + 3]);
      a[3] = pack_bf16(hi[4 * c + 2], hi[4 * c + 3]);
      const __nv_bfloat16* v_lane = Kt + (16 * c + v_row) * L.ks + v_col;
#pragma unroll
      for (int n = 0; n < kMaxColTiles; n += 2) {
        if (n < col_tiles) {
          unsigned bv[4];
          ldmatrix_x4_trans(bv, v_lane + n * 8);
          mma_bf16(o[n], a, bv[0], bv[1]);
          mma_bf16(o[n + 1], a, bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // every warp done with tile `it` and with Ss before they are overwritten
  }

  pdl::probe_mark(kern::kProbeMainDone);
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
  const bool row_lo = h0 + g < p.heads, row_hi = h0 + g + 8 < p.heads;
  float* out_lo = p.part_o + (part + static_cast<int64_t>(h0 + g) * p.splits) * p.kv_lora + col0 + 2 * t4;
  float* out_hi = p.part_o + (part + static_cast<int64_t>(h0 + g + 8) * p.splits) * p.kv_lora + col0 + 2 * t4;
#pragma unroll
  for (int n = 0; n < kMaxColTiles; ++n) {
    if (n < col_tiles) {
      if (row_lo) *reinterpret_cast<float2*>(out_lo + n * 8) = make_float2(o[n][0] * inv_lo, o[n][1] * inv_lo);
      if (row_hi) *reinterpret_cast<float2*>(out_hi + n * 8) = make_float2(o[n][2] * inv_hi, o[n][3] * inv_hi);
    }
  }
  if (warp == 0 && t4 == 0) {
    if (row_lo) p.part_lse[part + static_cast<int64_t>(h0 + g) * p.splits] = m_lo + log2f(l_lo);
    if (row_hi) p.part_lse[part + static_cast<int64_t>(h0 + g + 8) * p.splits] = m_hi + log2f(l_hi);
  }
}

// Merges the splits of one (sequence, head): weights 2^(lse_s - max) renormalise the partials.
// A thread owns 4 adjacent latent columns (16-byte loads); the split loop is unrolled so several
// independent loads are in flight.
constexpr int kCombineThreads = 128;  // kv_lora / 4 at kv_lora 512
__device__ __forceinline__ void mla_decode_combine_block(const MlaDecodeParams& p, int b, int h) {
  static_assert(kCombineThreads >= kMlaDecodeMaxSplits, "one split weight per thread");
  __shared__ float wts[kMlaDecodeMaxSplits];
  __shared__ float scratch[32];
  const int64_t base = (static_cast<int64_t>(b) * p.heads + h) * p.splits;
  const float lse = threadIdx.x < p.splits ? p.part_lse[base + threadIdx.x] : -INFINITY;
  const float mx = block_max(lse, scratch);
  const float e = lse == -INFINITY ? 0.f : exp2f(lse - mx);
  const float wsum = block_sum(e, scratch);
  if (threadIdx.x < p.splits) wts[threadIdx.x] = e / wsum;
  __syncthreads();
  const int64_t qrow = p.q_rows ? p.q_rows[b] : b;
  for (int c = threadIdx.x * 4; c < p.kv_lora; c += blockDim.x * 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const float* src = p.part_o + base * p.kv_lora + c;
#pragma unroll 8
    for (int s = 0; s < p.splits; ++s) {
      const float w = wts[s];
      if (w != 0.f) {  // empty splits never wrote their partial
        const float4 v = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(s) * p.kv_lora);
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
    }
    __nv_bfloat16* dst = p.out + (qrow * p.heads + h) * p.kv_lora + c;
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(acc.x, acc.y);
    *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(acc.z, acc.w);
  }
}

}  // namespace rs::cuda
