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
//   gate_up: one warp-item = (slot, intermediate row): that row of gate and of up, all tokens of
//            the slot; items are spread flat over every warp of a persistent grid, so no SM waits
//            on a partial last wave of (expert, row-group) blocks.
//   down:    a block owns kDownRows hidden rows; its 8 warps take the slots round-robin (one
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
constexpr int kDownRows = 2;        // hidden rows per block-iteration of the few-token down op
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

template <bool kFp8, int MT, int U>
__device__ __forceinline__ void fused_gate_up_op(const ExpertGemvParams& p, SmallRouting& sr) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * kGemvWarps;
  pdl_launch_dependents();
  // The first items are shared-expert rows, known before the routing: start them towards L2
  // while the router drains.
  if (gw < static_cast<int64_t>(ns) * inter) {
    const int k = static_cast<int>(gw / inter);
    const int64_t row = gw % inter;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const WeightRow r = weight_row(expert_matrix(p.experts, p.experts.num_experts + k, part), row, kFp8);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = u * 32 + lane;
        if (c < hidden / E) asm volatile("prefetch.global.L2 [%0];" ::"l"(r.data + c * 16));
      }
    }
  }
  pdl_wait();  // routing from the router, x from the norm
  small_routing(p, sr);
  const int64_t items = static_cast<int64_t>(ns + sr.n_active) * inter;
  for (int64_t it = gw; it < items; it += nw) {
    const int s = static_cast<int>(it / inter);
    const int64_t row = it % inter;
    const int e = small_slot_expert(p, sr, s);
    const uint32_t sel = small_slot_tokens(p, sr, s);
    const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
    const WeightRow rows[2] = {weight_row(gate, row, kFp8),
                               weight_row(expert_matrix(p.experts, e, kPartUp), row, kFp8)};
    const __nv_bfloat16* xr[1][MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) xr[0][t] = (t < p.m && (sel >> t & 1u)) ? p.x + static_cast<int64_t>(t) * hidden : nullptr;
    float part[2][MT];
    gemv_warp_partial<kFp8, 2, MT, U>(rows, xr, 0, hidden / E, gate.block_cols, part);
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      const float g = warp_sum(part[0][t]);
      const float u = warp_sum(part[1][t]);
      if (lane == (t & 31) && xr[0][t])
        p.h[(static_cast<int64_t>(s) * p.m + t) * inter + row] = __float2bfloat16_rn(silu(g) * u);
    }
  }
}

// out[t, row] = sum over slots of weight(t, slot) * down_slot[row] . h[slot, t]
// red: shared memory [kGemvWarps][kDownRows][MT].
template <bool kFp8, int MT, int U>
__device__ __forceinline__ void fused_down_op(const ExpertGemvParams& p, SmallRouting& sr, float* red) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t groups = (hidden + kDownRows - 1) / kDownRows;
  pdl_launch_dependents();
  if (warp < ns && blockIdx.x < groups) {  // first rows of this warp's shared slot, towards L2
    const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, p.experts.num_experts + warp, kPartDown);
#pragma unroll
    for (int r = 0; r < kDownRows; ++r) {
      const WeightRow wr = weight_row(d, static_cast<int64_t>(blockIdx.x) * kDownRows + r, kFp8);
      if (!wr.data) continue;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = u * 32 + lane;
        if (c < inter / E) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr.data + c * 16));
      }
    }
  }
  pdl_wait();  // routing from the router, h from the gate_up kernel
  small_routing(p, sr);
  const int slots = ns + sr.n_active;
  for (int64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {  // uniform over the block
    float acc[kDownRows][MT];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) acc[r][t] = 0.f;
    for (int s = warp; s < slots; s += kGemvWarps) {
      const int e = small_slot_expert(p, sr, s);
      const uint32_t sel = small_slot_tokens(p, sr, s);
      const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, e, kPartDown);
      WeightRow rows[kDownRows];
#pragma unroll
      for (int r = 0; r < kDownRows; ++r) rows[r] = weight_row(d, rg * kDownRows + r, kFp8);
      const __nv_bfloat16* hr[1][MT];
#pragma unroll
      for (int t = 0; t < MT; ++t)
        hr[0][t] = (t < p.m && (sel >> t & 1u)) ? p.h + (static_cast<int64_t>(s) * p.m + t) * inter : nullptr;
      float part[kDownRows][MT];
      gemv_warp_partial<kFp8, kDownRows, MT, U>(rows, hr, 0, inter / E, d.block_cols, part);
      // The routing weight is linear in the dot product: lanes apply it before the reduction.
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float wt = s < ns ? 1.f : (t < kExpertGemvMaxTokens ? sr.weight[t][s - ns] : 0.f);
#pragma unroll
        for (int r = 0; r < kDownRows; ++r) acc[r][t] = fmaf(wt, part[r][t], acc[r][t]);
      }
    }
