#pragma once
// Decode-time expert FFN with the shared experts folded in as extra "slots" of weight 1, so one
// MoE layer is two weight-streaming kernels (gate_up with SwiGLU, then down) instead of the
// routed pair plus four kernels of dense shared MLP (gate, up, silu*up, down) with their launch
// and ramp gaps.
//
// Slot numbering: expert id e < num_experts is a routed expert (device arrays); e = num_experts
// + k is shared expert k, a view of rows [k*inter, (k+1)*inter) of shared_gate / shared_up and
// of columns [k*inter, (k+1)*inter) of shared_down. Views keep the parent's row stride (cols)
// and move the FP8 scale pointer by whole scale blocks (the host checks inter % block == 0).
//
// Few tokens (m <= kExpertGemvMaxTokens): CUDA-core GEMV ops of gemv.cuh, routing derived in
// every block (SmallRouting), slot s < n_shared shared, s >= n_shared the active routed experts.
//   gate_up: one warp-item = (slot, RP intermediate rows): those rows of gate and of up, all
//            tokens of the slot; items are spread flat over every warp of a persistent grid, so no
//            SM waits on a partial last wave of (expert, row-group) blocks.
//   down:    a block owns DR hidden rows at a time; its 8 warps take the slots round-robin (one
//            weight batch per slot covers a whole 1408-wide row), apply the routing weight to
//            their lane partials, and meet in shared memory in a fixed order (deterministic).
// Many tokens, bf16 (kExpertGemvMaxTokens < m, <= 16 tokens per expert on average): the tile
// table of expert_group_op (tiles of <= 16 pairs, shared slots included) and a tensor-core GEMV
// per warp-item (tile, 16 weight rows): the weight rows go from 16-byte global loads straight
// into m16n8k16 A fragments (the k-permutation of gemv_tc.cuh), the tile's 16 tokens are two
// n-tiles, no shared memory and no barrier, so a warp keeps U steps of loads in flight and moves
// on. A 16-token tile costs the same weight bytes as a 1-token one; the mma.sync GEMM tile of
// expert_gemm.cuh kept only three 8 KB stages per block in flight (2.4 TB/s at batch 64).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/mma_ptx.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/gemv.cuh"
#include "kernels/ops/gemv_experts.cuh"
#include "kernels/ops/gemv_tc.cuh"
#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern {

using rs::cuda::warp_sum;

constexpr int kMaxSharedSlots = 4;  // shared experts a layer may fold in (DeepSeek: 1 or 2)
constexpr int kExpertTcWarps = 4;   // warps per block of the grouped tensor-core GEMV
constexpr int kExpertTcThreads = kExpertTcWarps * 32;

// ---------------------------------------------------------------------------------------------
// Few tokens. h layout: [slot][t < m][inter], slot = shared k first, then the active experts.

// Expert id and token bitmask of slot s (after small_routing).
__device__ __forceinline__ int small_slot_expert(const ExpertGemvParams& p, const SmallRouting& sr, int s) {
  const int ns = p.experts.n_shared;
  return s < ns ? p.experts.num_experts + s : sr.expert[s - ns];
}
__device__ __forceinline__ uint32_t small_slot_tokens(const ExpertGemvParams& p, const SmallRouting& sr, int s) {
  const int ns = p.experts.n_shared;
  return s < ns ? (p.m >= 32 ? 0xffffffffu : (1u << p.m) - 1u) : sr.tokens[s - ns];
}

// ---- FP8 with f16 activations (one token) ---------------------------------------------------
// The FP8 items' time went into per-element conversions, not bytes (an FP8 item took ~1.7x a
// bf16 item of the same bytes, docs/perf/cuda.md): with the activations staged once in shared
// memory as f16, a 16-element chunk is 8 conversions and 8 packed FMAs (dot16_e4m3_f16).
// f16 holds 5 exponent bits, so each activation vector is scaled by a power of two 2^-e with
// |x| 2^-e < 8 (exact: only the exponent moves) and the dot products by 2^e after the sum.

// The exponent e for a vector whose largest magnitude is amax: amax 2^-e in [4, 8) (0: e = 0).
__device__ __forceinline__ int f16_stage_exponent(float amax) { return amax > 0.f ? ilogbf(amax) - 2 : 0; }

// 16 bytes of x: through the non-coherent path, or (kCoherent) from L2 for x that other blocks
// of the same launch wrote (the one-launch FFN's h, expert_stream_ffn.cuh).
template <bool kCoherent>
__device__ __forceinline__ uint4 ld_x16(const __nv_bfloat16* x) {
  if constexpr (kCoherent) return __ldcg(reinterpret_cast<const uint4*>(x));
  else return ld_cached16(x);
}

