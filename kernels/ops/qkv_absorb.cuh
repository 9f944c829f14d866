#pragma once
// One decode token's input add + RMSNorm, q_proj + kv_a GEMV and MLA query absorption
// (q_nope . W_UK, q's rope) in one launch: a thread-block cluster of C blocks a head.
//
// Why: as two launches the absorption waited for the whole q/kv grid to complete (a PDL
// boundary) although each head's absorption needs only that head's 128 q_nope values. Its launch
// held a V2-Lite bf16 step on an H200 for ~3.8 us a layer (the step was 5.4% faster with it left
// out, outputs stale: docs/perf/cuda.md, nineteenth session). Here cluster c owns head c's
// q_proj rows and a 1/heads share of kv_a's rows, so the head's q is complete once the cluster's
// blocks are: a cluster barrier, not a grid boundary, stands between the GEMV and the
// absorption, and the q values travel through distributed shared memory.
//
// C: the largest cluster size up to 7 of which a cluster for every head fits the GPU at once
// (the launcher asks the driver; an H200 fits 16 clusters of 6 at one block an SM, not of 7 or
// 8, its GPCs differing in size), so 96 SMs stream V2-Lite's 15 MB instead of 132. Fewer SMs
// cost less than the boundary: the launch ends ~1.8 us later than the GEMV alone did and saves the
// absorb kernel's ~3.1 us.
//
// Block k of cluster c: the streaming GEMV (gemv_stream.cuh: its ring, its norm prologue, the
// same per-row products, so q and kv_a get the same bits as the grouped launch) over rows
// [k R/C, (k+1) R/C) of the cluster's R = qdim + kv rows; lanes 0..C-1 of the warp that
// finishes a q row store its bf16 value into that row's place in all C blocks' shared memory.
// After the barrier, block k absorbs latent column chunks k and k + C (64 columns each) of head
// c with W_UK slices held in registers since before the wait (mla_absorb_q_prefetch), in the
// absorb kernel's order of operations (the same bits), and block 0 rotates q's rope part.
// kv_a's output goes to global memory only: its norm spans every cluster's rows, so the decode
// attention forms the cache row (launch_mla_decode's new_kv) instead of a kernel of its own.
#include <cooperative_groups.h>

#include "kernels/ops/gemv_stream.cuh"
#include "kernels/ops/mla_absorb.cuh"
#include "kernels/ops/qkv_absorb_params.h"