#pragma unroll
    for (int r = 0; r < kDownRows; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float v = warp_sum(acc[r][t]);
        if (lane == 0) red[(warp * kDownRows + r) * MT + t] = v;
      }
    __syncthreads();
    if (threadIdx.x < kDownRows * MT) {
      const int r = threadIdx.x / MT, t = threadIdx.x % MT;
      float v = 0.f;
      for (int k = 0; k < kGemvWarps; ++k) v += red[(k * kDownRows + r) * MT + t];  // fixed order
      const int64_t row = rg * kDownRows + r;
      if (row < hidden && t < p.m) p.out[static_cast<int64_t>(t) * hidden + row] = __float2bfloat16_rn(v);
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------
// Few tokens, one kernel: gate_up (+SwiGLU) then down in the same persistent grid. Opt-in
// (RS_EXPERT_FUSED=1..4): measured slower than the two kernels above in every mode, at the kernel
// and at the decode step (docs/perf/matmul.md, 2026-11-30 04:31); kept, tested, for A/B runs.
//
// The idea: as two kernels, each pays a ramp (launch, routing prologue, first loads) and a tail (the
// last, partly filled round of warp-items), and down's weights cannot start streaming before the
// last gate_up block has left its SM (both kernels fill the SMs). Here a warp that runs out of
// gate_up items goes straight on to down: it asks L2 for all of its block's down rows while the
// other warps finish gate_up; the block then waits for the grid-wide hand-over before it reads h. Gate_up itself is software-pipelined: a warp issues the loads of its next
// batch (2 rows x kFusedU 16-byte chunks per lane, 4 KB per warp, possibly of its next item)
// before it computes the current one, so its loads stay in flight while it computes instead of
// stopping in lock-step rounds (the FP8 kernels take as long as bf16 for half the bytes). Measured:
// the grid-wide wait stalls every SM once and costs what the saved launch and ramp give.
//
// Hand-over: every warp, after its last gate_up store, fences and adds 1 to sync->gate_up_done;
// h is read (L2 loads, after one thread's acquire of the counter and a block barrier) only once
// all gridDim.x * kGemvWarps warps have. That needs every block of the grid resident at once: the launcher sizes the grid
// to the occupancy, and every block triggers launch_dependents at entry, so a dependent grid is
// launched only once all of this grid's blocks run. The last block out resets both counters, so
// the next call (the next layer, a graph replay) starts from zero. One fused call at a time per
// device (the counters are one per device; the backend runs its layers on one stream).
struct FusedSync {
  unsigned gate_up_done;
  unsigned blocks_out;
};

constexpr int kFusedU = 4;  // chunks per row per gate_up batch

template <bool kFp8>
struct FusedBatch {
  uint4 w[2][kFusedU];  // gate, up
  float s[2][kFusedU];  // FP8 block scales (unused for bf16)
};

// Position in a warp's gate_up stream: item it = slot s * inter + row, batch j of the row
// (32-bit: slots * inter is far below 2^31; one division per item, in fused_next).
struct FusedPos {
  int it, s, row, j;
};

template <bool kFp8>
__device__ __forceinline__ void fused_load(const ExpertGemvParams& p, const SmallRouting& sr, FusedPos pos,
                                           FusedBatch<kFp8>& b) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
  const int64_t nch = p.experts.hidden / E;
  const int e = small_slot_expert(p, sr, pos.s);
  const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
  const WeightRow rows[2] = {weight_row(gate, pos.row, kFp8),
                             weight_row(expert_matrix(p.experts, e, kPartUp), pos.row, kFp8)};
#pragma unroll
  for (int u = 0; u < kFusedU; ++u) {
    const int64_t c = static_cast<int64_t>(pos.j) * 32 * kFusedU + u * 32 + lane;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (c < nch) {
        b.w[r][u] = ld_stream16(rows[r].data + c * 16);
        if constexpr (kFp8) b.s[r][u] = __ldg(rows[r].scale + (c * E) / gate.block_cols);
      } else {
        b.w[r][u] = make_uint4(0, 0, 0, 0);
        if constexpr (kFp8) b.s[r][u] = 0.f;
      }
    }
  }
}