// Eight bf16 (16 bytes) as f16 scaled by 2^-e: the staging's one conversion.
__device__ __forceinline__ uint4 bf16x8_to_f16_scaled(const uint4& b, int e) {
  float f[8];
  rs::cuda::bf16x8_to_float(b, f);
  __half2 h[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2half2_rn(ldexpf(f[2 * k], -e), ldexpf(f[2 * k + 1], -e));
  return *reinterpret_cast<const uint4*>(h);
}

// max(m, |each of eight bf16|).
__device__ __forceinline__ float bf16x8_amax(const uint4& b, float m) {
  float f[8];
  rs::cuda::bf16x8_to_float(b, f);
#pragma unroll
  for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[k]));
  return m;
}

// xs[i] = x[i] 2^-e as f16, shared by `threads` threads of which this is `tid`.
template <bool kCoherent = false>
__device__ __forceinline__ void stage_f16(const __nv_bfloat16* x, int n, int e, __half* xs, int tid, int threads) {
  for (int i = tid * 8; i < n; i += threads * 8)
    *reinterpret_cast<uint4*>(xs + i) = bf16x8_to_f16_scaled(ld_x16<kCoherent>(x + i), e);
}

// The FP8 down stages a slot's h in one pass up to 256 * kDownStageChunks elements (V2-Lite 1408,
// V3 2048), wider ones in two.
constexpr int kDownStageChunks = 8;

// One warp's staging of n bf16 (n <= 256 * kChunks) as f16 scaled by its own 2^-e (returned):
// every 16-byte load issued before the first is used, so the staging costs one trip to L2. The
// loop of stage_f16 after amax_bf16 waits for each load before it issues the next, one trip per
// 256 elements. The same loads, maximum and conversions: the same bits.
template <int kChunks>
__device__ __forceinline__ int stage_f16_warp(const __nv_bfloat16* x, int n, __half* xs, int lane) {
  uint4 v[kChunks];
  float m = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if ((lane + 32 * k) * 8 < n) v[k] = ld_x16<false>(x + (lane + 32 * k) * 8);
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if ((lane + 32 * k) * 8 < n) m = bf16x8_amax(v[k], m);
  const int e = f16_stage_exponent(rs::cuda::warp_max(m));
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int i = (lane + 32 * k) * 8;
    if (i < n) *reinterpret_cast<uint4*>(xs + i) = bf16x8_to_f16_scaled(v[k], e);
  }
  return e;
}

template <bool kCoherent = false>
__device__ __forceinline__ float amax_bf16(const __nv_bfloat16* x, int n, int tid, int threads);

// One warp stages slot s's h (n = inter bf16) as f16 into hs and sets h_scale[s] = 2^e: in one pass
// where it fits (stage_f16_warp), else amax then stage_f16.
__device__ __forceinline__ void stage_down_h(const __nv_bfloat16* h, int n, __half* hs, float* h_scale, int s,
                                             int lane) {
  int e;
  if (n <= 256 * kDownStageChunks) {
    e = stage_f16_warp<kDownStageChunks>(h, n, hs, lane);
  } else {
    e = f16_stage_exponent(rs::cuda::warp_max(amax_bf16(h, n, lane, 32)));
    stage_f16(h, n, e, hs, lane, 32);
  }
  if (lane == 0) h_scale[s] = ldexpf(1.f, e);
}

template <bool kCoherent>
__device__ __forceinline__ float amax_bf16(const __nv_bfloat16* x, int n, int tid, int threads) {
  float m = 0.f;
  for (int i = tid * 8; i < n; i += threads * 8) m = bf16x8_amax(ld_x16<kCoherent>(x + i), m);
  return m;
}

// One batch of fp8_rows_dot_f16 (chunks [c0, c0 + 32 U) below nchunks) from weights and scales
// already in registers.
template <int R, int U>
__device__ __forceinline__ void fp8_rows_dot_f16_batch(const uint4 (&w)[R][U], const float (&s)[R][U], const __half* xs,
                                                       int64_t c0, int64_t nchunks, float (&part)[R]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = c0 + u * 32 + lane;
    if (c >= nchunks) continue;
    const uint4 x0 = *reinterpret_cast<const uint4*>(xs + c * 16);
    const uint4 x1 = *reinterpret_cast<const uint4*>(xs + c * 16 + 8);
#pragma unroll
    for (int r = 0; r < R; ++r) part[r] = fmaf(s[r][u], dot16_e4m3_f16(w[r][u], x0, x1), part[r]);
  }
}

// part[r] += this lane's share of dot(row r, x) over all nchunks 16-element chunks, x as staged
// f16 in shared memory; FP8 block scales applied per chunk (a chunk never straddles a block).
template <int R, int U>
__device__ __forceinline__ void fp8_rows_dot_f16(const WeightRow (&rows)[R], const __half* xs, int64_t nchunks,
                                                 int block_cols, float (&part)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) part[r] = 0.f;
  for (int64_t c0 = 0; c0 < nchunks; c0 += 32 * U) {
    uint4 w[R][U];
    float s[R][U];
    load_weight_batch<true, R, U>(rows, c0, nchunks, block_cols, w, s);
    fp8_rows_dot_f16_batch<R, U>(w, s, xs, c0, nchunks, part);
  }
}