namespace rs::kern {

// A block absorbs at most two chunks of 64 latent columns: clusters of at least 4 blocks.
static_assert(rs::cuda::kQkvAbsorbChunks <= rs::cuda::kQkvAbsorbMinCluster * 2, "two chunks a block at most");

// Rows of cluster `head`: q_proj rows [head * qdim, +qdim), then kv_a rows [kv0, kv1).
struct QkvClusterRows {
  int64_t q0, kv0, kv1;
  int qdim;
  __device__ QkvClusterRows(const rs::cuda::QkvAbsorbParams& p, int head) {
    qdim = p.absorb.nope + p.absorb.rope;
    q0 = static_cast<int64_t>(head) * qdim;
    const int64_t kv_rows = p.gemv.w[1].rows;
    kv0 = head * kv_rows / p.absorb.heads;
    kv1 = (head + 1) * kv_rows / p.absorb.heads;
  }
  __device__ int64_t count() const { return qdim + kv1 - kv0; }
};

// Producer lane: stage i (local rows [r0, r1) of the cluster) into its ring slot: at most two
// copies, the q part and the kv part.
template <int S>
__device__ __forceinline__ void qkv_issue(const rs::cuda::QkvAbsorbParams& p, const GemvStreamGeom& g,
                                          const QkvClusterRows& cr, uint8_t* ring_mem, BulkRing<S>& ring, uint32_t i,
                                          int64_t lb, int64_t le, uint64_t policy) {
  const int64_t r0 = lb + static_cast<int64_t>(i) * g.rows_per_stage;
  const int64_t r1 = r0 + g.rows_per_stage < le ? r0 + g.rows_per_stage : le;
  const int s = ring.stage(i);
  uint8_t* dst = ring_mem + static_cast<size_t>(s) * g.stage_bytes;
  mbar_arrive_expect_tx(&ring.full[s], static_cast<uint32_t>(r1 - r0) * g.row_bytes);
  const int64_t qe = r1 < cr.qdim ? r1 : cr.qdim;
  if (r0 < qe)
    bulk_copy_g2s(dst, static_cast<const uint8_t*>(p.gemv.w[0].data) + (cr.q0 + r0) * g.row_bytes,
                  static_cast<uint32_t>(qe - r0) * g.row_bytes, &ring.full[s], policy);
  const int64_t kb = r0 > cr.qdim ? r0 : cr.qdim;
  if (kb < r1)
    bulk_copy_g2s(dst + (kb - r0) * g.row_bytes,
                  static_cast<const uint8_t*>(p.gemv.w[1].data) + (cr.kv0 + kb - cr.qdim) * g.row_bytes,
                  static_cast<uint32_t>(r1 - kb) * g.row_bytes, &ring.full[s], policy);
}

// The kernel body: blockDim.x == kStreamThreads, gridDim.x == heads * C in
// clusters of C = gridDim.x / heads (4 to 8), g.pieces == 1 (whole rows in a stage), one token.
// S: ring stages; K: latent column chunks a block absorbs at most (8 / C rounded up).
template <int S, int K>
__device__ __forceinline__ void qkv_absorb_op(const rs::cuda::QkvAbsorbParams& p, const GemvStreamGeom& g,
                                              uint8_t* smem) {
  namespace cg = cooperative_groups;
  using rs::cuda::kAbsorbCols;
  using rs::cuda::kAbsorbEarlyRounds;
  constexpr int kChunks = rs::cuda::kQkvAbsorbChunks;
  __shared__ BulkRing<S> ring;
  __shared__ __align__(16) __nv_bfloat16 qh[256];  // the head's q row (qdim <= 256)
  __shared__ __align__(16) float red[K][kStreamConsumerWarps][kAbsorbCols];  // warp sums
  const rs::cuda::MlaAbsorbQParams& ab = p.absorb;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const bool producer = warp == kStreamConsumerWarps;
  const int C = static_cast<int>(gridDim.x) / ab.heads;  // blocks a head = the cluster's size
  const int head = blockIdx.x / C, rank = blockIdx.x % C;
  const QkvClusterRows cr(p, head);
  const int64_t lb = rank * cr.count() / C, le = (rank + 1) * cr.count() / C;
  const uint32_t n_stages = static_cast<uint32_t>((le - lb + g.rows_per_stage - 1) / g.rows_per_stage);
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem + g.xs_offset);
  const int64_t cols = p.gemv.w[0].cols;
  cg::cluster_group cluster = cg::this_cluster();

  if (threadIdx.x == 0) ring.init(kStreamConsumerWarps);
  __syncthreads();
  // Every block of the cluster must have started before another writes its shared memory: this
  // arrival is waited for after the norm prologue, long after every block has started.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  pdl_launch_dependents();
  uint64_t policy = 0;
  // Before the wait, all constant during the step: the first ring stages; this block's W_UK
  // slices (consumers, chunks rank + j * C; loaded after the norm prologue instead, they waited
  // behind its loads: H200, 2026-12-01, level or slower); the cos and sin of q rope's pairs
  // (rank 0's warp 0; the step's positions are uploaded before its first kernel), so the
  // rotation at the end costs no trip to L2.
  const int half = ab.rope / 2;
  float rc = 0.f, rsn = 0.f;
  if (rank == 0 && threadIdx.x < half) rs::cuda::rope_cos_sin(ab.rotate, ab.positions[0], threadIdx.x, &rc, &rsn);
  uint4 wuk[K][kAbsorbEarlyRounds];
  if (producer) {
    policy = l2_evict_first();
    const uint32_t first = n_stages < g.prewait ? n_stages : g.prewait;
    if (lane == 0)
      for (uint32_t i = 0; i < first; ++i) qkv_issue<S>(p, g, cr, smem, ring, i, lb, le, policy);
  } else {
#pragma unroll
    for (int j = 0; j < K; ++j)
      if (rank + j * C < kChunks) rs::cuda::mla_absorb_q_prefetch(ab, head, rank + j * C, wuk[j]);
  }
  pdl_wait();

  GemvNormKeep keep;
  const unsigned ticket = gemv_norm_prologue(p.gemv, xs, kStreamConsumerThreads, &keep);
  pdl_probe_mark(kProbeInputReady);
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");

