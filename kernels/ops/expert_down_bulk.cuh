#pragma once
// One token's expert down projection with all of a block's weight bytes in flight at once: block
// b owns hidden rows [b*H/G, (b+1)*H/G) of every slot (one block an SM), and one bulk copy a slot
// (a row at a time for a shared expert's strided view) puts them in shared memory, the shared
// experts' before griddepcontrol.wait, the routed experts' right after the routing; the h is
// staged while they land.
//
// Why: the register down kernel (fused_down_op, 2 blocks of 8 warps an SM) moves its weights in
// two bursts of one row group each, the second issued only after the first is summed, and starts
// the first only after the routing and the h staging (H200, V2-Lite FP8, wait probe 2026-11-30:
// routing 2.3 us after the release, h staged 4.6, first row group summed 10.2, end 15.1 us, for 23
// MB that take ~5.5 us at the copy bandwidth). Holding a whole row group of every slot in
// registers is what limits it to two bursts; shared memory holds a block's whole share (FP8
// V2-Lite: 16 rows x 8 slots x 1408 bytes = 176 KB) and needs no registers while it lands.
//
// The arithmetic is the one-launch FFN's down (xs_down_rows, expert_stream_ffn.cuh), which gives
// the register down kernel's bits: per row, slot s's lane partials times its routing weight (and
// its h's power-of-two scale for FP8) extend the lane's fma chain s % 8, and the row is the sum of
// warp_sum(chain k) over k = 0..7 in order.
#include "kernels/ops/expert_stream_ffn.cuh"

namespace rs::kern {

constexpr int kDownBulkWarps = kXsConsumerWarps;  // xs_down_rows deals a block's row k to warp k % 16
constexpr int kDownBulkThreads = kDownBulkWarps * 32;

// Host-computed layout of the dynamic shared memory: slot s's rows at s * slot_bytes, every
// slot's staged h at h_offset.
struct ExpertDownBulkGeom {
  int rows = 0;              // hidden rows a block owns, at most
  uint32_t slot_bytes = 0;   // rows x a row's bytes, 128-aligned
  uint32_t h_offset = 0;     // slots x slot_bytes
  uint32_t smem_bytes = 0;   // h_offset + slots x inter x 2
};

template <bool kFp8>
__device__ __forceinline__ void expert_down_bulk_op(const ExpertGemvParams& p, const ExpertDownBulkGeom& g,
                                                    uint8_t* smem) {
  __shared__ uint64_t full[kXsMaxSlots];
  __shared__ SmallRouting sr;
  __shared__ XsSlotMatrices mats_smem;
  __shared__ float h_scale[kXsMaxSlots];
  rs::cuda::DeviceMatrix (*mats)[3] = mats_smem.get();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int inter = p.experts.inter, hidden = p.experts.hidden, ns = p.experts.n_shared;
  const uint32_t row_bytes = static_cast<uint32_t>(inter) * (kFp8 ? 1u : 2u);
  const XsRows dn = xs_rows(hidden, g.rows, 1);  // this block's rows: dn.lo, dn.n
  if (threadIdx.x == 0) {
    for (int s = 0; s < kXsMaxSlots; ++s) mbar_init(&full[s], 1u);
    mbar_fence_init();
  }
  xs_slot_matrices(p, sr, 0, ns, 3, mats);  // __syncthreads: the barriers' init is visible too
  const uint64_t policy = l2_evict_first();
  // Thread 0: slot s's rows, one copy where they are contiguous (a routed expert), else a row each.
  auto issue = [&](int s) {
    const rs::cuda::DeviceMatrix& m = mats[s][kPartDown];
    uint8_t* dst = smem + static_cast<size_t>(s) * g.slot_bytes;
    const uint32_t bytes = static_cast<uint32_t>(dn.n) * row_bytes;
    mbar_arrive_expect_tx(&full[s], bytes);
    if (bytes == 0) return;
    if (m.cols * (kFp8 ? 1 : 2) == static_cast<int64_t>(row_bytes)) {
      bulk_copy_g2s(dst, weight_row(m, dn.lo, kFp8).data, bytes, &full[s], policy);
    } else {
      for (int q = 0; q < dn.n; ++q)
        bulk_copy_g2s(dst + static_cast<size_t>(q) * row_bytes, weight_row(m, dn.lo + q, kFp8).data, row_bytes,
                      &full[s], policy);
    }
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < ns; ++s) issue(s);  // constant weights: before the wait
  pdl_launch_dependents();
  pdl_wait();  // routing from the router, h from the gate_up kernel
  small_routing(p, sr);
  xs_slot_matrices(p, sr, ns, ns + sr.n_active, 3, mats);
  const int slots = ns + sr.n_active;
  if (threadIdx.x == 0)
    for (int s = ns; s < slots; ++s) issue(s);
  rs::pdl::probe_mark(kProbeStep1);
  xs_stage_h<kFp8>(p, slots, smem + g.h_offset, h_scale);  // while the weights land
  __syncthreads();
  rs::pdl::probe_mark(kProbeInputReady);

  float acc[kXsDownRowsPerWarp][kXsDownChains];
#pragma unroll
  for (int j = 0; j < kXsDownRowsPerWarp; ++j)
#pragma unroll
    for (int k = 0; k < kXsDownChains; ++k) acc[j][k] = 0.f;
  for (int s = 0; s < slots; ++s) {
    mbar_wait(&full[s], 0u, "down bulk: a slot's rows");
    const float wt = (kFp8 ? h_scale[s] : 1.f) * (s < ns ? 1.f : sr.weight[0][s - ns]);
    const XsStage st{s, dn.lo, dn.n};
    xs_down_rows<kFp8>(p, smem + static_cast<size_t>(s) * g.slot_bytes, st, dn.lo, mats[s][kPartDown],
                       smem + g.h_offset, wt, row_bytes, acc);
  }
  rs::pdl::probe_mark(kProbeMainDone);
#pragma unroll
  for (int j = 0; j < kXsDownRowsPerWarp; ++j) {
    const int k = warp + j * kDownBulkWarps;
    if (k >= dn.n) break;  // warp-uniform
    float v = 0.f;
#pragma unroll
    for (int c = 0; c < kXsDownChains; ++c) v += warp_sum(acc[j][c]);  // fixed order
    if (lane == 0) p.out[dn.lo + k] = __float2bfloat16_rn(v);
  }
}

}  // namespace rs::kern