// RP intermediate rows per warp-item (gate and up rows of each): the item's weight bytes are what
// one warp keeps in flight, and an item costs about one memory round trip whatever its size, so
// FP8 items take two rows (2 x 2 x 2 KB) to move as many bytes per trip as bf16's one (2 x 4 KB).
// kF16 (FP8, one token): x staged as f16 in shared memory xh (hidden halves) and the chunks
// through dot16_e4m3_f16; otherwise the fp32 path.
template <bool kFp8, int MT, int U, int RP, bool kF16 = false>
__device__ __forceinline__ void fused_gate_up_op(const ExpertGemvParams& p, SmallRouting& sr,
                                                 WorkGrid wg = launch_work_grid(), __half* xh = nullptr) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t per_slot = (inter + RP - 1) / RP;  // items per slot
  const int64_t gw = static_cast<int64_t>(wg.index) * kGemvWarps + warp;
  const int64_t nw = static_cast<int64_t>(wg.count) * kGemvWarps;
  pdl_launch_dependents();
  // The first items are shared-expert rows, known before the routing: start them towards L2
  // while the router drains.
  if (gw < static_cast<int64_t>(ns) * per_slot) {
    const int k = static_cast<int>(gw / per_slot);
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const rs::cuda::DeviceMatrix m = expert_matrix(p.experts, p.experts.num_experts + k, part);
#pragma unroll
      for (int r = 0; r < RP; ++r) prefetch_weight_row<U>(weight_row(m, (gw % per_slot) * RP + r, kFp8), 0, hidden / E);
    }
  }
  pdl_wait();  // routing from the router, x from the norm
  small_routing(p, sr);
  [[maybe_unused]] float x_scale = 1.f;  // 2^e of the staged f16 x
  static_assert(!kF16 || (kFp8 && MT == 1), "f16 activations: FP8 weights, one token");
  if constexpr (kF16) {
    __shared__ float amax_scratch[32];
    const int e = f16_stage_exponent(rs::cuda::block_max(amax_bf16(p.x, hidden, threadIdx.x, blockDim.x), amax_scratch));
    stage_f16(p.x, hidden, e, xh, threadIdx.x, blockDim.x);
    x_scale = ldexpf(1.f, e);
    __syncthreads();
  }
  const int64_t items = static_cast<int64_t>(ns + sr.n_active) * per_slot;
  for (int64_t it = gw; it < items; it += nw) {
    const int s = static_cast<int>(it / per_slot);
    const int64_t row0 = (it % per_slot) * RP;
    const int e = small_slot_expert(p, sr, s);
    const uint32_t sel = small_slot_tokens(p, sr, s);
    const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
    const rs::cuda::DeviceMatrix up = expert_matrix(p.experts, e, kPartUp);
    WeightRow rows[2 * RP];  // gate rows, then the same up rows
#pragma unroll
    for (int r = 0; r < RP; ++r) {
      rows[r] = weight_row(gate, row0 + r, kFp8);
      rows[RP + r] = weight_row(up, row0 + r, kFp8);
    }
    const __nv_bfloat16* xr[1][MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) xr[0][t] = (t < p.m && (sel >> t & 1u)) ? p.x + static_cast<int64_t>(t) * hidden : nullptr;
    float part[2 * RP][MT];
    if constexpr (kF16) {
      float pr[2 * RP];
      fp8_rows_dot_f16<2 * RP, U>(rows, xh, hidden / E, gate.block_cols, pr);
#pragma unroll
      for (int r = 0; r < 2 * RP; ++r) part[r][0] = pr[r];
    } else {
      gemv_warp_partial<kFp8, 2 * RP, MT, U>(rows, xr, 0, hidden / E, gate.block_cols, part);
    }
#pragma unroll
    for (int r = 0; r < RP; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float g = warp_sum(part[r][t]) * x_scale;
        const float u = warp_sum(part[RP + r][t]) * x_scale;
        if (lane == ((r * MT + t) & 31) && xr[0][t] && row0 + r < inter)
          p.h[(static_cast<int64_t>(s) * p.m + t) * inter + row0 + r] = __float2bfloat16_rn(silu(g) * u);
      }
  }
}

