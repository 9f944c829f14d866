#pragma once
// One token's whole expert FFN in one launch: the streamed gate_up of expert_stream.cuh, then the
// down projection through the same ring, with one grid-wide wait between them (expert_stream_op
// with kDown; without it the op is the gate_up alone).
//
// Why: as two kernels the down launch started late behind the streamed gate_up. Its blocks cannot
// share an SM with a 216 KB gate_up block, so its weights began to move only as gate_up's blocks
// ended, and it paid its own ramp after gate_up's tail (H200, V2-Lite bf16, 2026-11-30: the down
// kernel ended 20.0 us after gate_up for 46 MB of weights, 54% of the bandwidth). Here the
// producer lane never stops: down's rows need no h, so they fill the ring while the consumers
// finish gate_up and wait for the other blocks' h.
//
// The next layer's input norm and q/kv GEMV carried on in the same launch behind the down rows
// (commit 03e02dd) measured level on the H200 and is not kept: the absorb kernel after it then could
// not start beside it either, and a second grid-wide wait costs more than a PDL boundary (H200:
// 1.02-1.32 against 0.67-0.71 us, `rackserve bench boundary`).
//
// The grid-wide wait needs every block resident at once: one block an SM (the ring leaves no room
// for a second) and no more blocks than SMs, checked on the host with the occupancy API. PDL
// cannot break this: the next kernel launches only once every block of this grid has run
// griddepcontrol.launch_dependents, i.e. is resident. The count and its memory ordering are
// kernels/common/grid_count.cuh's, the CTA barriers being the consumer warps' named barrier; h is
// then read with loads that bypass L1.
// The two counters (arrivals, departures) are a device global: launches on one device must not
// overlap (the step's chain runs them in order; a second stream running this kernel at the same
// time would share them). The last block to pass the wait zeroes both for the next launch.
//
// Down: block b owns hidden rows [b*H/G, (b+1)*H/G); a stage is up to down_rows_per_stage of them
// of one slot, slot-major, so each row meets the slots in order; the block's local row k belongs
// to consumer warp k % 16. The arithmetic is the register down kernel's (fused_down_op in
// expert_decode.cuh, 8 warps, one token): slot s's lane partials, times its routing weight (and
// for FP8 its h's power-of-two scale), extend the per-lane fma chain s % 8, and the row is the sum
// over k = 0..7 of warp_sum(chain k) in that order. Both give the same bits.
#include "kernels/common/grid_count.cuh"
#include "kernels/common/l2_sides.h"
#include "kernels/ops/expert_stream.cuh"
#include "kernels/ops/expert_stream_route.cuh"

