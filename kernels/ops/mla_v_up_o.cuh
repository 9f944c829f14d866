#pragma once
// One decode token's attention output: o = W_o . bf16(W_UV_h . merge_s(part_o[h, s])) over heads
// h, in one launch of heads x 8 blocks, a thread-block cluster of 8 a head.
//
// Why this shape: every weight byte of the step (W_UV 2 MB, W_o 8 MB at V2-Lite's size) is
// constant, so each block fetches its share (registers, shared memory) before griddepcontrol.wait, while the
// split attention still runs on a quarter of the SMs; after the wait only ~10 KB a block of
// partials remain to read. Block (h, c):
//  1. merges latent columns [64c, 64c + 64) of head h over the KV splits (the flash-decoding
//     combine, fp32, in a fixed order);
//  2. multiplies them by W_UV's matching 64 columns: a partial of all 128 value rows;
//  3. adds the 8 blocks' partials through distributed shared memory (rank order: every block
//     gets the same bits) and rounds to bf16, as the two-launch path rounds attn_v;
//  4. computes o_proj rows [256c, 256c + 256) over the head's 128 value columns: a per-head
//     partial, written as fp32;
//  5. the 16th block to finish a row chunk (a counter per chunk) sums the heads' partials in head
//     order and writes the bf16 output; the result does not depend on which block came last.
//     With p.fixed instead, every block adds its partial into fixed-point words (an integer
//     red.global.add, the same bits in any order) and is done: the ticket's fence, atomic and
//     the last block's reads were ~1.5 us of the launch's advance (H200, bf16 b1, eighteenth
//     session's bound), and the consumer reads the sums after the grid completes anyway.
// The reduction over heads goes through L2 because a cluster holds one head: W_UV's rows are
// shared by the head's blocks, and a cluster over heads would need every block to read all of
// its head's W_UV (8x the bytes).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/fixed_point.cuh"
#include "kernels/common/mma_ptx.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/mla_v_up_o_params.h"

namespace rs::cuda {

namespace vupo {
constexpr int kWarps = kVUpOThreads / 32;
constexpr int kCols = kVUpOLatent / kVUpOCluster;           // 64 latent columns a block
constexpr int kRows = kVUpOHidden / kVUpOCluster;           // 256 o_proj rows a block
constexpr int kSplitGroups = kVUpOThreads / (kCols / 4);    // 16: threads (split group, float4 column)
constexpr int kSplitRounds = kMlaDecodeMaxSplits / kSplitGroups;  // 4 splits a thread at most
constexpr int kUvRounds = kVUpOVdim / kWarps / 4;           // 4: 4 rows of 8 lanes an instruction
static_assert(kRows == kWarps * 32, "a warp writes 32 o_proj rows, one a lane");
static_assert(kUvRounds == 4, "W_UV: a warp's 16 rows in 4 rounds");

// Lane l of each aligned group of N lanes ends with the group's sum of v[l % N] in v[0]:
// log2(N) halving exchanges (N - 1 shuffles) instead of N full reductions (N log2(N)). One
// template step per halving, so every index is a constant and v stays in registers.
template <int kHalf, int N>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[N]) {
  const bool upper = (threadIdx.x & kHalf) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = upper ? v[i] : v[i + kHalf];
    const float keep = upper ? v[i + kHalf] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kHalf);
  }
  if constexpr (kHalf > 1) reduce_scatter_step<kHalf / 2>(v);
}
template <int N>
__device__ __forceinline__ float reduce_scatter(float (&v)[N]) {
  reduce_scatter_step<N / 2>(v);
  return v[0];
}

__device__ __forceinline__ float dot8_bf16_f32(const uint4& w, const float* x, float acc) {
  acc = fmaf(kern::bf16_lo(w.x), x[0], acc);
  acc = fmaf(kern::bf16_hi(w.x), x[1], acc);
  acc = fmaf(kern::bf16_lo(w.y), x[2], acc);
  acc = fmaf(kern::bf16_hi(w.y), x[3], acc);
  acc = fmaf(kern::bf16_lo(w.z), x[4], acc);
  acc = fmaf(kern::bf16_hi(w.z), x[5], acc);
  acc = fmaf(kern::bf16_lo(w.w), x[6], acc);
  acc = fmaf(kern::bf16_hi(w.w), x[7], acc);
  return acc;
}