// The block's sum of its warps' lane partials acc of rows [rg DR, rg DR + DR) and tokens < MT, in
// warp order (deterministic), stored as bf16 into out[t, row]. red: [kGemvWarps][DR][MT]. Ends
// with a barrier, so red may be reused.
template <int DR, int MT>
__device__ __forceinline__ void store_down_rows(float (&acc)[DR][MT], float* red, int64_t rg, int hidden, int m,
                                                __nv_bfloat16* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < DR; ++r)
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) red[(warp * DR + r) * MT + t] = v;
    }
  __syncthreads();
  if (threadIdx.x < DR * MT) {
    const int r = threadIdx.x / MT, t = threadIdx.x % MT;
    float v = 0.f;
    for (int k = 0; k < kGemvWarps; ++k) v += red[(k * DR + r) * MT + t];  // fixed order
    const int64_t row = rg * DR + r;
    if (row < hidden && t < m) out[static_cast<int64_t>(t) * hidden + row] = __float2bfloat16_rn(v);
  }
  __syncthreads();
}

// out[t, row] = sum over slots of weight(t, slot) * down_slot[row] . h[slot, t]
// DR hidden rows per block-iteration (bf16 2, FP8 4: the same bytes per warp-item, see gate_up).
// red: shared memory [kGemvWarps][DR][MT].
// kF16 (FP8, one token): every slot's h staged as f16 in shared memory hh (slots x inter halves).
template <bool kFp8, int MT, int U, int DR, bool kF16 = false>
__device__ __forceinline__ void fused_down_op(const ExpertGemvParams& p, SmallRouting& sr, float* red,
                                              WorkGrid wg = launch_work_grid(), __half* hh = nullptr) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t groups = (hidden + DR - 1) / DR;
  pdl_launch_dependents();
  if (warp < ns && wg.index < groups) {  // first rows of this warp's shared slot, towards L2
    const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, p.experts.num_experts + warp, kPartDown);
#pragma unroll
    for (int r = 0; r < DR; ++r) prefetch_weight_row<U>(weight_row(d, static_cast<int64_t>(wg.index) * DR + r, kFp8), 0, inter / E);
  }
  pdl_wait();  // routing from the router, h from the gate_up kernel
  small_routing(p, sr);
  pdl_probe_mark(kProbeStep1);
  const int slots = ns + sr.n_active;
  // FP8, one token: each warp stages the h of the slots it takes (s = warp, warp + 8, ...) as f16,
  // each slot scaled by its own power of two (h_scale[s]), once for all its row groups. One token
  // has at most kMaxSharedSlots + kMaxTopK slots.
  static_assert(!kF16 || (kFp8 && MT == 1), "f16 activations: FP8 weights, one token");
  __shared__ float h_scale[kF16 ? kMaxSharedSlots + kMaxTopK : 1];
  if constexpr (kF16) {
    for (int s = warp; s < slots; s += kGemvWarps)
      stage_down_h(p.h + static_cast<int64_t>(s) * inter, inter, hh + static_cast<int64_t>(s) * inter, h_scale, s, lane);
    __syncwarp();
  }
  pdl_probe_mark(kProbeInputReady);
  for (int64_t rg = wg.index; rg < groups; rg += wg.count) {  // uniform over the block
    float acc[DR][MT];
#pragma unroll
    for (int r = 0; r < DR; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) acc[r][t] = 0.f;
    for (int s = warp; s < slots; s += kGemvWarps) {
      const int e = small_slot_expert(p, sr, s);
      const uint32_t sel = small_slot_tokens(p, sr, s);
      const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, e, kPartDown);
      WeightRow rows[DR];
#pragma unroll
      for (int r = 0; r < DR; ++r) rows[r] = weight_row(d, rg * DR + r, kFp8);
      const __nv_bfloat16* hr[1][MT];
#pragma unroll
      for (int t = 0; t < MT; ++t)
        hr[0][t] = (t < p.m && (sel >> t & 1u)) ? p.h + (static_cast<int64_t>(s) * p.m + t) * inter : nullptr;
      float part[DR][MT];
      float slot_scale = 1.f;  // 2^e of the slot's staged f16 h
      if constexpr (kF16) {
        float pr[DR];
        fp8_rows_dot_f16<DR, U>(rows, hh + static_cast<int64_t>(s) * inter, inter / E, d.block_cols, pr);
#pragma unroll
        for (int r = 0; r < DR; ++r) part[r][0] = pr[r];
        slot_scale = h_scale[s];
      } else {
        gemv_warp_partial<kFp8, DR, MT, U>(rows, hr, 0, inter / E, d.block_cols, part);
      }
      // The routing weight is linear in the dot product: lanes apply it before the reduction.
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float wt = slot_scale * (s < ns ? 1.f : (t < kExpertGemvMaxTokens ? sr.weight[t][s - ns] : 0.f));
#pragma unroll
        for (int r = 0; r < DR; ++r) acc[r][t] = fmaf(wt, part[r][t], acc[r][t]);
      }
    }
    store_down_rows<DR, MT>(acc, red, rg, hidden, p.m, p.out);
    if (rg == wg.index) pdl_probe_mark(kProbeStep2);  // the block's first row group
  }
  pdl_probe_mark(kProbeMainDone);
}