namespace rs::kern {

constexpr int kXsDownChains = kGemvWarps;  // the register down kernel's warps: slot s -> warp s % 8
constexpr int kXsDownRowsPerWarp = 4;      // at most 64 hidden rows a block
constexpr int kXsSyncWords = 4;            // arrivals, departures: h's wait, then the router's

// Every slot's h into shared memory at act after the grid-wide wait (consumer threads): bf16 as
// is; FP8 as f16 scaled by the slot's own 2^-e, h_scale[s] = 2^e (stage_f16 of the register
// kernel: the same exponent, the same conversions). Loads bypass L1: h was written by other
// blocks during this launch.
template <bool kFp8>
__device__ __forceinline__ void xs_stage_h(const ExpertGemvParams& p, int slots, uint8_t* act, float* h_scale) {
  const int inter = p.experts.inter;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
  if constexpr (kFp8) {
    for (int s = warp; s < slots; s += kXsConsumerWarps) {
      const __nv_bfloat16* h = p.h + static_cast<int64_t>(s) * inter;
      const int e = f16_stage_exponent(rs::cuda::warp_max(amax_bf16<true>(h, inter, lane, 32)));
      stage_f16<true>(h, inter, e, reinterpret_cast<__half*>(act) + static_cast<int64_t>(s) * inter, lane, 32);
      if (lane == 0) h_scale[s] = ldexpf(1.f, e);
    }
  } else {
    const int64_t n = static_cast<int64_t>(slots) * inter / 8;
    for (int64_t v = tid; v < n; v += kXsConsumerWarps * 32)
      reinterpret_cast<uint4*>(act)[v] = __ldcg(reinterpret_cast<const uint4*>(p.h) + v);
  }
}

// A consumer warp's rows of one landed down stage: chain slot % 8 of each of its rows gains
// weight * (row . h[slot]).
template <bool kFp8>
__device__ __forceinline__ void xs_down_rows(const ExpertGemvParams& p, const uint8_t* stage, const XsStage& st,
                                             int d_lo, const rs::cuda::DeviceMatrix& m, const uint8_t* act,
                                             float wt, uint32_t row_bytes, float (&acc)[kXsDownRowsPerWarp][kXsDownChains]) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
  const int inter = p.experts.inter;
  const int64_t nch = inter / E;
  const int k0 = st.r0 - d_lo;  // the stage's first row, local to the block
  const int chain = st.slot % kXsDownChains;
  const uint8_t* hs = act + static_cast<size_t>(st.slot) * inter * 2;  // bf16, or f16 for FP8
  for (int q = xs_first_row(k0); q < st.cnt; q += kXsConsumerWarps) {
    const uint4* w = reinterpret_cast<const uint4*>(stage + static_cast<size_t>(q) * row_bytes);
    float part = 0.f;
    // Neither chunk loop is unrolled: a row is 3-6 chunks a lane at V2-Lite's shapes, the loop
    // runs once a layer, and its code is fetched anew each layer, so compact code beats unrolled
    // code here (H200, bf16 b1: 1.994-2.018 against 2.014-2.044 ms a step; ncu on an FP8 variant
    // whose slot loop was unrolled too: instruction fetch, stall_no_inst, was the largest stall
    // after the grid-wide wait, 39% of the samples, 2026-11-30).
    if constexpr (kFp8) {
      const WeightRow r = weight_row(m, st.r0 + q, true);
      const int bc = m.block_cols;
      const __half* hh = reinterpret_cast<const __half*>(hs);
#pragma unroll 1
      for (int c = lane; c < nch; c += 32) {
        const uint4 x0 = *reinterpret_cast<const uint4*>(hh + c * 16);
        const uint4 x1 = *reinterpret_cast<const uint4*>(hh + c * 16 + 8);
        part = fmaf(__ldg(r.scale + fp8_scale_col(c, bc)), dot16_e4m3_f16(w[c], x0, x1), part);
      }
    } else {
#pragma unroll 1
      for (int c = lane; c < nch; c += 32) part = dot8_bf16(w[c], reinterpret_cast<const uint4*>(hs)[c], part);
    }
    const int j = (k0 + q) / kXsConsumerWarps;
    // Constant indices keep acc in registers.
#pragma unroll
    for (int jj = 0; jj < kXsDownRowsPerWarp; ++jj)
#pragma unroll
      for (int k = 0; k < kXsDownChains; ++k)
        if (jj == j && k == chain) acc[jj][k] = fmaf(wt, part, acc[jj][k]);
  }
}

