#pragma once
// Few-token (m = 1, 2) decode expert FFN that streams its weights through a shared-memory ring
// filled by 1-D bulk async copies (kernels/common/bulk_copy.cuh), the same two ops as the
// register-load kernels of expert_decode.cuh (gate_up + SwiGLU into h, then down + routing
// weights + shared experts into out), same slots, same h layout [slot][t][inter].
//
// Why: the register-load kernels keep one warp-item of loads in flight per warp, 64-96 KB an SM,
// which left them latency-bound (ncu: 52-63% of DRAM throughput in bf16, 26-32% in FP8, where
// halving the bytes of an item barely shortened it). Here one producer lane per block keeps a
// ring of kExpertStreamStages stages (~192 KB) of weight rows in flight with one instruction per
// copy, and the consumer warps only read shared memory, so the bytes in flight no longer depend
// on registers, occupancy or the weight type.
//
// Work: one persistent block per SM; a "unit" (one ring stage) is up to R rows of one slot's
// matrix (gate_up: R rows of gate and the same R rows of up, both contiguous; down: R rows of
// down, one copy per row because a shared expert's down is a column view with the parent's row
// stride).
//   gate_up: units are numbered slot-major over all slots (shared slots first); every block gets
//            a balanced contiguous share of the shared units and one of the routed units, in that
//            order, so EVERY block starts with weights known before the routing and issues its
//            first ring's worth of them before griddepcontrol.wait, overlapping the router.
//   down:    a block owns a balanced contiguous range of hidden rows and walks its units slot-
//            major (shared slots first, issued before the wait); each (slot, row) dot product is
//            reduced by one warp, scaled by the routing weight and parked in shared memory; the
//            block then sums the slots of each row in slot order: deterministic, no atomics.
// Every consumer warp walks every unit and takes its rows in rotation (row r of unit i: warp
// (i*R + r) % W), so a stage is released as soon as its rows are reduced, about one row's dot
// product after it lands. (The first version gave each unit to one warp, round-robin over 16
// small stages: a stage then stayed held for a whole unit's work by one warp, and the in-graph
// cost was 1.4-2x the register-load kernels', in proportion to the number of units: see
// docs/perf/cuda.md, 2026-11-30 06:22 UTC.)
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/ops/expert_decode.cuh"

namespace rs::kern {

constexpr int kExpertStreamStages = 8;
constexpr int kExpertStreamWarps = 8;
constexpr int kExpertStreamThreads = (kExpertStreamWarps + 1) * 32;  // + one producer warp

// Host-chosen layout of one launch (moe_decode_kernels.cu): rows per unit and the byte stride
// of a ring stage, and for down the capacity of the per-(slot, row) partial array.
struct ExpertStreamCfg {
  int rows = 1;             // R: weight rows per unit (gate_up: R gate + R up rows)
  uint32_t stage_bytes = 0; // stride of a stage in the ring (multiple of 16, >= the unit's bytes)
  int rows_cap = 0;         // down: most hidden rows a block owns
  int slots_cap = 0;        // down: most slots a call can have (n_shared + min(E, m * top_k))
};

// Contiguous share b of n items over g blocks, balanced to within one item.
__device__ __forceinline__ void expert_stream_share(int64_t n, int b, int g, int64_t& begin, int64_t& end) {
  begin = n * b / g;
  end = n * (b + 1) / g;
}

template <bool kFp8>
__device__ __forceinline__ float expert_stream_dot(const uint4& w, const __nv_bfloat16* x, int64_t c, float scale,
                                                  float acc) {
  if constexpr (kFp8) {
    const uint4 x0 = ld_cached16(x + c * 16), x1 = ld_cached16(x + c * 16 + 8);
    return fmaf(scale, dot16_e4m3(w, x0, x1), acc);
  } else {
    return dot8_bf16(w, ld_cached16(x + c * 8), acc);
  }
}

// ---------------------------------------------------------------------------------------------
// gate_up: h[slot, t, row] = silu(gate_e[row] . x_t) * (up_e[row] . x_t)
template <bool kFp8, int MT>
__device__ __forceinline__ void stream_gate_up_op(const ExpertGemvParams& p, const ExpertStreamCfg& cfg,
                                                  SmallRouting& sr, BulkRing<kExpertStreamStages>& ring,
                                                  uint8_t* stages) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t row_bytes = static_cast<int64_t>(hidden) * (kFp8 ? 1 : 2);
  const int R = cfg.rows;
  const int64_t per_slot = (inter + R - 1) / R;  // units per slot
  const bool producer = warp == kExpertStreamWarps;