// The lane value v of the lead whose rank is a_want (fallback if none).
template <typename T>
__device__ __forceinline__ T from_rank(T v, int a, int a_want, T fallback) {
  const unsigned hit = __ballot_sync(0xffffffffu, a == a_want);
  return hit ? __shfl_sync(0xffffffffu, v, __ffs(hit) - 1) : fallback;
}

// Shared memory of fp8_down_one_token_spec_op for `rounds` copied row-group rounds: the staged h
// (16-byte aligned), then per (round, warp) DR rows of nchunks 16-byte chunks, then per (round,
// warp) the rows' one scale row (scale_cols floats, padded to 4; a round whose DR rows straddle
// two scale blocks is not copied).
struct Fp8DownSpecSmem {
  int64_t h_bytes, chunk_words, scale_floats;  // h bytes; per (round, warp): uint4 chunks, scales
  __host__ __device__ Fp8DownSpecSmem(int slots, int inter, int dr) {
    h_bytes = (int64_t(slots) * inter * 2 + 15) / 16 * 16;
    chunk_words = int64_t(dr) * (inter / 16);
    scale_floats = ((inter + 127) / 128 + 3) / 4 * 4;
  }
  __host__ __device__ int64_t bytes(int rounds, int warps) const {
    return h_bytes + int64_t(rounds) * warps * (chunk_words * 16 + scale_floats * 4);
  }
};

constexpr int kDownSpecMaxRounds = 4;  // row-group rounds a block copies into shared memory, at most
// Of those, the rounds copied before the wait; the rest are issued once the warp's h is staged.
// Why: this launch's blocks become resident only ~2 us before their wait, so copies issued at
// entry are still in flight when h is loaded, and h's loads queue behind them. With every round
// before the wait (V2-Lite: 2, the block's whole share) h was staged ~2.8 us after the wait; with
// one, the down's advance fell 12.03 -> 10.75 us a layer (H200, V2-Lite FP8 b1: 1.481-1.483 ms a
// step against 1.502-1.503, and 1.478-1.479 against 1.498-1.501 in a second call; none before the
// wait: 1.532-1.536; the held-back rounds also sent towards L2 at entry: 1.508-1.510).
// RS_DOWN_SPEC_PREWAIT overrides.
constexpr int kDownSpecPrewaitRounds = 1;

