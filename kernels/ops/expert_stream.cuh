#pragma once
// One token's expert gate_up (+ SwiGLU), the shared experts folded in as slots as in
// expert_decode.cuh, with the weights streamed through a shared-memory ring of bulk copies
// (kernels/common/bulk_copy.cuh): one producer lane issues the copies, sixteen consumer warps do
// the dot products. This file holds the gate_up pieces; the op (expert_stream_ffn.cuh) runs them
// alone (then the register down kernel of expert_decode.cuh) or goes on to the down projection in
// the same launch (bf16 by default).
//
// Why: the register kernel keeps at most one item's weights in flight per warp, and a warp waits
// out the whole memory latency before computing that item and loading the next. Here the copies
// stay in flight while the consumers compute (a ring of ~200 KB an SM), and the copies of the
// shared experts' rows, known before the routing, start before griddepcontrol.wait.
// On the H200 (V2-Lite, batch 1, 2026-11-30) the bf16 gate_up ended 22.7 us after the router
// against 26.6; the step gained once the router before it is the 8-block cluster one (its
// 216 KB blocks cannot share an SM with a 64-block router's blocks) and at most ~96 KB an SM is
// copied before the wait (more slowed the router down): bf16 2.160 against 2.22 ms, FP8 1.973
// against 1.995. A streamed down as its own kernel (one hidden row of every slot a stage: eight
// 2.8 KB copies) was slower than the register kernel (2.49 ms a step; commit 6e37fee has it);
// the down inside the same launch is what gained (expert_stream_ffn.cuh).
//
// The arithmetic is the register kernel's in the same order (each lane's chunks lane, lane + 32,
// ..., warp sums), so both give the same bits, except FP8 rows of whole 64-column groups
// (xs_gate_up_rows says why they differ). Block b owns intermediate rows
// [b*inter/G, (b+1)*inter/G) of every slot; a stage is up to rows_per_stage of them from one
// slot, its gate rows then its up rows; the k-th row of the block's stages goes to warp k % 16
// and writes h[slot][row] = silu(g) * u. Slots past n_shared + n_active (an invalid or repeated
// expert id) get stages with no bytes, which the consumers skip.
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
  alignas(16) unsigned char raw[sizeof(rs::cuda::DeviceMatrix) * kXsMaxSlots * 3];
  __device__ rs::cuda::DeviceMatrix (*get())[3] { return reinterpret_cast<rs::cuda::DeviceMatrix (*)[3]>(raw); }
};

// The first `parts` matrices (gate, up[, down]) of slots [first, last) into shared memory: shared
// experts' views come from the parameters (known before the wait), routed experts' from the
// device arrays (after the routing). Ends with __syncthreads, or with kWarp (one warp loads them,
// the in-launch router's warp 0) __syncwarp.
// (Every routed expert's pointers loaded into shared memory before the wait, to save this load's
// round trip after the routing, made the step slower: H200, V2-Lite bf16, 2.08-2.12 against
// 2.06-2.08 ms, 2026-11-30.)
template <bool kWarp = false>
__device__ __forceinline__ void xs_slot_matrices(const ExpertGemvParams& p, const SmallRouting& sr, int first,
                                                 int last, int parts, rs::cuda::DeviceMatrix (*mats)[3]) {
  const int ns = p.experts.n_shared;
  const int tid = kWarp ? threadIdx.x & 31 : threadIdx.x, threads = kWarp ? 32 : blockDim.x;
  for (int i = tid; i < (last - first) * parts; i += threads) {
    const int s = first + i / parts, part = i % parts;  // kPartGate, kPartUp, kPartDown
    const int e = s < ns ? p.experts.num_experts + s : sr.expert[s - ns];
    mats[s][part] = expert_matrix(p.experts, e, part);
  }
  if constexpr (kWarp) __syncwarp();
  else __syncthreads();
}

__device__ __forceinline__ bool xs_slot_active(const ExpertGemvParams& p, const SmallRouting& sr, int s) {
  return s < p.experts.n_shared + sr.n_active;
}

// The consumer warps only (the producer may be blocked on the ring): named barrier 1.
__device__ __forceinline__ void xs_consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kXsConsumerWarps * 32) : "memory");
}

// ---- gate_up --------------------------------------------------------------------------------

// A block's rows of a matrix of `total` rows split over the grid, in stages of at most `per_stage`
// rows of one slot.
struct XsRows {
  int lo = 0, n = 0, sps = 0, P = 0;  // first row, rows, stages a slot, rows a stage
  uint32_t stages = 0;                // of all slots
};
__device__ __forceinline__ XsRows xs_rows(int total, int per_stage, int slots, int late = 0, int late_q = 4) {
  XsRows r;
  // The last `late` blocks weigh late_q quarters of a block (ExpertStreamGeom::late_blocks); the
  // shares still cover [0, total) exactly, in block order.
  auto cum = [&](int64_t b) {
    const int64_t e = static_cast<int64_t>(gridDim.x) - late;
    return 4 * (b < e ? b : e) + late_q * (b > e ? b - e : 0);
  };
  const int64_t T = cum(gridDim.x);
  r.lo = static_cast<int>(cum(blockIdx.x) * total / T);
  r.n = static_cast<int>(cum(blockIdx.x + 1) * total / T) - r.lo;
  r.sps = r.n > 0 ? (r.n + per_stage - 1) / per_stage : 0;
  r.P = r.sps > 0 ? (r.n + r.sps - 1) / r.sps : 0;
  r.stages = static_cast<uint32_t>(slots * r.sps);
  return r;
}

