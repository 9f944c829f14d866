#pragma once
// One token's expert gate_up (+ SwiGLU), the shared experts folded in as slots as in
// expert_decode.cuh, with the weights streamed through a shared-memory ring of bulk copies
// (kernels/common/bulk_copy.cuh): one producer lane issues the copies, sixteen consumer warps do
// the dot products. The down projection stays on the register kernel (expert_decode.cuh).
//
// Why: the register kernel keeps at most one item's weights in flight per warp, and a warp waits
// out the whole memory latency before computing that item and loading the next. Here the copies
// stay in flight while the consumers compute (a ring of ~200 KB an SM), and the copies of the
// shared experts' rows, known before the routing, start before griddepcontrol.wait.
// On the H200 (V2-Lite, batch 1, 2026-11-30) the bf16 gate_up ended 22.7 us after the router
// against 26.6; the step gained once the router before it is the 8-block cluster one (its
// 216 KB blocks cannot share an SM with a 64-block router's blocks) and at most ~96 KB an SM is
// copied before the wait (more slowed the router down): bf16 2.160 against 2.22 ms, FP8 1.973
// against 1.995. A streamed down (one hidden row of every slot a stage: eight 2.8 KB copies) was
// slower than the register kernel (2.49 ms a step) and was dropped (commit 6e37fee has it).
//
// The arithmetic is the register kernel's in the same order (each lane's chunks lane, lane + 32,
// ..., warp sums), so both give the same bits. Block b owns intermediate rows
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
  alignas(16) unsigned char raw[sizeof(rs::cuda::DeviceMatrix) * kXsMaxSlots * 2];
  __device__ rs::cuda::DeviceMatrix (*get())[2] { return reinterpret_cast<rs::cuda::DeviceMatrix (*)[2]>(raw); }
};

// The gate and up matrices of slots [first, last) into shared memory: shared experts' views come
// from the parameters (known before the wait), routed experts' from the device arrays (after
// the routing). Ends with __syncthreads.
__device__ __forceinline__ void xs_slot_matrices(const ExpertGemvParams& p, const SmallRouting& sr, int first,
                                                 int last, rs::cuda::DeviceMatrix (*mats)[2]) {
  const int ns = p.experts.n_shared;
  for (int i = threadIdx.x; i < (last - first) * 2; i += blockDim.x) {
    const int s = first + i / 2, part = i % 2;
    const int e = s < ns ? p.experts.num_experts + s : sr.expert[s - ns];
    mats[s][part] = expert_matrix(p.experts, e, part == 0 ? kPartGate : kPartUp);
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
  xs_slot_matrices(p, sr, 0, ns, mats);  // __syncthreads: the ring's init is visible too
  pdl_launch_dependents();
  const uint64_t policy = l2_evict_first();
  uint32_t issued = 0;
  // The shared experts' stages come first and need no routing: before the wait.
  const uint32_t first = min(n_stages, static_cast<uint32_t>(S));
  if (producer && lane == 0)
    for (; issued < min(first, static_cast<uint32_t>(g.prewait_stages)); ++issued) {
      const XsGateUpStage st = xs_gate_up_stage(issued, r_lo, nrows, sps, P);
      if (st.slot >= ns) break;
      xs_issue_gate_up<kFp8, S>(smem, g, ring, issued, st, true, mats[st.slot], row_bytes, policy);
    }
  pdl_wait();  // routing from the router, x from the norm
  small_routing(p, sr);
  xs_slot_matrices(p, sr, ns, ns + sr.n_active, mats);
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

}  // namespace rs::kern