// FP8 down for one token with f16 h (the kF16 case of fused_down_op; compact routing, top_k <= 32,
// a row in one weight batch: inter <= 32 U * 16), its weights copied into
// shared memory before griddepcontrol.wait on a guess of the routing.
// Why: this launch's blocks become resident only as the streamed gate_up's blocks leave (its ring
// fills the SM), and fused_down_op then spent two L2 trips (routing, then h) before its first
// weight load, and its two row groups' DRAM trips after them (the thirteenth session's wait
// probe: h ready ~4.6 us after the release, then two ~5 us bursts). Here each warp reads the
// routing before the wait (the router ran two launches earlier: all but always complete by
// then; with the router inside the gate_up launch, RS_ROUTE_IN_EXPERTS=1, a gate_up block leaves
// its SM only after the routing is out, which holds as well) and copies its first slot's rows of
// the first `rounds` row groups, with their block scales, into shared memory; at V2-Lite's shape
// that is the whole launch's weights (23 MB over 264 blocks, 113 KB a block). The first
// prewait_rounds of them go before the wait, in flight while the gate_up drains; the rest once h
// is staged (kDownSpecPrewaitRounds says why). The rows go by bulk copies
// (one instruction a row, completing on an mbarrier): per-thread cp.async of the same rows gained
// about half as much (H200 V2-Lite FP8 step -1.2% against -2.1%, each against fused_down_op).
// After the wait it reads the routing again, with its h, in one trip, and uses a copy only where
// the expert matches, else loads from global memory: a stale guess costs time, never a wrong
// result. Each warp finds its own slots' experts and weights (one_token_leads) and stages only
// its own slots' h, so no barrier before the dots. The same loads, dots and reduction order as
// fused_down_op: the same bits. miss_guess (tests): guess the next slot's expert, and none for
// shared slots, so every copied row group takes the reload path.
template <int U, int DR>
__device__ __forceinline__ void fp8_down_one_token_spec_op(const ExpertGemvParams& p, float* red, WorkGrid wg,
                                                           uint8_t* smem, int rounds, bool miss_guess = false,
                                                           int prewait_rounds = kDownSpecPrewaitRounds) {
  __shared__ uint64_t bars[kGemvWarps][kDownSpecMaxRounds];  // warp's round q landed
  constexpr int E = chunk_elems<true>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int k = p.top_k, nE = p.experts.num_experts;
  const int64_t groups = (hidden + DR - 1) / DR;
  const int nchunks = inter / E;
  const int max_slots = ns + min(nE, k);  // h rows the gate_up wrote at most
  const Fp8DownSpecSmem lay(max_slots, inter, DR);
  __half* hh = reinterpret_cast<__half*>(smem);
  uint4* wsm = reinterpret_cast<uint4*>(smem + lay.h_bytes);  // [round][warp][r][chunk]
  float* ssm = reinterpret_cast<float*>(wsm + int64_t(rounds) * kGemvWarps * lay.chunk_words);  // [round][warp][col]
  pdl_launch_dependents();
  int spec = -1;  // expert whose rows the copies hold
  if (warp < max_slots) {
    if (warp < ns) {
      spec = miss_guess ? -1 : nE + warp;
    } else {
      int e = lane < k ? __ldcg(p.topk_ids + lane) : -1, a;
      float w;
      one_token_leads(e, 0.f, k, nE, a, w);
      spec = from_rank(e, a, warp - ns + (miss_guess ? 1 : 0), -1);
    }
  }
  const rs::cuda::DeviceMatrix dspec = expert_matrix(p.experts, spec >= 0 ? spec : 0, kPartDown);
  const int scale_cols = (inter + dspec.block_cols - 1) / dspec.block_cols;
  if (scale_cols > lay.scale_floats) spec = -1;  // blocks narrower than 128 columns: no copies
  uint32_t copied = 0;  // bit q: round q's rows are in shared memory
  if (spec >= 0) {
    if (lane == 0) {
      for (int q = 0; q < rounds; ++q) mbar_init(&bars[warp][q], 1u);
      mbar_fence_init();
    }
    __syncwarp();
  }
  const uint64_t policy = l2_evict_first();
  const uint32_t row_bytes = static_cast<uint32_t>(nchunks) * 16u;
  auto copy_rounds = [&](int q0, int q1) {
    if (spec < 0) return;
    const rs::cuda::DeviceMatrix& d = dspec;
    for (int q = q0; q < q1; ++q) {
      const int64_t rg = wg.index + int64_t(q) * wg.count;
      uint4* dst = wsm + (int64_t(q) * kGemvWarps + warp) * lay.chunk_words;
      const int64_t last = min(rg * DR + DR, d.rows) - 1;
      // Lane r < DR copies row r: present rows, 16-byte aligned (a bulk copy's rule).
      const WeightRow row = lane < DR ? weight_row(d, rg * DR + lane, true) : WeightRow{};
      const bool misaligned = __any_sync(0xffffffffu, (reinterpret_cast<uintptr_t>(row.data) & 15u) != 0u);
      if (rg >= groups || misaligned || fp8_block_div(rg * DR, d.block_rows) != fp8_block_div(last, d.block_rows))
        continue;
      copied |= 1u << q;
      const uint32_t rows_present = static_cast<uint32_t>(last - rg * DR + 1);
      if (lane == 0) mbar_arrive_expect_tx(&bars[warp][q], rows_present * row_bytes);
      if (lane < DR && row.data) bulk_copy_g2s(dst + lane * nchunks, row.data, row_bytes, &bars[warp][q], policy);
      const float* scale_row = weight_row(d, rg * DR, true).scale;
      float* sdst = ssm + (int64_t(q) * kGemvWarps + warp) * lay.scale_floats;
      for (int c = lane; c < scale_cols; c += 32)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(rs::ptx::smem_addr(sdst + c)), "l"(scale_row + c));
    }
    rs::ptx::cp_async_commit();  // these rounds' scales: a few hundred bytes, waited for at the first use
  };
  const int pre = min(rounds, prewait_rounds);
  copy_rounds(0, pre);
  pdl_wait();  // routing from the router, h from the gate_up kernel
  pdl_probe_mark(kProbeStep1);
  int id = lane < k ? __ldcg(p.topk_ids + lane) : -1;
  const float wt = lane < k ? __ldcg(p.topk_weights + lane) : 0.f;
  __shared__ float h_scale[kMaxSharedSlots + kMaxTopK];
  for (int s = warp; s < max_slots; s += kGemvWarps)
    stage_down_h(p.h + static_cast<int64_t>(s) * inter, inter, hh + static_cast<int64_t>(s) * inter, h_scale, s, lane);
  int a;
  float lead_w;
  const int slots = ns + __popc(one_token_leads(id, wt, k, nE, a, lead_w));
  __syncwarp();  // the staging
  // The rounds held back until h is staged: h's loads then queue behind fewer of the SM's copies.
  copy_rounds(pre, rounds);
  pdl_probe_mark(kProbeInputReady);
  for (int64_t rg = wg.index, q = 0; rg < groups; rg += wg.count, ++q) {  // uniform over the block
    float acc[DR][1];
#pragma unroll
    for (int r = 0; r < DR; ++r) acc[r][0] = 0.f;
#pragma unroll 1
    for (int s = warp; s < slots; s += kGemvWarps) {
      const int e = s < ns ? nE + s : from_rank(id, a, s - ns, -1);
      const float slot_w = s < ns ? 1.f : from_rank(lead_w, a, s - ns, 0.f);
      const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, e, kPartDown);
      const __half* hs = hh + static_cast<int64_t>(s) * inter;
      float pr[DR];
#pragma unroll
      for (int r = 0; r < DR; ++r) pr[r] = 0.f;
      if (s == warp && q < rounds && (copied >> q & 1u) && e == spec) {
        asm volatile("cp.async.wait_group 0;" ::: "memory");  // the scales
        __syncwarp();  // every lane's (a lane reads other lanes' scales)
        mbar_wait(&bars[warp][q], 0u, "fp8 down rows");
        const uint4* src = wsm + (q * kGemvWarps + warp) * lay.chunk_words;
        const float* ssrc = ssm + (q * kGemvWarps + warp) * lay.scale_floats;
        uint4 w[DR][U];
        float sc[DR][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = u * 32 + lane;
          const float scale = c < nchunks ? ssrc[fp8_scale_col(c, d.block_cols)] : 0.f;
#pragma unroll
          for (int r = 0; r < DR; ++r) {
            w[r][u] = c < nchunks ? src[r * nchunks + c] : make_uint4(0, 0, 0, 0);
            sc[r][u] = scale;
          }
        }
        fp8_rows_dot_f16_batch<DR, U>(w, sc, hs, 0, nchunks, pr);
      } else {
        WeightRow rows[DR];
#pragma unroll
        for (int r = 0; r < DR; ++r) rows[r] = weight_row(d, rg * DR + r, true);
        fp8_rows_dot_f16<DR, U>(rows, hs, nchunks, d.block_cols, pr);
      }
      // The routing weight is linear in the dot product: lanes apply it before the reduction.
      const float wt_s = h_scale[s] * slot_w;
#pragma unroll
      for (int r = 0; r < DR; ++r) acc[r][0] = fmaf(wt_s, pr[r], acc[r][0]);
    }
    store_down_rows<DR, 1>(acc, red, rg, hidden, 1, p.out);
    if (rg == wg.index) pdl_probe_mark(kProbeStep2);
  }
  // Copies of a wrong guess: none may land in this block's shared memory after it exits.
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  for (int q = 0; q < rounds; ++q)
    if (copied >> q & 1u) mbar_wait(&bars[warp][q], 0u, "fp8 down rows at exit");
  pdl_probe_mark(kProbeMainDone);
}