__device__ __forceinline__ float dot4_e4m3_f32(uint32_t w, const float* x, float acc) {
  const float2 a = kern::e4m3x2_to_float2(w), b = kern::e4m3x2_to_float2(w >> 16);
  acc = fmaf(a.x, x[0], acc);
  acc = fmaf(a.y, x[1], acc);
  acc = fmaf(b.x, x[2], acc);
  acc = fmaf(b.y, x[3], acc);
  return acc;
}
}  // namespace vupo

// A block's weights, fetched before the wait: W_UV's pieces (4 rows of 8 lanes x 8 latent
// columns, 4 rounds) in registers, and W_o's slice: its first 8 rounds in registers (FP8's whole
// 32 KB, 96 registers a thread; half of bf16's 64 KB, 90 registers), the rest (bf16) by
// cp.async into shared memory, read back by the thread that copied it, which waits for its own
// copies only. H200, bf16: the whole slice in registers took 145 registers a thread, so the
// blocks did not fit beside the split attention's and half the clusters only started loading
// once it had drained (9.98 us in the chain); the whole slice in shared memory slowed the split
// attention sharing those SMs (4.35 -> 5.63 us), half and half did not (a step -0.6%). FP8 in
// shared memory was 0.5% slower. All of it before the wait: half or a quarter of W_o fetched
// after the wait was slower, none slower still.
// W_o: bf16 2 rows an instruction (16 lanes x 8 columns), 16 rounds; e4m3 4 rows (8 lanes x 16
// columns), 8 rounds.
constexpr int kVUpORegRounds = 8;  // W_o pieces a thread holds in registers; the rest in shared memory
template <bool kFp8>
struct VUpORegs {
  static constexpr int kORounds = kFp8 ? 8 : 16;
  static constexpr int kOLanes = kFp8 ? 8 : 16;  // lanes sharing a row
  static constexpr int kRowBytes = kVUpOVdim * (kFp8 ? 1 : 2);
  float oscale[kFp8 ? kORounds : 1];
  uint4 uv[vupo::kUvRounds];
  uint4 o[kVUpORegRounds];
};
template <bool kFp8>
constexpr int mla_v_up_o_smem_bytes() { return (VUpORegs<kFp8>::kORounds - kVUpORegRounds) * 16 * kVUpOThreads; }

// Where the thread keeps piece q (>= kVUpORegRounds) of its W_o slice: piece-major, so a warp's
// 16-byte pieces of one round are 512 consecutive bytes.
__device__ __forceinline__ int vupo_piece_offset(int q_smem) { return (q_smem * kVUpOThreads + threadIdx.x) * 16; }

template <bool kFp8>
__device__ __forceinline__ void mla_v_up_o_prefetch(const MlaVUpOParams& p, int head, int c, VUpORegs<kFp8>& r,
                                                    uint8_t* wo_s) {
  using R = VUpORegs<kFp8>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const __nv_bfloat16* uv =
      p.vu.kv_b + (static_cast<int64_t>(head) * (p.vu.nope + p.vu.vdim) + p.vu.nope) * p.vu.kv_lora + c * vupo::kCols + 8 * (lane & 7);
#pragma unroll
  for (int q = 0; q < vupo::kUvRounds; ++q)
    r.uv[q] = kern::ld_stream16(uv + static_cast<int64_t>(16 * warp + 4 * q + (lane >> 3)) * p.vu.kv_lora);
  const int row0 = c * vupo::kRows + 32 * warp;
  const int64_t row_bytes = p.o.cols * (kFp8 ? 1 : 2);
  const int col = head * kVUpOVdim + (kFp8 ? 16 : 8) * (lane % R::kOLanes);
  const uint8_t* o = static_cast<const uint8_t*>(p.o.data) + col * (kFp8 ? 1 : 2);
  // FP8: this thread's scale column, and the scale table's width (block divisions by shifts).
  const float* scale_row0 = nullptr;
  int64_t scale_cols = 0;
  if constexpr (kFp8) {
    scale_cols = kern::fp8_block_div(p.o.cols + p.o.block_cols - 1, p.o.block_cols);
    scale_row0 = p.o.scale_inv + kern::fp8_block_div(col, p.o.block_cols);
  }
#pragma unroll
  for (int q = 0; q < R::kORounds; ++q) {
    const int64_t row = row0 + (32 / R::kOLanes) * q + lane / R::kOLanes;
    if (q < kVUpORegRounds) r.o[q < kVUpORegRounds ? q : 0] = kern::ld_stream16(o + row * row_bytes);
    else ptx::cp_async16(wo_s + vupo_piece_offset(q - kVUpORegRounds), o + row * row_bytes, true);
    if constexpr (kFp8) r.oscale[q] = __ldg(scale_row0 + kern::fp8_block_div(row, p.o.block_rows) * scale_cols);
  }
  ptx::cp_async_commit();
}