// Stage i of the block's rows b: slot-major, up to b.P rows of one slot.
struct XsStage {
  int slot, r0, cnt;
};
__device__ __forceinline__ XsStage xs_stage(uint32_t i, const XsRows& b) {
  XsStage st;
  st.slot = static_cast<int>(i) / b.sps;
  st.r0 = b.lo + (static_cast<int>(i) % b.sps) * b.P;
  st.cnt = min(b.P, b.lo + b.n - st.r0);
  return st;
}

// Producer lane: stage i = rows [r0, r0 + cnt) of each of the n matrices m[0..n) (gate_up: gate
// then up; down: down), one after the other. A matrix whose rows are contiguous (a routed expert;
// a shared expert's gate/up view) is one copy; a shared expert's down view keeps its parent's
// wider row stride (a copy a row). No bytes for an inactive slot.
template <bool kFp8, int S>
__device__ __forceinline__ void xs_issue_rows(uint8_t* smem, const ExpertStreamGeom& g, BulkRing<S>& ring, uint32_t i,
                                              const XsStage& st, bool active, const rs::cuda::DeviceMatrix* m, int n,
                                              uint32_t row_bytes, uint64_t policy) {
  const int s = ring.stage(i);
  if (!active) {
    mbar_arrive(&ring.full[s]);
    return;
  }
  uint8_t* dst = smem + static_cast<size_t>(s) * g.stage_bytes;
  const uint32_t bytes = static_cast<uint32_t>(st.cnt) * row_bytes;
  mbar_arrive_expect_tx(&ring.full[s], n * bytes);
  for (int k = 0; k < n; ++k, dst += bytes) {
    if (m[k].cols * (kFp8 ? 1 : 2) == static_cast<int64_t>(row_bytes)) {
      bulk_copy_g2s(dst, weight_row(m[k], st.r0, kFp8).data, bytes, &ring.full[s], policy);
    } else {
      for (int q = 0; q < st.cnt; ++q)
        bulk_copy_g2s(dst + static_cast<size_t>(q) * row_bytes, weight_row(m[k], st.r0 + q, kFp8).data, row_bytes,
                      &ring.full[s], policy);
    }
  }
}

// This consumer warp's first row of a stage whose rows are the block's rows k0, k0 + 1, ...: the
// block's row k belongs to warp k % 16.
__device__ __forceinline__ int xs_first_row(int k0) {
  const int warp = threadIdx.x / 32;
  return (warp - k0 % kXsConsumerWarps + kXsConsumerWarps) % kXsConsumerWarps;
}

// x into shared memory at act in two halves, so that x's loads share their round trip with the
// routing's (the first half before small_routing, the second after it): xs_load_x puts up to
// kXsXVecs 16-byte vectors a thread in registers, xs_stage_x stores them, bf16 as is, FP8 as f16
// scaled by 2^-e (expert_decode.cuh's staging: the same exponent, the same conversions), and
// returns 2^e (1 for bf16). Every thread of the block calls both; the caller syncs after.
// Hidden sizes past kXsXVecs vectors a thread load the rest in xs_stage_x.
constexpr int kXsXVecs = 2;
struct XsX {
  uint4 v[kXsXVecs];
};
// xp: p.x, or its copy on the block's L2 side (ExpertStreamGeom::x_side), the same bits.
__device__ __forceinline__ XsX xs_load_x(const ExpertGemvParams& p, const __nv_bfloat16* xp) {
  XsX x;
  const int vecs = p.experts.hidden / 8;
#pragma unroll
  for (int k = 0; k < kXsXVecs; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    x.v[k] = v < vecs ? ld_cached16(xp + static_cast<int64_t>(v) * 8) : make_uint4(0, 0, 0, 0);
  }
  return x;
}
template <bool kFp8>
__device__ __forceinline__ float xs_stage_x(const ExpertGemvParams& p, const XsX& x, uint8_t* act,
                                            float* amax_scratch) {
  const int vecs = p.experts.hidden / 8;
  const int tail = threadIdx.x + kXsXVecs * blockDim.x;  // vectors past the registers' (wide hidden sizes)
  int e = 0;
  if constexpr (kFp8) {
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < kXsXVecs; ++k) m = bf16x8_amax(x.v[k], m);  // zero vectors past the end
    for (int v = tail; v < vecs; v += blockDim.x) m = bf16x8_amax(ld_cached16(p.x + static_cast<int64_t>(v) * 8), m);
    e = f16_stage_exponent(rs::cuda::block_max(m, amax_scratch));
  }
  auto put = [&](int v, const uint4& b) { reinterpret_cast<uint4*>(act)[v] = kFp8 ? bf16x8_to_f16_scaled(b, e) : b; };