// Accumulates batch `pos` into part; on the last batch of a row, reduces and stores h.
template <bool kFp8, int MT>
__device__ __forceinline__ void fused_consume(const ExpertGemvParams& p, const SmallRouting& sr, FusedPos pos,
                                              const FusedBatch<kFp8>& b, int nb, float (&part)[2][MT]) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, inter = p.experts.inter, hidden = p.experts.hidden;
  const int64_t nch = hidden / E;
  const int s = pos.s;
  const uint32_t sel = small_slot_tokens(p, sr, s);
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    if (t >= p.m || !(sel >> t & 1u)) continue;  // warp-uniform
    const __nv_bfloat16* xr = p.x + static_cast<int64_t>(t) * hidden;
#pragma unroll
    for (int u = 0; u < kFusedU; ++u) {
      const int64_t c = static_cast<int64_t>(pos.j) * 32 * kFusedU + u * 32 + lane;
      if (c >= nch) continue;
      if constexpr (kFp8) {
        const uint4 x0 = ld_cached16(xr + c * 16), x1 = ld_cached16(xr + c * 16 + 8);
#pragma unroll
        for (int r = 0; r < 2; ++r) part[r][t] = fmaf(b.s[r][u], dot16_e4m3(b.w[r][u], x0, x1), part[r][t]);
      } else {
        const uint4 xv = ld_cached16(xr + c * 8);
#pragma unroll
        for (int r = 0; r < 2; ++r) part[r][t] = dot8_bf16(b.w[r][u], xv, part[r][t]);
      }
    }
  }
  if (pos.j != nb - 1) return;
  const int64_t row = pos.row;
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const float g = warp_sum(part[0][t]);
    const float u = warp_sum(part[1][t]);
    if (lane == (t & 31) && t < p.m && (sel >> t & 1u))
      p.h[(static_cast<int64_t>(s) * p.m + t) * inter + row] = __float2bfloat16_rn(silu(g) * u);
    part[0][t] = part[1][t] = 0.f;
  }
}

__device__ __forceinline__ FusedPos fused_pos(int it, int inter) { return FusedPos{it, it / inter, it % inter, 0}; }
__device__ __forceinline__ FusedPos fused_next(FusedPos pos, int nb, int nw, int inter) {
  return ++pos.j == nb ? fused_pos(pos.it + nw, inter) : pos;
}

// One thread per block spins until all warps of the grid are past gate_up (the block barrier
// after it passes the acquire on to the others, as a grid sync does). One poller per block and a
// sleep between polls: ~2000 polling warps had the counter's L2 slice saturated, and with it the
// weight traffic of the warps still in gate_up (measured: the fused kernel was slower than the two
// it replaces). A broken hand-over traps after ~4 s instead of hanging the device.
__device__ __forceinline__ void fused_wait_gate_up(const FusedSync* sync, unsigned warps) {
  uint64_t t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (ld_acquire_gpu(&sync->gate_up_done) < warps) {
    __nanosleep(400);
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 4000000000ull) __trap();
  }
}

