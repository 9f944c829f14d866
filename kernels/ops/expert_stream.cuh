#pragma once
// One token's expert FFN (shared experts folded in as slots, as in expert_decode.cuh) with the
// weights streamed through a shared-memory ring of bulk copies (kernels/common/bulk_copy.cuh):
// one producer lane issues the copies, sixteen consumer warps do the dot products.
//
// Why: the register kernels of expert_decode.cuh keep at most one item's weights in flight per
// warp, and a warp waits out the whole memory latency before computing that item and loading the
// next. With FP8 the compute between two loads is long enough that those kernels moved 2.1 TB/s
// (gate_up) and 1.6 TB/s (down) at batch 1 on the H200 (timeline of 2026-11-30), against 3.4 and
// 2.8 in bf16. Here the copies stay in flight while the consumers compute, up to the ring's
// ~180 KB an SM, and the copies of the shared experts' rows, known before the routing, are issued
// before griddepcontrol.wait.
//
// The arithmetic is the register kernels', in the same order (each lane's chunks lane, lane + 32,
// ..., warp sums, down's slots added per lane with their routing weight, warps added 0..7), so
// the two paths give the same bits.
//
//   gate_up: block b owns intermediate rows [b*inter/G, (b+1)*inter/G) of every slot; a stage is
//            up to rows_per_stage of them from one slot, its gate rows then its up rows; the k-th
//            row of the block's stages goes to warp k % 16 and writes h[slot][row] = silu(g) * u.
//   down:    block b owns hidden rows [b*hidden/G, (b+1)*hidden/G); a stage is up to
//            rows_per_stage of them for every slot ([slot][row][inter]); even stages go to warps
//            0-7, odd ones to warps 8-15 (each group owns half the ring's stages); in a group,
//            warp w takes slots w, w + 8, ... of each row, and each row's eight warp sums meet in
//            shared memory in a fixed order once the block is done.
// Slots past n_shared + n_active (an invalid or repeated expert id) get stages with no bytes,
// which the consumers skip.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/expert_decode.cuh"
#include "kernels/ops/expert_stream_geom.h"

namespace rs::kern {

constexpr int kXsMaxSlots = kMaxSharedSlots + kMaxTopK;

// Shared memory for the slots' matrices (DeviceMatrix has member initialisers, which a __shared__
// variable may not).
struct XsSlotMatrices {
  alignas(16) unsigned char raw[sizeof(rs::cuda::DeviceMatrix) * kXsMaxSlots * 2];
  __device__ rs::cuda::DeviceMatrix (*get())[2] { return reinterpret_cast<rs::cuda::DeviceMatrix (*)[2]>(raw); }
};

// Named barrier 1 over the consumer warps only (the producer warp never takes part).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kXsConsumerWarps * 32) : "memory");
}

// Adds `bytes` to the transaction count the current phase of `bar` waits for, without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

// Matrix `part` of slots [first, last) into shared memory: shared experts' views come from the
// parameters (known before the wait), routed experts' from the device arrays (after routing).
// Ends with __syncthreads.
__device__ __forceinline__ void xs_slot_matrices(const ExpertGemvParams& p, const SmallRouting& sr, int first,
                                                 int last, int part0, int parts,
                                                 rs::cuda::DeviceMatrix (*mats)[2]) {
  const int ns = p.experts.n_shared;
  for (int i = threadIdx.x; i < (last - first) * parts; i += blockDim.x) {
    const int s = first + i / parts, k = i % parts;
    const int e = s < ns ? p.experts.num_experts + s : sr.expert[s - ns];
    mats[s][k] = expert_matrix(p.experts, e, part0 + k);
  }
  __syncthreads();
}

__device__ __forceinline__ bool xs_slot_active(const ExpertGemvParams& p, const SmallRouting& sr, int s) {
  return s < p.experts.n_shared + sr.n_active;
}

// ---- gate_up --------------------------------------------------------------------------------

struct XsGateUpStage {
  int slot, r0, cnt;
};
// Stage i of a block owning rows [r_lo, r_lo + nrows) of each slot in stages of P rows (sps a slot).
__device__ __forceinline__ XsGateUpStage xs_gate_up_stage(uint32_t i, int r_lo, int nrows, int sps, int P) {
  XsGateUpStage st;
  st.slot = static_cast<int>(i) / sps;
  st.r0 = r_lo + (static_cast<int>(i) % sps) * P;
  st.cnt = min(P, r_lo + nrows - st.r0);
  return st;
}

