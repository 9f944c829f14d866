#pragma once
// Weight-streaming GEMV for one or two token rows (decode): y_j[t, r] = x[t] . W_j[r] over up to
// kMaxGemvJobs weights of one width (DenseGemvParams, as the register GEMV of gemv.cuh), with
// the same optional add + RMSNorm prologue and bf16 or fp32 outputs.
//
// Why a second GEMV: the register GEMV (gemv.cuh) holds its bytes in flight in registers and may
// not load weights before griddepcontrol.wait without the wait holding the warp until they land,
// so a small matrix (o_proj 8 MB, q_proj + kv_a 15 MB: tens of KB per SM) only starts streaming
// once the previous kernel has drained, and then pays a full ramp. Here one persistent block per
// SM owns a balanced contiguous share of the jobs' rows and streams it through a shared-memory
// ring filled by 1-D bulk copies (kernels/common/bulk_copy.cuh): one producer lane issues the
// copies, eight consumer warps do the dot products. Weights are constant during a step, so the
// producer issues the first ring stages *before* griddepcontrol.wait: with PDL the copies are in
// flight while the previous kernel finishes. Only the first one or two (GemvStreamGeom::prewait):
// a whole share in flight at once (o_proj ~62 KB, q/kv ~110 KB an SM on an H200) delayed the
// loads of the previous kernel's last steps and this one's input behind it.
//
// Stage layout: a stage is rows_per_stage (a multiple of 8) consecutive rows of the block's
// share, each row (or, for rows wider than a stage allows, one column piece of each row) at a
// fixed slot; consumer warp w takes slots w, w + 8, ... of every stage, so a row is always
// reduced by one warp (no cross-warp reduction), and a piece's partial sums stay in that warp's
// registers until the row's last piece. Whole rows of one job are contiguous, so a stage of whole
// rows is one bulk copy per job it touches; pieces are one copy per row.
//
// x lives in shared memory ([m][cols] bf16, loaded or formed by the norm prologue after the
// wait). FP8: e4m3 weights dequantised per 16-element chunk with the 128x128 block scale read
// through L1, fp32 accumulation, as in gemv.cuh.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/gemv.cuh"
#include "kernels/ops/gemv_stream_geom.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern {

// Stage i of a block whose share starts at row rb: rows [r0, r1) of the concatenated jobs, piece
// `piece` of each, `len` bytes from byte `off` of every row.
struct StreamStage {
  int64_t r0, r1;
  int piece;
  uint32_t off, len;
};
__device__ __forceinline__ StreamStage stream_stage(const GemvStreamGeom& g, uint32_t i, int64_t rb, int64_t re) {
  StreamStage s;
  const int64_t grp = i / g.pieces;
  s.piece = static_cast<int>(i % g.pieces);
  s.r0 = rb + grp * g.rows_per_stage;
  s.r1 = s.r0 + g.rows_per_stage < re ? s.r0 + g.rows_per_stage : re;
  s.off = s.piece * g.piece_bytes;
  s.len = g.row_bytes - s.off < g.piece_bytes ? g.row_bytes - s.off : g.piece_bytes;
  return s;
}

// Producer lane: the copies of stage i into its ring slot. The byte count is declared first
// (arrive.expect_tx), then the copies complete_tx on the same barrier.
template <int S>
__device__ __forceinline__ void stream_issue(const DenseGemvParams& p, const GemvStreamGeom& g, uint8_t* ring_mem,
                                             BulkRing<S>& ring, uint32_t i, int64_t rb, int64_t re,
                                             uint64_t policy) {
  const StreamStage st = stream_stage(g, i, rb, re);
  const int s = ring.stage(i);
  uint8_t* dst = ring_mem + static_cast<size_t>(s) * g.stage_bytes;
  mbar_arrive_expect_tx(&ring.full[s], static_cast<uint32_t>(st.r1 - st.r0) * st.len);
  if (g.pieces == 1) {
    for (int64_t a = st.r0; a < st.r1;) {  // one copy per job the stage touches
      const GemvJobView j = gemv_job_of(p, a);
      const int64_t job_end = j.first_group + j.w.rows;
      const int64_t b = st.r1 < job_end ? st.r1 : job_end;
      bulk_copy_g2s(dst + (a - st.r0) * g.row_bytes,
                    static_cast<const uint8_t*>(j.w.data) + (a - j.first_group) * g.row_bytes,
                    static_cast<uint32_t>(b - a) * g.row_bytes, &ring.full[s], policy);
      a = b;
    }
  } else {
    for (int64_t r = st.r0; r < st.r1; ++r) {
      const GemvJobView j = gemv_job_of(p, r);
      bulk_copy_g2s(dst + (r - st.r0) * g.piece_bytes,
                    static_cast<const uint8_t*>(j.w.data) + (r - j.first_group) * g.row_bytes + st.off, st.len,
                    &ring.full[s], policy);
    }
  }
}

// One warp, one row slot of a landed stage: acc[t] += W[row][piece] . x[t][piece].
template <bool kFp8, int MT>
__device__ __forceinline__ void stream_row_piece(const uint8_t* wrow, const __nv_bfloat16* xs, int64_t cols,
                                                 int m, uint32_t off, uint32_t len, const float* srow,
                                                 int block_cols, float (&acc)[MT]) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
  const int c0 = static_cast<int>(off / 16), nch = static_cast<int>(len / 16);