struct VUpOSmem {
  float red[vupo::kSplitGroups][vupo::kCols];
  float ctx[vupo::kCols];
  float vpart[kVUpOVdim];  // read by the other blocks of the cluster
  float vh[kVUpOVdim];
  int last;
};

template <bool kFp8>
__device__ __forceinline__ void mla_v_up_o_compute(const MlaVUpOParams& p, int head, int c, const VUpORegs<kFp8>& r,
                                                   const uint8_t* wo_s, VUpOSmem& sm) {
  namespace cg = cooperative_groups;
  using R = VUpORegs<kFp8>;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // 1. Merge: every load of the step at once (lse for the warp's max and sum, the thread's own
  // splits' lse and partials), one L2 round trip. Empty splits (lse -inf) are trailing and their
  // partials were never written: selected away, not multiplied by zero (they may hold NaN).
  const float* lse = p.vu.part_lse + static_cast<int64_t>(head) * p.vu.splits;
  const int c4 = tid % (vupo::kCols / 4), sg = tid / (vupo::kCols / 4);
  const float* po = p.vu.part_o + static_cast<int64_t>(head) * p.vu.splits * p.vu.kv_lora + c * vupo::kCols + 4 * c4;
  const float lw0 = lane < p.vu.splits ? __ldcg(lse + lane) : -INFINITY;
  const float lw1 = lane + 32 < p.vu.splits ? __ldcg(lse + lane + 32) : -INFINITY;
  float ls[vupo::kSplitRounds];
  float4 pv[vupo::kSplitRounds];
#pragma unroll
  for (int i = 0; i < vupo::kSplitRounds; ++i) {
    const int s = sg + vupo::kSplitGroups * i;
    ls[i] = s < p.vu.splits ? __ldcg(lse + s) : -INFINITY;
    pv[i] = s < p.vu.splits ? __ldcg(reinterpret_cast<const float4*>(po + static_cast<int64_t>(s) * p.vu.kv_lora))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const float mx = warp_max(fmaxf(lw0, lw1));
  const float inv = 1.f / warp_sum((lw0 == -INFINITY ? 0.f : exp2f(lw0 - mx)) + (lw1 == -INFINITY ? 0.f : exp2f(lw1 - mx)));
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < vupo::kSplitRounds; ++i) {
    if (ls[i] == -INFINITY) continue;
    const float ws = exp2f(ls[i] - mx) * inv;
    acc.x += ws * pv[i].x;
    acc.y += ws * pv[i].y;
    acc.z += ws * pv[i].z;
    acc.w += ws * pv[i].w;
  }
  *reinterpret_cast<float4*>(&sm.red[sg][4 * c4]) = acc;
  __syncthreads();
  if (tid < vupo::kCols) {
    float s = 0.f;
#pragma unroll
    for (int g = 0; g < vupo::kSplitGroups; ++g) s += sm.red[g][tid];
    sm.ctx[tid] = s;
  }
  __syncthreads();
  pdl::probe_mark(kern::kProbeInputReady);  // the splits merged (wait-probe builds only)

  // 2. This block's 64 latent columns times W_UV's: a partial of the head's 128 value rows.
  {
    float x[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = sm.ctx[8 * (lane & 7) + j];
    float v[vupo::kUvRounds];
#pragma unroll
    for (int q = 0; q < vupo::kUvRounds; ++q) {
      v[q] = vupo::dot8_bf16_f32(r.uv[q], x, 0.f);
#pragma unroll
      for (int m = 1; m < 8; m *= 2) v[q] += __shfl_xor_sync(0xffffffffu, v[q], m);
    }
#pragma unroll
    for (int q = 0; q < vupo::kUvRounds; ++q)
      if ((lane & 7) == q) sm.vpart[16 * warp + 4 * q + (lane >> 3)] = v[q];
  }

  // 3. The head's value vector: the cluster's partials in rank order. The barrier's release /
  // acquire makes every block's vpart visible to the others.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (tid < kVUpOVdim) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kVUpOCluster; ++k) s += cluster.map_shared_rank(sm.vpart, k)[tid];
    sm.vh[tid] = __bfloat162float(__float2bfloat16(s));
  }
  pdl::probe_mark(kern::kProbeStep2);  // the head's value vector summed
  // Done reading the others' shared memory: they may exit once everyone arrives (waited below).
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  __syncthreads();

  // 4. o_proj rows [256c, 256c + 256) over the head's columns: lane l ends with row
  // row0 + (32 / kOLanes) * (l % kOLanes) + l / kOLanes after the reduce-scatter.
  {
    constexpr int kX = kFp8 ? 16 : 8;
    float x[kX];
#pragma unroll
    for (int j = 0; j < kX; ++j) x[j] = sm.vh[kX * (lane % R::kOLanes) + j];
    asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's own pieces (see VUpORegs)
    float a[R::kORounds];
#pragma unroll
    for (int q = 0; q < R::kORounds; ++q) {
      const uint4 w = q < kVUpORegRounds ? r.o[q < kVUpORegRounds ? q : 0]
                                         : *reinterpret_cast<const uint4*>(wo_s + vupo_piece_offset(q - kVUpORegRounds));
      if constexpr (kFp8) {
        float d = vupo::dot4_e4m3_f32(w.x, x, 0.f);
        d = vupo::dot4_e4m3_f32(w.y, x + 4, d);
        d = vupo::dot4_e4m3_f32(w.z, x + 8, d);
        d = vupo::dot4_e4m3_f32(w.w, x + 12, d);
        a[q] = r.oscale[q] * d;
      } else {
        a[q] = vupo::dot8_bf16_f32(w, x, 0.f);
      }
    }
    const float sum = vupo::reduce_scatter<R::kORounds>(a);
    const int row = c * vupo::kRows + 32 * warp + (32 / R::kOLanes) * (lane % R::kOLanes) + lane / R::kOLanes;
    if (p.fixed) kern::red_add_fixed(p.fixed + row, kern::to_fixed(sum));
    else p.partials[static_cast<int64_t>(head) * kVUpOHidden + row] = sum;
  }

  pdl::probe_mark(kern::kProbeMainDone);  // this block's o_proj partial stored
  if (p.fixed) {  // (the red's are performed before the grid completes)
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    return;
  }
  // 5. The last block of row chunk c sums the heads. Writers: store, fence, barrier, one atomic;
  // the last one: atomic, fence, barrier, then L2 reads (the threadFenceReduction pattern).
  __threadfence();
  __syncthreads();
  if (tid == 0) sm.last = atomicAdd(p.counters + c, 1) == p.vu.heads - 1;
  __syncthreads();
  pdl::probe_mark(kern::kProbeStep1);  // its ticket known
  if (sm.last) {
    __threadfence();
    for (int i = tid; i < vupo::kRows; i += kVUpOThreads) {
      const int row = c * vupo::kRows + i;
      float s = 0.f;
#pragma unroll 16
      for (int h = 0; h < p.vu.heads; ++h) s += __ldcg(p.partials + static_cast<int64_t>(h) * kVUpOHidden + row);
      p.out[row] = __float2bfloat16(s);
    }
    if (tid == 0) p.counters[c] = 0;  // for the next launch, which starts after this grid completes
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// wo_s: mla_v_up_o_smem_bytes<kFp8>() of shared memory, 16-byte aligned.
template <bool kFp8>
__device__ __forceinline__ void mla_v_up_o_block(const MlaVUpOParams& p, int head, int c, uint8_t* wo_s) {
  __shared__ __align__(16) VUpOSmem sm;
  VUpORegs<kFp8> r;
  mla_v_up_o_prefetch<kFp8>(p, head, c, r, wo_s);
  pdl::wait();
  mla_v_up_o_compute<kFp8>(p, head, c, r, wo_s, sm);
}

}  // namespace rs::cuda