// Producer lane: stage i's gate rows, then its up rows. No bytes for an inactive slot.
template <bool kFp8, int S>
__device__ __forceinline__ void xs_issue_gate_up(uint8_t* smem, const ExpertStreamGeom& g, BulkRing<S>& ring,
                                                 uint32_t i, const XsGateUpStage& st, bool active,
                                                 const rs::cuda::DeviceMatrix (&m)[2], uint32_t row_bytes,
                                                 uint64_t policy) {
  const int s = ring.stage(i);
  if (!active) {
    mbar_arrive(&ring.full[s]);
    return;
  }
  uint8_t* dst = smem + static_cast<size_t>(s) * g.stage_bytes;
  const uint32_t bytes = static_cast<uint32_t>(st.cnt) * row_bytes;
  mbar_arrive_expect_tx(&ring.full[s], 2 * bytes);
  bulk_copy_g2s(dst, weight_row(m[0], st.r0, kFp8).data, bytes, &ring.full[s], policy);
  bulk_copy_g2s(dst + bytes, weight_row(m[1], st.r0, kFp8).data, bytes, &ring.full[s], policy);
}

// h[slot][row] = silu(gate . x) * (up . x) for this block's rows of every slot (one token).
template <bool kFp8, int S>
__device__ __forceinline__ void expert_stream_gate_up_op(const ExpertGemvParams& p, const ExpertStreamGeom& g,
                                                         uint8_t* smem) {
  constexpr int E = chunk_elems<kFp8>();
  __shared__ BulkRing<S> ring;
  __shared__ SmallRouting sr;
  __shared__ XsSlotMatrices mats_smem;
  __shared__ float amax_scratch[32];
  rs::cuda::DeviceMatrix (*mats)[2] = mats_smem.get();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const bool producer = warp == kXsConsumerWarps;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const uint32_t row_bytes = static_cast<uint32_t>(hidden) * (kFp8 ? 1u : 2u);
  const int r_lo = static_cast<int>(static_cast<int64_t>(blockIdx.x) * inter / gridDim.x);
  const int nrows = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * inter / gridDim.x) - r_lo;
  const int sps = nrows > 0 ? (nrows + g.rows_per_stage - 1) / g.rows_per_stage : 0;  // stages a slot
  const int P = sps > 0 ? (nrows + sps - 1) / sps : 0;
  const uint32_t n_stages = static_cast<uint32_t>(g.slots * sps);
  const int64_t nch = hidden / E;

  if (threadIdx.x == 0) ring.init(kXsConsumerWarps);
  xs_slot_matrices(p, sr, 0, ns, kPartGate, 2, mats);  // __syncthreads: the ring's init is visible too
  pdl_launch_dependents();
  const uint64_t policy = l2_evict_first();
  uint32_t issued = 0;
  // The shared experts' stages come first and need no routing: before the wait.
  const uint32_t first = min(n_stages, static_cast<uint32_t>(S));
  if (producer && lane == 0)
    for (; issued < first; ++issued) {
      const XsGateUpStage st = xs_gate_up_stage(issued, r_lo, nrows, sps, P);
      if (st.slot >= ns) break;
      xs_issue_gate_up<kFp8, S>(smem, g, ring, issued, st, true, mats[st.slot], row_bytes, policy);
    }
  pdl_wait();  // routing from the router, x from the norm
  small_routing(p, sr);
  xs_slot_matrices(p, sr, ns, ns + sr.n_active, kPartGate, 2, mats);
  if (producer && lane == 0)
    for (; issued < first; ++issued) {
      const XsGateUpStage st = xs_gate_up_stage(issued, r_lo, nrows, sps, P);
      xs_issue_gate_up<kFp8, S>(smem, g, ring, issued, st, xs_slot_active(p, sr, st.slot), mats[st.slot], row_bytes,
                                policy);
    }
  issued = first;  // every lane of the producer warp, which waits on the ring as one below
  // x into shared memory: bf16 as is; FP8 as f16 scaled by 2^-e (expert_decode.cuh's staging).
  uint8_t* act = smem + g.act_offset;
  float x_scale = 1.f;
  if constexpr (kFp8) {
    const int e = f16_stage_exponent(rs::cuda::block_max(amax_bf16(p.x, hidden, threadIdx.x, blockDim.x), amax_scratch));
    stage_f16(p.x, hidden, e, reinterpret_cast<__half*>(act), threadIdx.x, blockDim.x);
    x_scale = ldexpf(1.f, e);
  } else {
    for (int v = threadIdx.x; v < hidden / 8; v += blockDim.x)
      reinterpret_cast<uint4*>(act)[v] = ld_cached16(p.x + static_cast<int64_t>(v) * 8);
  }
  __syncthreads();

  if (producer) {
    for (uint32_t i = issued; i < n_stages; ++i) {
      ring.acquire(i);
      if (lane == 0) {
        const XsGateUpStage st = xs_gate_up_stage(i, r_lo, nrows, sps, P);
        xs_issue_gate_up<kFp8, S>(smem, g, ring, i, st, xs_slot_active(p, sr, st.slot), mats[st.slot], row_bytes,
                                  policy);
      }
      __syncwarp();
    }
    return;
  }
  int k0 = 0;  // rows of the earlier stages: row q of this stage is the block's row k0 + q
  for (uint32_t i = 0; i < n_stages; ++i) {
    const XsGateUpStage st = xs_gate_up_stage(i, r_lo, nrows, sps, P);
    ring.wait_full(i);
    if (xs_slot_active(p, sr, st.slot)) {
      const uint8_t* stage = smem + static_cast<size_t>(ring.stage(i)) * g.stage_bytes;
      for (int q = (warp - k0 % kXsConsumerWarps + kXsConsumerWarps) % kXsConsumerWarps; q < st.cnt;
           q += kXsConsumerWarps) {
        const int row = st.r0 + q;
        const uint8_t* wg = stage + static_cast<size_t>(q) * row_bytes;
        const uint8_t* wu = stage + static_cast<size_t>(st.cnt + q) * row_bytes;
        float pg = 0.f, pu = 0.f;
        if constexpr (kFp8) {
          const WeightRow rg = weight_row(mats[st.slot][0], row, true), ru = weight_row(mats[st.slot][1], row, true);
          const __half* xh = reinterpret_cast<const __half*>(act);
          const int bc = mats[st.slot][0].block_cols;
#pragma unroll 4
          for (int64_t c = lane; c < nch; c += 32) {
            const uint4 x0 = *reinterpret_cast<const uint4*>(xh + c * 16);
            const uint4 x1 = *reinterpret_cast<const uint4*>(xh + c * 16 + 8);
            pg = fmaf(__ldg(rg.scale + (c * E) / bc), dot16_e4m3_f16(reinterpret_cast<const uint4*>(wg)[c], x0, x1), pg);
            pu = fmaf(__ldg(ru.scale + (c * E) / bc), dot16_e4m3_f16(reinterpret_cast<const uint4*>(wu)[c], x0, x1), pu);
          }
        } else {
#pragma unroll 4
          for (int64_t c = lane; c < nch; c += 32) {
            const uint4 xv = reinterpret_cast<const uint4*>(act)[c];
            pg = dot8_bf16(reinterpret_cast<const uint4*>(wg)[c], xv, pg);
            pu = dot8_bf16(reinterpret_cast<const uint4*>(wu)[c], xv, pu);
          }
        }
        const float gv = warp_sum(pg) * x_scale;
        const float uv = warp_sum(pu) * x_scale;
        if (lane == 0) p.h[static_cast<int64_t>(st.slot) * inter + row] = __float2bfloat16_rn(silu(gv) * uv);
      }
    }
    k0 += st.cnt;
    __syncwarp();
    if (lane == 0) ring.release(i);
  }
}