// ---------------------------------------------------------------------------------------------
// Many tokens, bf16: grouped tensor-core GEMV over the tile table (tile_tokens == 16).

// Two m16n8k16 steps over one 32-column step of 16 weight rows (wa: row g, wb: row g+8; lane
// columns c*8 .. c*8+7) against one n-tile of 8 tokens (xv: token g's same columns).
__device__ __forceinline__ void tc_step(float (&acc)[4], const uint4& wa, const uint4& wb, const uint4& xv) {
  mma_bf16_16816(acc, wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
  mma_bf16_16816(acc, wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
}

template <int U>
__device__ __forceinline__ void expert_tc_gate_up_op(const ExpertGemmParams& p) {
  const int lane = threadIdx.x & 31, g = lane / 4, c = lane % 4;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kExpertTcWarps + threadIdx.x / 32;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * kExpertTcWarps;
  const int inter = p.experts.inter, hidden = p.experts.hidden;
  const int64_t rgs = (inter + 15) / 16, steps = (hidden + 31) / 32;
  pdl_launch_dependents();
  pdl_wait();  // tile table from the group kernel, x from upstream
  const int64_t items = static_cast<int64_t>(*p.n_tiles) * rgs;
  for (int64_t it = gw; it < items; it += nw) {
    const int tile = static_cast<int>(it / rgs);
    const int64_t r0 = (it % rgs) * 16;
    const int e = p.tile_expert[tile], p0 = p.tile_p0[tile], n = p.tile_n[tile];
    const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
    const rs::cuda::DeviceMatrix up = expert_matrix(p.experts, e, kPartUp);
    const int64_t ra = r0 + g, rb = r0 + g + 8;
    const auto* gbase = static_cast<const __nv_bfloat16*>(gate.data);
    const auto* ubase = static_cast<const __nv_bfloat16*>(up.data);
    const __nv_bfloat16* ga = ra < inter ? gbase + ra * gate.cols : nullptr;
    const __nv_bfloat16* gb = rb < inter ? gbase + rb * gate.cols : nullptr;
    const __nv_bfloat16* ua = ra < inter ? ubase + ra * up.cols : nullptr;
    const __nv_bfloat16* ub = rb < inter ? ubase + rb * up.cols : nullptr;
    const __nv_bfloat16* x0 = g < n ? p.x + static_cast<int64_t>(p.pair_token[p0 + g]) * hidden : nullptr;
    const __nv_bfloat16* x1 = g + 8 < n ? p.x + static_cast<int64_t>(p.pair_token[p0 + g + 8]) * hidden : nullptr;
    float accg[2][4] = {}, accu[2][4] = {};
    for (int64_t s0 = 0; s0 < steps; s0 += U) {
      uint4 wga[U], wgb[U], wua[U], wub[U], xa[U], xb[U];
      const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t col = (s0 + u) * 32 + c * 8;
        const bool ok = col < hidden;  // hidden % 8 == 0: a chunk is all in or all out
        wga[u] = ok && ga ? ld_stream16(ga + col) : z;
        wgb[u] = ok && gb ? ld_stream16(gb + col) : z;
        wua[u] = ok && ua ? ld_stream16(ua + col) : z;
        wub[u] = ok && ub ? ld_stream16(ub + col) : z;
        xa[u] = ok && x0 ? ld_cached16(x0 + col) : z;
        xb[u] = ok && x1 ? ld_cached16(x1 + col) : z;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        tc_step(accg[0], wga[u], wgb[u], xa[u]);
        tc_step(accu[0], wua[u], wub[u], xa[u]);
        if (n > 8) {  // warp-uniform
          tc_step(accg[1], wga[u], wgb[u], xb[u]);
          tc_step(accu[1], wua[u], wub[u], xb[u]);
        }
      }
    }
    // acc[j][q]: row (q < 2 ? ra : rb), token j*8 + 2c + (q & 1) of the tile.
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int tok = j * 8 + 2 * c + (q & 1);
        const int64_t row = q < 2 ? ra : rb;
        if (tok < n && row < inter)
          p.h[static_cast<int64_t>(p0 + tok) * inter + row] = __float2bfloat16_rn(silu(accg[j][q]) * accu[j][q]);
      }
  }
}