  if (threadIdx.x == 0) ring.init(kExpertStreamWarps);  // every consumer warp releases every stage
  __syncthreads();
  pdl_launch_dependents();

  int64_t sh_b, sh_e;
  expert_stream_share(static_cast<int64_t>(ns) * per_slot, blockIdx.x, gridDim.x, sh_b, sh_e);
  const int64_t n_sh = sh_e - sh_b;
  // Unit i of this block -> global unit (slot-major, shared slots first).
  int64_t ro_b = 0;
  auto unit_of = [&](int64_t i) { return i < n_sh ? sh_b + i : static_cast<int64_t>(ns) * per_slot + ro_b + (i - n_sh); };
  auto issue = [&](uint32_t i, uint64_t policy) {
    const int64_t u = unit_of(i);
    const int s = static_cast<int>(u / per_slot);
    const int64_t r0 = (u % per_slot) * R;
    const int n = static_cast<int>(min(static_cast<int64_t>(R), inter - r0));
    const int e = small_slot_expert(p, sr, s);  // shared slots never read sr
    const rs::cuda::DeviceMatrix g = expert_matrix(p.experts, e, kPartGate);
    const rs::cuda::DeviceMatrix up = expert_matrix(p.experts, e, kPartUp);
    uint8_t* st = stages + static_cast<int64_t>(ring.stage(i)) * cfg.stage_bytes;
    const uint32_t bytes = static_cast<uint32_t>(n * row_bytes);
    ring.acquire(i);
    mbar_arrive_expect_tx(&ring.full[ring.stage(i)], 2u * bytes);
    bulk_copy_g2s(st, static_cast<const uint8_t*>(g.data) + r0 * row_bytes, bytes, &ring.full[ring.stage(i)], policy);
    bulk_copy_g2s(st + R * row_bytes, static_cast<const uint8_t*>(up.data) + r0 * row_bytes, bytes,
                  &ring.full[ring.stage(i)], policy);
  };

  // Shared-expert rows are weights known before the routing: start the ring before the wait.
  uint32_t issued = 0;
  if (producer) {
    if (lane == 0) {
      const uint64_t policy = l2_evict_first();
      for (; issued < n_sh && issued < static_cast<uint32_t>(kExpertStreamStages); ++issued) issue(issued, policy);
    }
    __syncwarp();
  }
  pdl_wait();  // routing from the router, x from the norm
  small_routing(p, sr);
  int64_t ro_e;
  expert_stream_share(static_cast<int64_t>(sr.n_active) * per_slot, blockIdx.x, gridDim.x, ro_b, ro_e);
  const int64_t total = n_sh + (ro_e - ro_b);