// One token. kDown: out = sum over slots of weight * down_slot(h_slot); otherwise only
// h[slot] = silu(gate_slot . x) * (up_slot . x), for the register down kernel. kRoute: the router
// runs inside the launch (expert_stream_route.cuh) from rt, x being its norm's output; otherwise
// p.x and the routing are the previous kernels'. sync: kXsSyncWords zeroed counters (see the top
// of the file), words 2-3 the router's.
template <bool kFp8, int S, bool kDown, bool kRoute>
__device__ __forceinline__ void expert_stream_op(const ExpertGemvParams& p, const ExpertStreamGeom& g, uint8_t* smem,
                                                 unsigned* sync, const ExpertRouteParams& rt) {
  __shared__ BulkRing<S> ring;
  __shared__ SmallRouting sr;
  __shared__ XsSlotMatrices mats_smem;
  __shared__ float amax_scratch[32];
  __shared__ float h_scale[kXsMaxSlots];
  XsRouteSmem* route = nullptr;
  rs::cuda::DeviceMatrix (*mats)[3] = mats_smem.get();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const bool producer = warp == kXsConsumerWarps;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const uint32_t gu_row_bytes = static_cast<uint32_t>(hidden) * (kFp8 ? 1u : 2u);
  const uint32_t d_row_bytes = static_cast<uint32_t>(inter) * (kFp8 ? 1u : 2u);
  const XsRows gu = xs_rows(inter, g.rows_per_stage, g.slots, g.late_blocks, g.late_quarters);
  const XsRows dn = kDown ? xs_rows(hidden, g.down_rows_per_stage, g.slots) : XsRows{};
  const uint32_t n_stages = gu.stages + dn.stages;

  if (threadIdx.x == 0) ring.init(kXsConsumerWarps);
  int l2_side = 0;  // this SM's, read before the wait (off the step's path)
  if (g.sm_side) {
    unsigned smid;
    asm("mov.u32 %0, %%smid;" : "=r"(smid));
    l2_side = g.sm_side[smid < kL2SideMaxSms ? smid : 0];
  }
  if constexpr (kRoute) {
    __shared__ XsRouteSmem route_smem;
    if (threadIdx.x == 0) sr.n_active = 0;  // shared slots are active before the routing is known
    xs_route_prewait(rt, smem + g.act_offset);
    route = &route_smem;
  }
  constexpr int kParts = kDown ? 3 : 2;
  xs_slot_matrices(p, sr, 0, ns, kParts, mats);  // __syncthreads: the ring's init is visible too
  pdl_launch_dependents();
  const uint64_t policy = l2_evict_first();
  // Ring use i: gate_up stage i, then down stage i - gu.stages.
  auto issue = [&](uint32_t i, bool routed) {
    if (i < gu.stages) {
      const XsStage st = xs_stage(i, gu);
      xs_issue_rows<kFp8, S>(smem, g, ring, i, st, !routed || xs_slot_active(p, sr, st.slot), &mats[st.slot][kPartGate],
                             2, gu_row_bytes, policy);
    } else {
      const XsStage st = xs_stage(i - gu.stages, dn);
      xs_issue_rows<kFp8, S>(smem, g, ring, i, st, xs_slot_active(p, sr, st.slot), &mats[st.slot][kPartDown], 1,
                             d_row_bytes, policy);
    }
  };
  uint32_t issued = 0;
  const uint32_t first = min(n_stages, static_cast<uint32_t>(S));
  // The shared experts' gate_up stages need no routing (producer lane): up to `limit` of the ring.
  auto issue_shared = [&](uint32_t limit) {
    for (; issued < min(limit, gu.stages) && xs_stage(issued, gu).slot < ns; ++issued) issue(issued, false);
  };
  if (producer && lane == 0) issue_shared(min(first, static_cast<uint32_t>(g.prewait_stages)));  // before the wait
  pdl_wait();  // routing from the router, x from the norm
  // The rest of the ring's shared stages before the routing's loads (H200, V2-Lite bf16,
  // 2026-11-30: 2.057-2.078 against 2.072-2.094 ms a step, measured while the since-removed q/kv
  // tail was on).
  if (producer && lane == 0) issue_shared(first);
  float x_scale = 1.f;
  if constexpr (kRoute) {
    // The consumers norm x and start on the shared stages; warp 0 finds the routing first and
    // hands it to the producer, which until then has only the shared stages to issue.
    if (!producer) x_scale = xs_route_norm<kFp8>(rt, smem + g.act_offset, *route);
    if (warp == 0) xs_route_select(p, rt, smem + g.act_offset, *route, sr, kParts, mats, sync + 2);
    // The other consumer warps start on the shared stages meanwhile (route_overlap, the default:
    // H200 FP8 1.857-1.882 ms a step against 1.903-1.906 with them waiting for the routing).
    if (!g.route_overlap) __syncthreads();
    else if (warp == 0 || producer) xs_route_handoff();
    if (warp == 0) xs_route_depart(sync + 2);
    if (producer && lane == 0)
      for (; issued < first; ++issued) issue(issued, true);
  } else {
    // x's loads in flight with the routing's (H200 bf16: level, 2.047-2.072 against 2.050-2.054 ms
    // with them after the routing).
    const bool sided = g.x_side[0] != nullptr;  // x and the routing from this side's copies
    const XsX x = xs_load_x(p, sided ? static_cast<const __nv_bfloat16*>(g.x_side[l2_side]) : p.x);
    if (sided) small_routing(p, sr, g.ids_side[l2_side], g.weights_side[l2_side]);
    else small_routing(p, sr);
    xs_slot_matrices(p, sr, ns, ns + sr.n_active, kParts, mats);
    if (producer && lane == 0)
      for (; issued < first; ++issued) issue(issued, true);
    x_scale = xs_stage_x<kFp8>(p, x, smem + g.act_offset, amax_scratch);
    __syncthreads();
  }
  issued = first;  // every lane of the producer warp, which waits on the ring as one below
  pdl_probe_mark(kProbeInputReady);

  if (producer) {
    for (uint32_t i = issued; i < n_stages; ++i) {
      ring.acquire(i, g.inflight_stages);  // expert_stream_geom.h says why the FFN bounds it
      if (lane == 0) issue(i, true);
      __syncwarp();
    }
    return;
  }
  int k0 = 0;  // rows of the earlier stages: row q of this stage is the block's row k0 + q
  for (uint32_t i = 0; i < gu.stages; ++i) {
    const XsStage st = xs_stage(i, gu);
    ring.wait_full(i);
    if (xs_slot_active(p, sr, st.slot))
      xs_gate_up_rows<kFp8>(p, smem + static_cast<size_t>(ring.stage(i)) * g.stage_bytes, st, k0, mats[st.slot],
                            smem + g.act_offset, x_scale, gu_row_bytes);
    k0 += st.cnt;
    __syncwarp();
    if (lane == 0) ring.release(i);
  }

  pdl_probe_mark(kProbeMainDone);
  if constexpr (!kDown) {
    pdl_probe_mark(kProbeEnd);
    return;
  }
  // Every block's h, then this block's down rows.
  xs_consumer_sync();
  if (threadIdx.x == 0) {
    if (g.sided_sync[0]) {  // one counter homed on each L2 side, each block polling its own
      grid_count_arrive2(g.sided_sync[0], g.sided_sync[1]);
      grid_count_wait(g.sided_sync[l2_side], gridDim.x, "expert FFN, every block's h", -1);
      if (grid_count_depart(g.sided_sync[0])) g.sided_sync[1][0] = 0u;  // departures on side 0's words
    } else {
      grid_count_arrive(sync);
      grid_count_wait(sync, gridDim.x, "expert FFN, every block's h", -1);
      grid_count_depart(sync);  // the last block past the wait resets both words for the next launch
    }
    pdl_probe_mark(kProbeGridWait);
  }
  xs_consumer_sync();
  const int slots = ns + sr.n_active;
  xs_stage_h<kFp8>(p, slots, smem + g.act_offset, h_scale);  // x is dead: h takes its place
  xs_consumer_sync();

  float acc[kXsDownRowsPerWarp][kXsDownChains];
#pragma unroll
  for (int j = 0; j < kXsDownRowsPerWarp; ++j)
#pragma unroll
    for (int k = 0; k < kXsDownChains; ++k) acc[j][k] = 0.f;
  for (uint32_t i = gu.stages; i < n_stages; ++i) {
    const XsStage st = xs_stage(i - gu.stages, dn);
    ring.wait_full(i);
    if constexpr (!kRoute) {  // (with the router in the launch the step marks are its own)
      // The down phase in the wait probe: the first down stage landed, the first one issued after
      // the grid-wide wait landed, the last one landed. (They showed FP8's down phase, 15.9 us
      // against bf16's 9.7 for twice the bytes, to be its consumers' own compute, not its bytes:
      // docs/perf/cuda.md, thirteenth session.)
      if (i == gu.stages) pdl_probe_mark(kProbeStep1);
      else if (i == gu.stages + S) pdl_probe_mark(kProbeStep2);
      if (i + 1 == n_stages) pdl_probe_mark(kProbeStep3);
    }
    if (xs_slot_active(p, sr, st.slot)) {
      const float wt = (kFp8 ? h_scale[st.slot] : 1.f) * (st.slot < ns ? 1.f : sr.weight[0][st.slot - ns]);
      xs_down_rows<kFp8>(p, smem + static_cast<size_t>(ring.stage(i)) * g.stage_bytes, st, dn.lo,
                         mats[st.slot][kPartDown], smem + g.act_offset, wt, d_row_bytes, acc);
    }
    __syncwarp();
    if (lane == 0) ring.release(i);
  }
#pragma unroll
  for (int j = 0; j < kXsDownRowsPerWarp; ++j) {
    const int k = warp + j * kXsConsumerWarps;
    if (k >= dn.n) break;  // warp-uniform
    float v = 0.f;
#pragma unroll
    for (int c = 0; c < kXsDownChains; ++c) v += warp_sum(acc[j][c]);  // fixed order
    if (lane == 0) p.out[dn.lo + k] = __float2bfloat16_rn(v);
  }
  pdl_probe_mark(kProbeEnd);
}

}  // namespace rs::kern