// UD: chunks per lane per down batch (one batch covers a whole 1408-wide row: bf16 176 <= 192,
// FP8 88 <= 96). red: shared memory [kGemvWarps][kDownRows][MT].
// mode (A/B switches, measured in docs/perf/matmul.md): bit 0 set = no L2 prefetch of the
// block's down rows before the hand-over; bit 1 set = gate_up in whole-row batches (the
// two-kernel op's loop, U = UG chunks a row) instead of the software pipeline.
template <bool kFp8, int MT, int UD, int UG>
__device__ __forceinline__ void fused_experts_op(const ExpertGemvParams& p, SmallRouting& sr, float* red,
                                                 FusedSync* sync, int mode) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * kGemvWarps;
  const int64_t nch = hidden / E;
  const int nb = static_cast<int>((nch + 32 * kFusedU - 1) / (32 * kFusedU));  // batches per row
  pdl_launch_dependents();  // at entry: see FusedSync (all blocks resident before any dependent)
  // Shared-expert rows are known before the routing: start this warp's first ones towards L2.
  for (int64_t it = gw; it < static_cast<int64_t>(ns) * inter && it < gw + 2 * nw; it += nw) {
    const int k = static_cast<int>(it / inter);
    const int64_t row = it % inter;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const WeightRow r = weight_row(expert_matrix(p.experts, p.experts.num_experts + k, part), row, kFp8);
      for (int64_t c = lane; c < nch; c += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(r.data + c * 16));
    }
  }
  pdl_wait();  // routing from the router, x from the norm
  small_routing(p, sr);
  const int slots = ns + sr.n_active;

  // ---- gate_up: the two-kernel op's whole-row batches (mode bit 1), or the software pipeline
  // (two batches in registers: load next, compute current).
  if (mode & 2) {
    for (int64_t it = gw; it < static_cast<int64_t>(slots) * inter; it += nw) {
      const int s = static_cast<int>(it / inter);
      const int64_t row = it % inter;
      const int e = small_slot_expert(p, sr, s);
      const uint32_t sel = small_slot_tokens(p, sr, s);
      const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
      const WeightRow rows[2] = {weight_row(gate, row, kFp8),
                                 weight_row(expert_matrix(p.experts, e, kPartUp), row, kFp8)};
      const __nv_bfloat16* xr[1][MT];
#pragma unroll
      for (int t = 0; t < MT; ++t) xr[0][t] = (t < p.m && (sel >> t & 1u)) ? p.x + static_cast<int64_t>(t) * hidden : nullptr;
      float part[2][MT];
      gemv_warp_partial<kFp8, 2, MT, UG>(rows, xr, 0, nch, gate.block_cols, part);
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float g = warp_sum(part[0][t]);
        const float u = warp_sum(part[1][t]);
        if (lane == (t & 31) && xr[0][t])
          p.h[(static_cast<int64_t>(s) * p.m + t) * inter + row] = __float2bfloat16_rn(silu(g) * u);
      }
    }
  } else {
    const int items = slots * inter, nwi = static_cast<int>(nw);
    float part[2][MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) part[0][t] = part[1][t] = 0.f;
    FusedBatch<kFp8> ba, bb;
    FusedPos pa = fused_pos(static_cast<int>(gw), inter), pb;
    if (pa.it < items) fused_load<kFp8>(p, sr, pa, ba);
    while (pa.it < items) {
      pb = fused_next(pa, nb, nwi, inter);
      if (pb.it < items) fused_load<kFp8>(p, sr, pb, bb);
      fused_consume<kFp8, MT>(p, sr, pa, ba, nb, part);
      if (pb.it >= items) break;
      pa = fused_next(pb, nb, nwi, inter);
      if (pa.it < items) fused_load<kFp8>(p, sr, pa, ba);
      fused_consume<kFp8, MT>(p, sr, pb, bb, nb, part);
    }
  }
  __threadfence();  // this lane's h stores, before the warp's increment
  __syncwarp();
  if (lane == 0) atomicAdd(&sync->gate_up_done, 1u);

  // ---- down: a block owns kDownRows hidden rows per iteration, its warps take the slots.
  const int64_t groups = (hidden + kDownRows - 1) / kDownRows;
  const int64_t dch = inter / E;
  // This warp's down rows of every iteration, towards L2 while gate_up drains.
  if (!(mode & 1))
  for (int64_t rg = blockIdx.x; rg < groups; rg += gridDim.x)
    for (int s = warp; s < slots; s += kGemvWarps) {
      const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, small_slot_expert(p, sr, s), kPartDown);