  if (producer) {
    for (uint32_t i = g.prewait < n_stages ? g.prewait : n_stages; i < n_stages; ++i) {
      ring.acquire(i);
      if (lane == 0) qkv_issue<S>(p, g, cr, smem, ring, i, lb, le, policy);
      __syncwarp();
    }
  } else {
    __nv_bfloat16* q_out = static_cast<__nv_bfloat16*>(p.gemv.y[0]) + cr.q0;
    __nv_bfloat16* kv_out = static_cast<__nv_bfloat16*>(p.gemv.y[1]) + cr.kv0;
    for (uint32_t i = 0; i < n_stages; ++i) {
      const int64_t r0 = lb + static_cast<int64_t>(i) * g.rows_per_stage;
      const int64_t r1 = r0 + g.rows_per_stage < le ? r0 + g.rows_per_stage : le;
      ring.wait_full(i);
      const uint8_t* stage = smem + static_cast<size_t>(ring.stage(i)) * g.stage_bytes;
      for (int64_t r = r0 + warp; r < r1; r += kStreamConsumerWarps) {
        float acc[1] = {0.f};
        stream_row_piece<false, 1>(stage + (r - r0) * g.row_bytes, xs, cols, 1, 0, g.row_bytes, nullptr, 0, acc);
        const __nv_bfloat16 v = __float2bfloat16_rn(warp_sum(acc[0]));
        if (r < cr.qdim) {
          if (lane == 0) q_out[r] = v;
          if (lane < C) *cluster.map_shared_rank(qh + r, static_cast<unsigned>(lane)) = v;
        } else if (lane == 0) {
          kv_out[r - cr.qdim] = v;
        }
      }
      __syncwarp();
      if (lane == 0) ring.release(i);
    }
    pdl_probe_mark(kProbeMainDone);
  }
  // The barrier's release / acquire makes every block's stores into qh visible to all of them.
  cluster.sync();
  pdl_probe_mark(kProbeStep1);

  // Latent columns [64 chunk, +64) of head `head` for chunks rank, rank + C: mla_absorb_q_compute's
  // arithmetic for one token (each column's sum in the same order whichever block forms it; the
  // lanes' and warps' sums through the same absorb_warp_columns).
  const int nope = ab.nope, odim = ab.kv_lora + ab.rope;
  __nv_bfloat16* out = ab.out + static_cast<int64_t>(head) * odim;
  if (!producer) {
    const int vsub = lane & 7, rsub = lane >> 3;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (rank + j * C >= kChunks) break;  // block-uniform
      float acc[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = 0.f;
#pragma unroll
      for (int r = 0; r < kAbsorbEarlyRounds; ++r) {
        const int d = r * (kStreamConsumerWarps * 4) + warp * 4 + rsub;
        float wf[8];
        rs::cuda::bf16x8_to_float(wuk[j][r], wf);
        const float qv = __bfloat162float(qh[d]);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += qv * wf[k];
      }
      rs::cuda::absorb_warp_columns(acc, red[j][warp], vsub, rsub);
    }
  }
  __syncthreads();
  pdl_probe_mark(kProbeStep2);
  {
    const int j = threadIdx.x / kAbsorbCols, col = threadIdx.x % kAbsorbCols, chunk = rank + j * C;
    if (j < K && chunk < kChunks) {
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kStreamConsumerWarps; ++k) sum += red[j][k][col];
      out[chunk * kAbsorbCols + col] = __float2bfloat16(sum);
    }
  }
  if (rank == 0 && threadIdx.x < half) {  // rope_apply_pair's arithmetic
    const int a = rs::cuda::rope_a(ab.rotate, threadIdx.x), b = rs::cuda::rope_b(ab.rotate, threadIdx.x);
    float ya, yb;
    rs::cuda::rope_rotate(rc, rsn, __bfloat162float(qh[nope + a]), __bfloat162float(qh[nope + b]), &ya, &yb);
    out[ab.kv_lora + a] = __float2bfloat16(ya);
    out[ab.kv_lora + b] = __float2bfloat16(yb);
  }
  pdl_probe_mark(kProbeStep3);
  gemv_norm_epilogue(p.gemv, xs, ticket, gridDim.x, kStreamConsumerThreads, &keep);
  pdl_probe_mark(kProbeEnd);
}

}  // namespace rs::kern