  if (producer) {
    if (lane == 0) {
      const uint64_t policy = l2_evict_first();
      for (; issued < total; ++issued) issue(issued, policy);
    }
    __syncwarp();
    return;
  }
  // Every consumer warp walks every unit: it waits for the stage to land (which also orders its
  // release after the producer's reuse of that stage, see BulkRing), reduces its rows of the
  // stage, and releases it (one arrival per warp). Rows rotate over the warps from unit to unit
  // (row r of unit i goes to warp (i * R + r) % W), so a unit of fewer than W rows still spreads
  // the work over all warps, and a stage is held only for about one row's dot product.
  for (int64_t i = 0; i < total; ++i) {
    const int64_t u = unit_of(i);
    const int s = static_cast<int>(u / per_slot);
    const int64_t r0 = (u % per_slot) * R;
    const int n = static_cast<int>(min(static_cast<int64_t>(R), inter - r0));
    const int first = (warp - static_cast<int>((i * R) % kExpertStreamWarps) + kExpertStreamWarps) % kExpertStreamWarps;
    const uint8_t* st = stages + static_cast<int64_t>(ring.stage(static_cast<uint32_t>(i))) * cfg.stage_bytes;
    ring.wait_full(static_cast<uint32_t>(i));
    if (first < n) {  // warp-uniform
      const int e = small_slot_expert(p, sr, s);
      const uint32_t sel = small_slot_tokens(p, sr, s);
      const __nv_bfloat16* xr[MT];
#pragma unroll
      for (int t = 0; t < MT; ++t) xr[t] = (t < p.m && (sel >> t & 1u)) ? p.x + static_cast<int64_t>(t) * hidden : nullptr;
      WeightRow gs{}, us{};
      int bc = 1, br = 1;
      if constexpr (kFp8) {
        const rs::cuda::DeviceMatrix g = expert_matrix(p.experts, e, kPartGate);
        gs = weight_row(g, r0, true);
        us = weight_row(expert_matrix(p.experts, e, kPartUp), r0, true);
        bc = g.block_cols;
        br = g.block_rows;
      }
      const int64_t scale_cols = (hidden + bc - 1) / bc;
      for (int r = first; r < n; r += kExpertStreamWarps) {
        const uint4* wg = reinterpret_cast<const uint4*>(st + r * row_bytes);
        const uint4* wu = reinterpret_cast<const uint4*>(st + (R + r) * row_bytes);
        // FP8 scales of this row: the scale row of (r0 + r) / block_rows, relative to r0's.
        const float* gsc = kFp8 ? gs.scale + ((r0 + r) / br - r0 / br) * scale_cols : nullptr;
        const float* usc = kFp8 ? us.scale + ((r0 + r) / br - r0 / br) * scale_cols : nullptr;
        float pg[MT], pu[MT];
#pragma unroll
        for (int t = 0; t < MT; ++t) pg[t] = pu[t] = 0.f;
        const int chunks = static_cast<int>(row_bytes / 16);
#pragma unroll 4
        for (int c = lane; c < chunks; c += 32) {
          const uint4 a = wg[c], b = wu[c];
          float sa = 1.f, sb = 1.f;
          if constexpr (kFp8) {
            sa = __ldg(gsc + (c * E) / bc);
            sb = __ldg(usc + (c * E) / bc);
          }
#pragma unroll
          for (int t = 0; t < MT; ++t) {
            if (!xr[t]) continue;  // warp-uniform
            pg[t] = expert_stream_dot<kFp8>(a, xr[t], c, sa, pg[t]);
            pu[t] = expert_stream_dot<kFp8>(b, xr[t], c, sb, pu[t]);
          }
        }
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const float g = warp_sum(pg[t]);
          const float v = warp_sum(pu[t]);
          if (lane == t && xr[t])
            p.h[(static_cast<int64_t>(s) * p.m + t) * inter + r0 + r] = __float2bfloat16_rn(silu(g) * v);
        }
      }
    }
    __syncwarp();
    if (lane == 0) ring.release(static_cast<uint32_t>(i));
  }
}