#pragma unroll
      for (int r = 0; r < kDownRows; ++r) {
        const WeightRow wr = weight_row(d, rg * kDownRows + r, kFp8);
        if (!wr.data) continue;
        for (int64_t c = lane; c < dch; c += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr.data + c * 16));
      }
    }
  __syncthreads();  // the whole block is past gate_up
  if (threadIdx.x == 0) fused_wait_gate_up(sync, static_cast<unsigned>(nw));
  __syncthreads();  // ... and so is the grid: h may be read (through L2)
  for (int64_t rg = blockIdx.x; rg < groups; rg += gridDim.x) {  // uniform over the block
    float acc[kDownRows][MT];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) acc[r][t] = 0.f;
    for (int s = warp; s < slots; s += kGemvWarps) {
      const int e = small_slot_expert(p, sr, s);
      const uint32_t sel = small_slot_tokens(p, sr, s);
      const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, e, kPartDown);
      WeightRow rows[kDownRows];
#pragma unroll
      for (int r = 0; r < kDownRows; ++r) rows[r] = weight_row(d, rg * kDownRows + r, kFp8);
      float part[kDownRows][MT];
#pragma unroll
      for (int r = 0; r < kDownRows; ++r)
#pragma unroll
        for (int t = 0; t < MT; ++t) part[r][t] = 0.f;
      for (int64_t c0 = 0; c0 < dch; c0 += 32 * UD) {
        uint4 w[kDownRows][UD];
        float sc[kDownRows][UD];
#pragma unroll
        for (int u = 0; u < UD; ++u) {
          const int64_t c = c0 + u * 32 + lane;
#pragma unroll
          for (int r = 0; r < kDownRows; ++r) {
            if (c < dch && rows[r].data) {
              w[r][u] = ld_stream16(rows[r].data + c * 16);
              if constexpr (kFp8) sc[r][u] = __ldg(rows[r].scale + (c * E) / d.block_cols);
            } else {
              w[r][u] = make_uint4(0, 0, 0, 0);
              if constexpr (kFp8) sc[r][u] = 0.f;
            }
          }
        }
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          if (t >= p.m || !(sel >> t & 1u)) continue;  // warp-uniform
          const __nv_bfloat16* hr = p.h + (static_cast<int64_t>(s) * p.m + t) * inter;
#pragma unroll
          for (int u = 0; u < UD; ++u) {
            const int64_t c = c0 + u * 32 + lane;
            if (c >= dch) continue;
            if constexpr (kFp8) {
              const uint4 h0 = ld_l2_16(hr + c * 16), h1 = ld_l2_16(hr + c * 16 + 8);
#pragma unroll
              for (int r = 0; r < kDownRows; ++r) part[r][t] = fmaf(sc[r][u], dot16_e4m3(w[r][u], h0, h1), part[r][t]);
            } else {
              const uint4 hv = ld_l2_16(hr + c * 8);
#pragma unroll
              for (int r = 0; r < kDownRows; ++r) part[r][t] = dot8_bf16(w[r][u], hv, part[r][t]);
            }
          }
        }
      }
      // The routing weight is linear in the dot product: lanes apply it before the reduction.
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float wt = s < ns ? 1.f : (t < kExpertGemvMaxTokens ? sr.weight[t][s - ns] : 0.f);
#pragma unroll
        for (int r = 0; r < kDownRows; ++r) acc[r][t] = fmaf(wt, part[r][t], acc[r][t]);
      }
    }
#pragma unroll
    for (int r = 0; r < kDownRows; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float v = warp_sum(acc[r][t]);
        if (lane == 0) red[(warp * kDownRows + r) * MT + t] = v;
      }
    __syncthreads();
    if (threadIdx.x < kDownRows * MT) {
      const int r = threadIdx.x / MT, t = threadIdx.x % MT;
      float v = 0.f;
      for (int k = 0; k < kGemvWarps; ++k) v += red[(k * kDownRows + r) * MT + t];  // fixed order
      const int64_t row = rg * kDownRows + r;
      if (row < hidden && t < p.m) p.out[static_cast<int64_t>(t) * hidden + row] = __float2bfloat16_rn(v);
    }
    __syncthreads();
  }

  // ---- the last block out resets the counters for the next call.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&sync->blocks_out, 1u) == gridDim.x - 1) {
      atomicExch(&sync->gate_up_done, 0u);
      atomicExch(&sync->blocks_out, 0u);
    }
  }
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