template <int U>
__device__ __forceinline__ void expert_tc_down_op(const ExpertGemmParams& p) {
  const int lane = threadIdx.x & 31, g = lane / 4, c = lane % 4;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kExpertTcWarps + threadIdx.x / 32;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * kExpertTcWarps;
  const int inter = p.experts.inter, hidden = p.experts.hidden;
  const int64_t rgs = (hidden + 15) / 16, steps = (inter + 31) / 32;
  pdl_launch_dependents();
  pdl_wait();  // tile table from the group kernel, h from the gate_up kernel
  const int64_t items = static_cast<int64_t>(*p.n_tiles) * rgs;
  for (int64_t it = gw; it < items; it += nw) {
    const int tile = static_cast<int>(it / rgs);
    const int64_t r0 = (it % rgs) * 16;
    const int e = p.tile_expert[tile], p0 = p.tile_p0[tile], n = p.tile_n[tile];
    const rs::cuda::DeviceMatrix down = expert_matrix(p.experts, e, kPartDown);
    const int64_t ra = r0 + g, rb = r0 + g + 8;
    const auto* dbase = static_cast<const __nv_bfloat16*>(down.data);
    const __nv_bfloat16* wa = ra < hidden ? dbase + ra * down.cols : nullptr;
    const __nv_bfloat16* wb = rb < hidden ? dbase + rb * down.cols : nullptr;
    const __nv_bfloat16* h0 = g < n ? p.h + static_cast<int64_t>(p0 + g) * inter : nullptr;
    const __nv_bfloat16* h1 = g + 8 < n ? p.h + static_cast<int64_t>(p0 + g + 8) * inter : nullptr;
    float acc[2][4] = {};
    for (int64_t s0 = 0; s0 < steps; s0 += U) {
      uint4 va[U], vb[U], xa[U], xb[U];
      const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t col = (s0 + u) * 32 + c * 8;
        const bool ok = col < inter;
        va[u] = ok && wa ? ld_stream16(wa + col) : z;
        vb[u] = ok && wb ? ld_stream16(wb + col) : z;
        xa[u] = ok && h0 ? ld_cached16(h0 + col) : z;
        xb[u] = ok && h1 ? ld_cached16(h1 + col) : z;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        tc_step(acc[0], va[u], vb[u], xa[u]);
        if (n > 8) tc_step(acc[1], va[u], vb[u], xb[u]);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int tok = j * 8 + 2 * c + (q & 1);
        const int64_t row = q < 2 ? ra : rb;
        if (tok < n && row < hidden) p.y[static_cast<int64_t>(p0 + tok) * hidden + row] = __float2bfloat16_rn(acc[j][q]);
      }
  }
}

}  // namespace rs::kern