// ---------------------------------------------------------------------------------------------
// down: out[t, row] = sum over slots (in slot order) of weight(t, slot) * down_slot[row] . h[slot, t]
// part: shared memory [slots_cap][rows_cap][MT] floats.
template <bool kFp8, int MT>
__device__ __forceinline__ void stream_down_op(const ExpertGemvParams& p, const ExpertStreamCfg& cfg,
                                               SmallRouting& sr, BulkRing<kExpertStreamStages>& ring, uint8_t* stages,
                                               float* part) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const int64_t row_bytes = static_cast<int64_t>(inter) * (kFp8 ? 1 : 2);
  const int R = cfg.rows;
  const bool producer = warp == kExpertStreamWarps;

  if (threadIdx.x == 0) ring.init(kExpertStreamWarps);  // every consumer warp releases every stage
  __syncthreads();
  pdl_launch_dependents();

  int64_t row_b, row_e;
  expert_stream_share(hidden, blockIdx.x, gridDim.x, row_b, row_e);
  const int nrows = static_cast<int>(row_e - row_b);
  const int per_slot = (nrows + R - 1) / R;  // units per slot in this block
  auto issue = [&](uint32_t i, uint64_t policy) {
    const int s = static_cast<int>(i / per_slot);
    const int64_t r0 = row_b + static_cast<int64_t>(i % per_slot) * R;
    const int n = static_cast<int>(min(static_cast<int64_t>(R), row_e - r0));
    const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, small_slot_expert(p, sr, s), kPartDown);
    const int64_t stride = d.cols * (kFp8 ? 1 : 2);  // a shared expert is a column view
    uint8_t* st = stages + static_cast<int64_t>(ring.stage(i)) * cfg.stage_bytes;
    ring.acquire(i);
    mbar_arrive_expect_tx(&ring.full[ring.stage(i)], static_cast<uint32_t>(n * row_bytes));
    for (int r = 0; r < n; ++r)
      bulk_copy_g2s(st + r * row_bytes, static_cast<const uint8_t*>(d.data) + (r0 + r) * stride,
                    static_cast<uint32_t>(row_bytes), &ring.full[ring.stage(i)], policy);
  };

  const uint32_t n_sh = static_cast<uint32_t>(ns * per_slot);
  uint32_t issued = 0;
  if (producer) {
    if (lane == 0) {
      const uint64_t policy = l2_evict_first();
      for (; issued < n_sh && issued < static_cast<uint32_t>(kExpertStreamStages); ++issued) issue(issued, policy);
    }
    __syncwarp();
  }
  pdl_wait();  // routing from the router, h from the gate_up kernel
  small_routing(p, sr);
  const int slots = ns + sr.n_active;
  const uint32_t total = static_cast<uint32_t>(slots * per_slot);

  if (producer) {
    if (lane == 0) {
      const uint64_t policy = l2_evict_first();
      for (; issued < total; ++issued) issue(issued, policy);
    }
    __syncwarp();
  } else {
    // As in gate_up: every warp walks every unit, rows rotate over the warps.
    for (uint32_t i = 0; i < total; ++i) {
      const int s = static_cast<int>(i / per_slot);
      const int lr0 = static_cast<int>(i % per_slot) * R;  // first row, local to the block
      const int n = min(R, nrows - lr0);
      const int first = (warp - static_cast<int>((i * static_cast<uint32_t>(R)) % kExpertStreamWarps) + kExpertStreamWarps) %
                        kExpertStreamWarps;
      const uint8_t* st = stages + static_cast<int64_t>(ring.stage(i)) * cfg.stage_bytes;
      ring.wait_full(i);
      if (first < n) {  // warp-uniform
        const int e = small_slot_expert(p, sr, s);
        const uint32_t sel = small_slot_tokens(p, sr, s);
        const __nv_bfloat16* hr[MT];
        float wt[MT];
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          hr[t] = (t < p.m && (sel >> t & 1u)) ? p.h + (static_cast<int64_t>(s) * p.m + t) * inter : nullptr;
          wt[t] = s < ns ? 1.f : sr.weight[t][s - ns];
        }
        WeightRow ds{};
        int bc = 1, br = 1;
        int64_t scale_cols = 0;
        if constexpr (kFp8) {
          const rs::cuda::DeviceMatrix d = expert_matrix(p.experts, e, kPartDown);
          ds = weight_row(d, row_b + lr0, true);
          bc = d.block_cols;
          br = d.block_rows;
          scale_cols = (d.cols + bc - 1) / bc;
        }
        for (int r = first; r < n; r += kExpertStreamWarps) {
          const uint4* w = reinterpret_cast<const uint4*>(st + r * row_bytes);
          const int64_t row = row_b + lr0 + r;
          const float* sc = kFp8 ? ds.scale + (row / br - (row_b + lr0) / br) * scale_cols : nullptr;
          float acc[MT];
#pragma unroll
          for (int t = 0; t < MT; ++t) acc[t] = 0.f;
          const int chunks = static_cast<int>(row_bytes / 16);
#pragma unroll 4
          for (int c = lane; c < chunks; c += 32) {
            const uint4 a = w[c];
            const float sa = kFp8 ? __ldg(sc + (c * E) / bc) : 1.f;
#pragma unroll
            for (int t = 0; t < MT; ++t)
              if (hr[t]) acc[t] = expert_stream_dot<kFp8>(a, hr[t], c, sa, acc[t]);
          }
#pragma unroll
          for (int t = 0; t < MT; ++t) {
            const float v = warp_sum(acc[t]);
            if (lane == 0) part[(static_cast<int64_t>(s) * cfg.rows_cap + lr0 + r) * MT + t] = hr[t] ? wt[t] * v : 0.f;
          }
        }
      }
      __syncwarp();
      if (lane == 0) ring.release(i);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nrows * MT; idx += blockDim.x) {
    const int r = idx / MT, t = idx % MT;
    if (t >= p.m) continue;
    float v = 0.f;
    for (int s = 0; s < slots; ++s) v += part[(static_cast<int64_t>(s) * cfg.rows_cap + r) * MT + t];  // slot order
    p.out[static_cast<int64_t>(t) * hidden + row_b + r] = __float2bfloat16_rn(v);
  }
}

}  // namespace rs::kern