// ---- down -----------------------------------------------------------------------------------

// Producer lane: the segments of stage i (rows [r0, r0 + cnt)) of slots [s0, s1), one copy per
// slot whose rows are contiguous (a routed expert), else one per row (a shared expert's column
// view). Returns the bytes issued.
template <bool kFp8, int S>
__device__ __forceinline__ uint32_t xs_issue_down_slots(uint8_t* smem, const ExpertStreamGeom& g, BulkRing<S>& ring,
                                                        uint32_t i, int r0, int cnt, int s0, int s1, int R,
                                                        const rs::cuda::DeviceMatrix (*mats)[2], int inter,
                                                        uint64_t policy) {
  const int st = ring.stage(i);
  const uint32_t seg = static_cast<uint32_t>(inter) * (kFp8 ? 1u : 2u);
  uint8_t* base = smem + static_cast<size_t>(st) * g.stage_bytes;
  uint32_t bytes = 0;
  for (int s = s0; s < s1; ++s) {
    const rs::cuda::DeviceMatrix& m = mats[s][0];
    uint8_t* dst = base + static_cast<size_t>(s) * R * seg;
    if (m.cols == inter) {
      bulk_copy_g2s(dst, weight_row(m, r0, kFp8).data, static_cast<uint32_t>(cnt) * seg, &ring.full[st], policy);
    } else {
      for (int r = 0; r < cnt; ++r)
        bulk_copy_g2s(dst + static_cast<size_t>(r) * seg, weight_row(m, r0 + r, kFp8).data, seg, &ring.full[st], policy);
    }
    bytes += static_cast<uint32_t>(cnt) * seg;
  }
  return bytes;
}