#pragma unroll 4
  for (int c = lane; c < nch; c += 32) {
    const uint4 w = *reinterpret_cast<const uint4*>(wrow + c * 16);
    const int64_t e = static_cast<int64_t>(c0 + c) * E;  // first element of the chunk
    if constexpr (kFp8) {
      const float s = __ldg(srow + fp8_scale_col(c0 + c, block_cols));
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        if (t >= m) break;
        const uint4 x0 = *reinterpret_cast<const uint4*>(xs + t * cols + e);
        const uint4 x1 = *reinterpret_cast<const uint4*>(xs + t * cols + e + 8);
        acc[t] = fmaf(s, dot16_e4m3(w, x0, x1), acc[t]);
      }
    } else {
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        if (t >= m) break;
        acc[t] = dot8_bf16(w, *reinterpret_cast<const uint4*>(xs + t * cols + e), acc[t]);
      }
    }
  }
}

// The kernel body. smem: dynamic shared memory (ring of kStreamStages stages, then x), 128-byte
// aligned. blockDim.x == kStreamThreads; gridDim.x blocks each own rows [b*R/G, (b+1)*R/G).
template <bool kFp8, int MT, class OutT, bool kNorm>
__device__ __forceinline__ void gemv_stream_op(const DenseGemvParams& p, const GemvStreamGeom& g, uint8_t* smem) {
  constexpr int S = kStreamStages;
  __shared__ BulkRing<S> ring;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const bool producer = warp == kStreamConsumerWarps;
  const int64_t rb = static_cast<int64_t>(blockIdx.x) * g.total_rows / gridDim.x;
  const int64_t re = static_cast<int64_t>(blockIdx.x + 1) * g.total_rows / gridDim.x;
  const uint32_t n_stages =
      static_cast<uint32_t>((re - rb + g.rows_per_stage - 1) / g.rows_per_stage) * static_cast<uint32_t>(g.pieces);
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem + g.xs_offset);
  const int64_t cols = p.w[0].cols;

  if (threadIdx.x == 0) ring.init(kStreamConsumerWarps);
  __syncthreads();
  pdl_launch_dependents();
  uint64_t policy = 0;
  uint32_t issued = 0;
  if (producer) {
    // Weights only: nothing a predecessor writes, so before the wait; but only the first
    // g.prewait stages (see gemv_stream_launch): the rest after the wait and the input.
    policy = l2_evict_first();
    const uint32_t first = n_stages < g.prewait ? n_stages : g.prewait;
    if (lane == 0)
      for (; issued < first; ++issued) stream_issue<S>(p, g, smem, ring, issued, rb, re, policy);
    issued = first;
  }
  pdl_wait();

  // x into shared memory: the norm prologue (the 256 consumer threads, add_rmsnorm's arithmetic),
  // or a copy of the m token rows.
  [[maybe_unused]] unsigned ticket = 0;
  [[maybe_unused]] GemvNormKeep keep;
  if constexpr (kNorm) {
    ticket = gemv_norm_prologue(p, xs, kStreamConsumerThreads, &keep);
  } else {
    const int64_t vecs = cols / 8;
    for (int t = 0; t < p.m; ++t) {
      const int64_t xrow = p.x_rows ? p.x_rows[t] : t;
      const __nv_bfloat16* src = p.x + xrow * cols;
      for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x)
        reinterpret_cast<uint4*>(xs + t * cols)[v] = ld_cached16(src + v * 8);
    }
    __syncthreads();
  }
  pdl_probe_mark(kProbeInputReady);

  if (producer) {
    // The rest of the share, each stage once its slot is released. The whole warp waits (stays
    // converged), lane 0 issues.
    for (uint32_t i = issued; i < n_stages; ++i) {
      ring.acquire(i);
      if (lane == 0) stream_issue<S>(p, g, smem, ring, i, rb, re, policy);
      __syncwarp();
    }
  } else {
    float acc[MT];
#pragma unroll
    for (int t = 0; t < MT; ++t) acc[t] = 0.f;
    for (uint32_t i = 0; i < n_stages; ++i) {
      const StreamStage st = stream_stage(g, i, rb, re);
      ring.wait_full(i);
      const uint8_t* stage = smem + static_cast<size_t>(ring.stage(i)) * g.stage_bytes;
      for (int64_t r = st.r0 + warp; r < st.r1; r += kStreamConsumerWarps) {
        const GemvJobView j = gemv_job_of(p, r);
        const int64_t row = r - j.first_group;
        if (st.piece == 0) {
#pragma unroll
          for (int t = 0; t < MT; ++t) acc[t] = 0.f;
        }
        const float* srow = nullptr;
        if constexpr (kFp8) {
          const int64_t scale_cols = fp8_block_div(cols + j.w.block_cols - 1, j.w.block_cols);
          srow = j.w.scale_inv + fp8_block_div(row, j.w.block_rows) * scale_cols;
        }
        stream_row_piece<kFp8, MT>(stage + (r - st.r0) * g.piece_bytes, xs, cols, p.m, st.off, st.len, srow,
                                   j.w.block_cols, acc);
        if (st.piece == g.pieces - 1) {
          OutT* y = static_cast<OutT*>(j.y);
#pragma unroll
          for (int t = 0; t < MT; ++t) {
            const float v = warp_sum(acc[t]);
            if (lane == t && t < p.m) gemv_store(y, static_cast<int64_t>(t) * j.w.rows + row, v);
          }
        }
      }
      __syncwarp();
      if (lane == 0) ring.release(i);
    }
    pdl_probe_mark(kProbeMainDone);
  }
  if constexpr (kNorm) gemv_norm_epilogue(p, xs, ticket, gridDim.x, kStreamConsumerThreads, &keep);
  pdl_probe_mark(kProbeEnd);
}

}  // namespace rs::kern