#pragma unroll
  for (int k = 0; k < kXsXVecs; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    if (v < vecs) put(v, x.v[k]);
  }
  for (int v = tail; v < vecs; v += blockDim.x) put(v, ld_cached16(p.x + static_cast<int64_t>(v) * 8));
  return kFp8 ? ldexpf(1.f, e) : 1.f;
}

// A consumer warp's rows of one landed gate_up stage (st of a slot whose matrices are m): row q
// of the stage is the block's row k0 + q and goes to warp (k0 + q) % 16; writes
// h[slot][row] = silu(g) * u. The register kernel's arithmetic in its order: each lane's chunks
// lane, lane + 32, ..., then the warp sums; but FP8 rows of whole 64-column groups (V2-Lite's and
// V3's) take four consecutive chunks a lane, one block scale a group and two f16 partials, which
// cut the FP8 step 1.5% (H200, V2-Lite b1, 1.496-1.498 against 1.520 ms; gate_up advance 16.38
// against 16.90 us): the FP8 consumers are bound by issued instructions (docs/perf/cuda.md,
// thirty-first and thirty-second sessions).
template <bool kFp8>
__device__ __forceinline__ void xs_gate_up_rows(const ExpertGemvParams& p, const uint8_t* stage, const XsStage& st,
                                                int k0, const rs::cuda::DeviceMatrix (&m)[3], const uint8_t* act,
                                                float x_scale, uint32_t row_bytes) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
  const int64_t nch = p.experts.hidden / E;
  for (int q = xs_first_row(k0); q < st.cnt; q += kXsConsumerWarps) {
    const int row = st.r0 + q;
    const uint8_t* wg = stage + static_cast<size_t>(q) * row_bytes;
    const uint8_t* wu = stage + static_cast<size_t>(st.cnt + q) * row_bytes;
    float pg = 0.f, pu = 0.f;
    if constexpr (kFp8) {
      const WeightRow rg = weight_row(m[0], row, true), ru = weight_row(m[1], row, true);
      const __half* xh = reinterpret_cast<const __half*>(act);
      const int bc = m[0].block_cols, bu = m[1].block_cols;
      if (nch % 4 == 0 && bc % 64 == 0 && bu % 64 == 0) {
        // Four consecutive chunks a lane (64 columns, inside one scale block): one block scale a
        // row and group instead of one a chunk, and two f16 partials (two chunks each) converted
        // and scaled instead of four. The lane's chunks in a rotated order, (v + lane / 2) % 4,
        // so a quarter-warp's eight 16-byte weight loads land in eight different bank groups.
        const int rot = lane >> 1;
        for (int64_t q4 = lane; q4 < nch / 4; q4 += 32) {
          const float sg = __ldg(rg.scale + fp8_scale_col(q4 * 4, bc));
          const float su = __ldg(ru.scale + fp8_scale_col(q4 * 4, bu));
          __half2 g0 = __float2half2_rn(0.f), g1 = g0, u0 = g0, u1 = g0;
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const int64_t c = q4 * 4 + ((v + rot) & 3);
            const uint4 x0 = *reinterpret_cast<const uint4*>(xh + c * 16);
            const uint4 x1 = *reinterpret_cast<const uint4*>(xh + c * 16 + 8);
            const uint4 wgc = reinterpret_cast<const uint4*>(wg)[c], wuc = reinterpret_cast<const uint4*>(wu)[c];
            if (v < 2) {
              g0 = dot16_e4m3_f16_acc(wgc, x0, x1, g0);
              u0 = dot16_e4m3_f16_acc(wuc, x0, x1, u0);
            } else {
              g1 = dot16_e4m3_f16_acc(wgc, x0, x1, g1);
              u1 = dot16_e4m3_f16_acc(wuc, x0, x1, u1);
            }
          }
          pg = fmaf(sg, half2_sum(g0) + half2_sum(g1), pg);
          pu = fmaf(su, half2_sum(u0) + half2_sum(u1), pu);
        }
      } else {
#pragma unroll 4
        for (int64_t c = lane; c < nch; c += 32) {
          const uint4 x0 = *reinterpret_cast<const uint4*>(xh + c * 16);
          const uint4 x1 = *reinterpret_cast<const uint4*>(xh + c * 16 + 8);
          pg = fmaf(__ldg(rg.scale + fp8_scale_col(c, bc)), dot16_e4m3_f16(reinterpret_cast<const uint4*>(wg)[c], x0, x1), pg);
          pu = fmaf(__ldg(ru.scale + fp8_scale_col(c, bu)), dot16_e4m3_f16(reinterpret_cast<const uint4*>(wu)[c], x0, x1), pu);
        }
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
    if (lane == 0) p.h[static_cast<int64_t>(st.slot) * p.experts.inter + row] = __float2bfloat16_rn(silu(gv) * uv);
  }
}

}  // namespace rs::kern