// out[row] = sum over slots of weight(slot) * down_slot[row] . h[slot] for this block's rows.
template <bool kFp8, int S>
__device__ __forceinline__ void expert_stream_down_op(const ExpertGemvParams& p, const ExpertStreamGeom& g,
                                                      uint8_t* smem) {
  constexpr int E = chunk_elems<kFp8>();
  __shared__ BulkRing<S> ring;
  __shared__ SmallRouting sr;
  __shared__ XsSlotMatrices mats_smem;
  __shared__ float red[kXsDownSlotWarps][kXsMaxBlockRows];
  __shared__ float h_scale[kXsMaxSlots];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const bool producer = warp == kXsConsumerWarps;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int R = g.rows_per_stage;
  const int rb = static_cast<int>(static_cast<int64_t>(blockIdx.x) * hidden / gridDim.x);
  const int re = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * hidden / gridDim.x);
  const uint32_t n_stages = static_cast<uint32_t>((re - rb + R - 1) / R);
  const uint32_t seg = static_cast<uint32_t>(inter) * (kFp8 ? 1u : 2u);
  const int64_t nch = inter / E;
  auto rows_of = [&](uint32_t i) { return min(R, re - (rb + static_cast<int>(i) * R)); };
  rs::cuda::DeviceMatrix (*mats)[2] = mats_smem.get();

  static_assert(S % 2 == 0, "each consumer group owns every other stage of the ring");
  if (threadIdx.x == 0) ring.init(kXsDownSlotWarps);
  xs_slot_matrices(p, sr, 0, ns, kPartDown, 1, mats);
  pdl_launch_dependents();
  const uint64_t policy = l2_evict_first();
  const uint32_t first = min(n_stages, static_cast<uint32_t>(S));
  // Before the wait: the shared experts' segments of the first stages. Their bytes are expected
  // without arriving; the routed segments' arrival after the routing completes the phase.
  if (producer && lane == 0)
    for (uint32_t i = 0; i < first; ++i) {
      const int r0 = rb + static_cast<int>(i) * R;
      mbar_expect_tx(&ring.full[ring.stage(i)], static_cast<uint32_t>(ns * rows_of(i)) * seg);
      xs_issue_down_slots<kFp8, S>(smem, g, ring, i, r0, rows_of(i), 0, ns, R, mats, inter, policy);
    }
  pdl_wait();  // routing from the router, h from the gate_up kernel
  small_routing(p, sr);
  const int slots = ns + sr.n_active;
  xs_slot_matrices(p, sr, ns, slots, kPartDown, 1, mats);
  if (producer && lane == 0)
    for (uint32_t i = 0; i < first; ++i) {
      const int r0 = rb + static_cast<int>(i) * R;
      mbar_arrive_expect_tx(&ring.full[ring.stage(i)], static_cast<uint32_t>(sr.n_active * rows_of(i)) * seg);
      xs_issue_down_slots<kFp8, S>(smem, g, ring, i, r0, rows_of(i), ns, slots, R, mats, inter, policy);
    }
  // h into shared memory: bf16 as is; FP8 as f16, each slot by its own power of two, staged by
  // consumer warp s % 8 (expert_decode.cuh's staging).
  uint8_t* act = smem + g.act_offset;
  if constexpr (kFp8) {
    if (!producer) {
      for (int s = warp; s < slots; s += kXsConsumerWarps) {
        const __nv_bfloat16* h = p.h + static_cast<int64_t>(s) * inter;
        const int e = f16_stage_exponent(rs::cuda::warp_max(amax_bf16(h, inter, lane, 32)));
        stage_f16(h, inter, e, reinterpret_cast<__half*>(act) + static_cast<int64_t>(s) * inter, lane, 32);
        if (lane == 0) h_scale[s] = ldexpf(1.f, e);
      }
    }
  } else {
    for (int v = threadIdx.x; v < slots * inter / 8; v += blockDim.x)
      reinterpret_cast<uint4*>(act)[v] = ld_cached16(p.h + static_cast<int64_t>(v) * 8);
  }
  __syncthreads();

  if (producer) {
    for (uint32_t i = first; i < n_stages; ++i) {
      ring.acquire(i);
      if (lane == 0) {
        const int r0 = rb + static_cast<int>(i) * R;
        mbar_arrive_expect_tx(&ring.full[ring.stage(i)], static_cast<uint32_t>(slots * rows_of(i)) * seg);
        xs_issue_down_slots<kFp8, S>(smem, g, ring, i, r0, rows_of(i), 0, slots, R, mats, inter, policy);
      }
      __syncwarp();
    }
    return;
  }
  const int group = warp / kXsDownSlotWarps, sw = warp % kXsDownSlotWarps;
  for (uint32_t i = group; i < n_stages; i += 2) {
    const int r0 = rb + static_cast<int>(i) * R, cnt = rows_of(i);
    ring.wait_full(i);
    const uint8_t* stage = smem + static_cast<size_t>(ring.stage(i)) * g.stage_bytes;
    for (int r = 0; r < cnt; ++r) {
      float acc = 0.f;
      for (int s = sw; s < slots; s += kXsDownSlotWarps) {
        const uint8_t* w = stage + (static_cast<size_t>(s) * R + r) * seg;
        float part = 0.f, slot_scale = 1.f;
        if constexpr (kFp8) {
          const WeightRow wr = weight_row(mats[s][0], r0 + r, true);
          const __half* hh = reinterpret_cast<const __half*>(act) + static_cast<int64_t>(s) * inter;
          const int bc = mats[s][0].block_cols;
#pragma unroll 4
          for (int64_t c = lane; c < nch; c += 32) {
            const uint4 x0 = *reinterpret_cast<const uint4*>(hh + c * 16);
            const uint4 x1 = *reinterpret_cast<const uint4*>(hh + c * 16 + 8);
            part = fmaf(__ldg(wr.scale + (c * E) / bc), dot16_e4m3_f16(reinterpret_cast<const uint4*>(w)[c], x0, x1), part);
          }
          slot_scale = h_scale[s];
        } else {
          const uint4* hv = reinterpret_cast<const uint4*>(act + static_cast<size_t>(s) * inter * 2);
#pragma unroll 4
          for (int64_t c = lane; c < nch; c += 32) part = dot8_bf16(reinterpret_cast<const uint4*>(w)[c], hv[c], part);
        }
        const float wt = slot_scale * (s < ns ? 1.f : sr.weight[0][s - ns]);
        acc = fmaf(wt, part, acc);
      }
      const float v = warp_sum(acc);
      if (lane == 0) red[sw][r0 + r - rb] = v;
    }
    __syncwarp();
    if (lane == 0) ring.release(i);
  }
  consumers_sync();  // every row's warp sums are in red
  for (int r = threadIdx.x; r < re - rb; r += kXsConsumerWarps * 32) {
    float v = 0.f;
    for (int k = 0; k < kXsDownSlotWarps; ++k) v += red[k][r];  // fixed order
    p.out[rb + r] = __float2bfloat16_rn(v);
  }
}

}  // namespace rs::kern
