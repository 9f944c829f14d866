#pragma once
// Bandwidth-bound matrix-vector products for a few token rows (decode). The weight matrix is
// streamed once: each warp owns RPW rows (and one of KS slices of their width), its lanes split
// the slice into 16-byte chunks, and U chunks per row are loaded before the first use so that
// RPW*U 16-byte loads per lane are in flight. Activations (a few KB) are re-read through L1/L2.
// Partial sums stay in registers and are reduced with one butterfly per (row, token) at the
// end; with KS > 1 the slices of a row meet in shared memory.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/common/work_grid.cuh"
#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/rmsnorm.cuh"

namespace rs::kern {

using rs::cuda::warp_sum;

constexpr int kGemvWarps = 8;  // warps per block
constexpr int kGemvThreads = kGemvWarps * 32;

// Elements per 16-byte chunk of a weight row.
template <bool kFp8>
constexpr int chunk_elems() { return kFp8 ? 16 : 8; }

// One weight row as the warp sees it: its bytes and, for FP8, its row of block scales.
struct WeightRow {
  const uint8_t* data = nullptr;  // nullptr: row outside the matrix, contributes nothing
  const float* scale = nullptr;   // FP8: scale_inv + (row / block_rows) * scale_cols
};

__device__ __forceinline__ WeightRow weight_row(const rs::cuda::DeviceMatrix& w, int64_t row,
                                                bool fp8) {
  WeightRow r;
  if (row >= w.rows) return r;
  const int64_t elem_bytes = fp8 ? 1 : 2;
  r.data = static_cast<const uint8_t*>(w.data) + row * w.cols * elem_bytes;
  if (fp8) {
    const int64_t scale_cols = fp8_block_div(w.cols + w.block_cols - 1, w.block_cols);
    r.scale = w.scale_inv + fp8_block_div(row, w.block_rows) * scale_cols;
  }
  return r;
}

// One batch of a warp's weight rows into registers: chunk c0 + u * 32 + lane of each row for
// u < U (zero past c_end or for an absent row), and for FP8 each chunk's block scale.
template <bool kFp8, int R, int U>
__device__ __forceinline__ void load_weight_batch(const WeightRow (&rows)[R], int64_t c0, int64_t c_end,
                                                  int block_cols, uint4 (&w)[R][U], float (&s)[R][U]) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = c0 + u * 32 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (c < c_end && rows[r].data) {
        w[r][u] = ld_stream16(rows[r].data + c * 16);
        if constexpr (kFp8) s[r][u] = __ldg(rows[r].scale + fp8_scale_col(c, block_cols));
      } else {
        w[r][u] = make_uint4(0, 0, 0, 0);
        if constexpr (kFp8) s[r][u] = 0.f;
      }
    }
  }
}

// The chunks load_weight_batch would load of one row at c0 (u < U, below c_end), towards L2
// only: a weight prologue before griddepcontrol.wait that holds no registers (a real load there
// made the wait hold the warp until it landed).
template <int U>
__device__ __forceinline__ void prefetch_weight_row(const WeightRow& row, int64_t c0, int64_t c_end) {
  if (!row.data) return;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = c0 + u * 32 + lane;
    if (c < c_end) asm volatile("prefetch.global.L2 [%0];" ::"l"(row.data + c * 16));
  }
}

// part[r][t] = this lane's share of dot(row r, x row t) over chunks [c_begin, c_end). Rows with
// data == nullptr and tokens with x == nullptr are skipped (their part stays 0). With kXPerRow
// each row has its own token rows x[r][t] (experts with their own activations), else all rows
// use x[0][t]. The caller reduces across the warp. FP8 rows are dequantised per 16-element
// chunk (a chunk never straddles a scale block because block_cols % 16 == 0), fp32 accumulate.
// pdl_wait() sits between the first weight loads and the first activation read.
// kXShared: x lives in shared memory (the norm prologue's output), read with plain loads.
template <bool kFp8, int RPW, int MT, int U, bool kXPerRow = false, bool kXShared = false>
__device__ __forceinline__ void gemv_warp_partial(const WeightRow (&rows)[RPW],
                                                  const __nv_bfloat16* const (&x)[kXPerRow ? RPW : 1][MT],
                                                  int64_t c_begin, int64_t c_end, int block_cols,
                                                  float (&part)[RPW][MT]) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int t = 0; t < MT; ++t) part[r][t] = 0.f;

  for (int64_t c0 = c_begin; c0 < c_end; c0 += 32 * U) {
    uint4 w[RPW][U];
    float s[RPW][U];
    load_weight_batch<kFp8, RPW, U>(rows, c0, c_end, block_cols, w, s);
    if constexpr (!kXPerRow) {
      // One activation load per (token, chunk), used by all RPW rows: fewer registers and L1
      // loads than per-row loads (measured: 68 vs 95 registers for one row, one token).
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const __nv_bfloat16* xr = x[0][t];
        if (!xr) continue;  // warp-uniform
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * 32 + lane;
          if (c >= c_end) continue;
          if constexpr (kFp8) {
            const uint4 x0 = kXShared ? *reinterpret_cast<const uint4*>(xr + c * 16) : ld_cached16(xr + c * 16);
            const uint4 x1 = kXShared ? *reinterpret_cast<const uint4*>(xr + c * 16 + 8) : ld_cached16(xr + c * 16 + 8);
#pragma unroll
            for (int r = 0; r < RPW; ++r) part[r][t] = fmaf(s[r][u], dot16_e4m3(w[r][u], x0, x1), part[r][t]);
          } else {
            const uint4 xv = kXShared ? *reinterpret_cast<const uint4*>(xr + c * 8) : ld_cached16(xr + c * 8);
#pragma unroll
            for (int r = 0; r < RPW; ++r) part[r][t] = dot8_bf16(w[r][u], xv, part[r][t]);
          }
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const __nv_bfloat16* xr = x[r][t];
          if (!xr || !rows[r].data) continue;  // warp-uniform
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t c = c0 + u * 32 + lane;
            if (c >= c_end) continue;
            if constexpr (kFp8) {
              const uint4 x0 = ld_cached16(xr + c * 16);
              const uint4 x1 = ld_cached16(xr + c * 16 + 8);
              part[r][t] = fmaf(s[r][u], dot16_e4m3(w[r][u], x0, x1), part[r][t]);
            } else {
              part[r][t] = dot8_bf16(w[r][u], ld_cached16(xr + c * 8), part[r][t]);
            }
          }
        }
      }
    }
  }
}

// The weight a row group belongs to in a grouped GEMV: jobs are laid end to end in row groups
// (group_end is cumulative), each with its own matrix and output. Static indices only, so the
// parameters stay in the constant bank (no local copy of the params struct).
struct GemvJobView {
  rs::cuda::DeviceMatrix w;
  void* y;
  int64_t first_group;
};
__device__ __forceinline__ GemvJobView gemv_job_of(const DenseGemvParams& p, int64_t g) {
  GemvJobView v{p.w[0], p.y[0], 0};
#pragma unroll
  for (int k = 1; k < kMaxGemvJobs; ++k)
    if (k < p.jobs && g >= p.group_end[k - 1]) v = GemvJobView{p.w[k], p.y[k], p.group_end[k - 1]};
  return v;
}

__device__ __forceinline__ void gemv_store(__nv_bfloat16* y, int64_t i, float v) { y[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void gemv_store(float* y, int64_t i, float v) { y[i] = v; }

// The norm prologue (DenseGemvParams::norm_*): x[t] = rmsnorm(residual[t] + d0 + d1 + d2) into
// shared memory `xs` [m][cols], with add_rmsnorm_row's arithmetic (its chunk helpers from
// rmsnorm.cuh, 256 threads, the same float4 chunk per thread, the same sums in the same order and
// the same block reduction), so the products see the bits the separate add_rmsnorm kernel would
// have written. Every block reads the old residual; the last block to finish reading (a ticket on
// norm_counter, after a fence) writes, after its products, the new residual and x to global
// memory and re-zeroes the counter: no block can read a residual another block already updated.
// Runs after pdl_wait (residual and deltas come from predecessors). cols % 4 == 0 (the vector
// path's % 8 holds).
__device__ __forceinline__ void gemv_norm_add(float4& v, const __nv_bfloat16* d, int64_t i) {
  if (d) rs::cuda::add_bf16x4(v, reinterpret_cast<const uint2*>(d)[i]);
}
__device__ __forceinline__ float4 gemv_norm_row_chunk(const DenseGemvParams& p, int64_t off4, int64_t c) {
  float4 v = reinterpret_cast<const float4*>(p.norm_residual)[off4 + c];
  gemv_norm_add(v, p.norm_delta[0], off4 + c);
  gemv_norm_add(v, p.norm_delta[1], off4 + c);
  gemv_norm_add(v, p.norm_delta[2], off4 + c);
  return v;
}
// Returns the ticket (held by thread gemv_norm_ticket_thread(threads)); the caller hands it to
// gemv_norm_epilogue after the products, so the atomic's round trip overlaps the weight stream
// instead of delaying its start. `threads`: the first `threads` threads do the arithmetic (256,
// add_rmsnorm_row's count, so the per-thread partial sums are the same); the others (the
// weight-streaming GEMV's producer warp) only take part in the barriers and add 0 to the block
// sum, which leaves it bit-identical. Where there are such threads, the first of them takes the
// ticket: its fence and atomic then hold up no warp that computes (H200 wait probe: the streamed
// q/kv GEMV's inputs were ready ~5 us after its release, its first warp behind the ticket).
// The first kNormRegs chunks of each thread stay in registers between the two passes, the norm
// weight's with them: one round trip to L2, not three. Not in the decode megakernel, whose
// registers are full (its stack frame grew from 1200 to 1584 bytes with them).
#ifdef RS_MEGAKERNEL_TU
constexpr int kNormRegs = 0;
#else
constexpr int kNormRegs = 4;
#endif
// One token's summed row chunks (the first kNormRegs of each thread), kept in registers from the
// prologue to the epilogue: the last block then writes the residual back from them instead of
// reading it and the deltas from L2 again, a trip that sat at the launch's very end.
struct GemvNormKeep {
  float4 v[kNormRegs > 0 ? kNormRegs : 1];
};
__device__ __forceinline__ int gemv_norm_ticket_thread(const DenseGemvParams& p, int threads) {
  return threads < static_cast<int>(blockDim.x) && !p.norm_ticket_thread0 ? threads : 0;
}
__device__ __forceinline__ unsigned gemv_norm_prologue(const DenseGemvParams& p, __nv_bfloat16* xs, int threads,
                                                       GemvNormKeep* keep = nullptr) {
  __shared__ float scratch[32];
  const int64_t cols = p.w[0].cols, chunks = cols / 4;
  const float4* wt = reinterpret_cast<const float4*>(p.norm_weight);
  const int64_t tid = threadIdx.x < threads ? threadIdx.x : chunks;  // idle threads: no chunk
  for (int t = 0; t < p.m; ++t) {
    const int64_t off4 = t * chunks;
    float ss = 0.f;
    float4 v[kNormRegs > 0 ? kNormRegs : 1], w[kNormRegs > 0 ? kNormRegs : 1];
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t c = tid + static_cast<int64_t>(k) * threads;
      if (c < chunks) {
        v[k] = gemv_norm_row_chunk(p, off4, c);
        w[k] = wt[c];
      }
    }
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k)  // the same order of additions as one loop over c
      if (tid + static_cast<int64_t>(k) * threads < chunks)
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    for (int64_t c = tid + static_cast<int64_t>(kNormRegs) * threads; c < chunks; c += threads) {
      const float4 u = gemv_norm_row_chunk(p, off4, c);
      ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
    }
    const float inv = rsqrtf(rs::cuda::block_sum(ss, scratch) / cols + p.norm_eps);
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t c = tid + static_cast<int64_t>(k) * threads;
      if (c < chunks) reinterpret_cast<uint2*>(xs)[off4 + c] = rs::cuda::rmsnorm_bf16x4(v[k], inv, w[k]);
      if (keep && t == 0) keep->v[k] = v[k];
    }
    for (int64_t c = tid + static_cast<int64_t>(kNormRegs) * threads; c < chunks; c += threads)
      reinterpret_cast<uint2*>(xs)[off4 + c] = rs::cuda::rmsnorm_bf16x4(gemv_norm_row_chunk(p, off4, c), inv, wt[c]);
  }
  __syncthreads();  // every read of the old residual is done; xs is complete
  unsigned ticket = 0;
  if (static_cast<int>(threadIdx.x) == gemv_norm_ticket_thread(p, threads)) {
    __threadfence();
    ticket = atomicAdd(p.norm_counter, 1u);
  }
  return ticket;
}
// blocks: how many blocks took a ticket (the grid, or the decode megakernel's CTAs); threads: the
// prologue's.
// keep: the prologue's, where it was given one.
__device__ __forceinline__ void gemv_norm_epilogue(const DenseGemvParams& p, const __nv_bfloat16* xs,
                                                   unsigned ticket, unsigned blocks = gridDim.x,
                                                   int threads = blockDim.x, const GemvNormKeep* keep = nullptr) {
  __shared__ unsigned last;
  if (static_cast<int>(threadIdx.x) == gemv_norm_ticket_thread(p, threads)) last = ticket == blocks - 1;
  __syncthreads();
  if (!last) return;
  const int64_t chunks = p.w[0].cols / 4;
  if (keep && p.m == 1 && chunks <= int64_t(kNormRegs) * threads) {
    if (static_cast<int>(threadIdx.x) < threads) {
#pragma unroll
      for (int k = 0; k < kNormRegs; ++k) {
        const int64_t c = threadIdx.x + static_cast<int64_t>(k) * threads;
        if (c < chunks) {
          reinterpret_cast<float4*>(p.norm_residual)[c] = keep->v[k];
          reinterpret_cast<uint2*>(p.norm_out)[c] = reinterpret_cast<const uint2*>(xs)[c];
        }
      }
    }
    if (threadIdx.x == 0) *p.norm_counter = 0u;
    return;
  }
  for (int t = 0; t < p.m; ++t) {
    const int64_t off4 = t * chunks;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      reinterpret_cast<float4*>(p.norm_residual)[off4 + c] = gemv_norm_row_chunk(p, off4, c);
      reinterpret_cast<uint2*>(p.norm_out)[off4 + c] = reinterpret_cast<const uint2*>(xs)[off4 + c];
    }
  }
  if (threadIdx.x == 0) *p.norm_counter = 0u;  // the next launch starts from zero
}

// y_j[t, row] for every job j and t < m (OutT: bf16, or fp32 for logits). A work item is one
// row group (RPW rows of one job) and one of ks width slices. ks == 1: each warp takes a
// contiguous, balanced share of the row groups (shares differ by at most one group), so a grid
// of exactly the resident blocks streams every SM's share without a second, partly empty wave.
// ks > 1: the ks slices of a row group sit in one block and meet in shared memory; blocks take
// balanced contiguous shares of block groups (8/ks row groups each), uniform inside a block so
// the barriers are safe. With kPdl the warp first asks L2 for its first rows (prefetch: no
// registers, nothing to wait for), then waits for the predecessor grid, then loads for real: the
// weight traffic of this kernel overlaps the tail of the previous one. (A real load before
// griddepcontrol.wait was measured slower: the wait held the warp until its loads had landed.)
// kNorm: the norm prologue above first, x from shared memory `xs` ([m][cols] bf16).
// wg: this block's place among the blocks sharing the work (the launch grid for a kernel of its
// own, the CTAs of the decode megakernel there).
template <bool kFp8, int RPW, int MT, int U, bool kPdl, class OutT, bool kNorm = false>
__device__ __forceinline__ void gemv_dense_op(const DenseGemvParams& p,
                                              float* red /* smem [kGemvWarps][RPW*MT] */,
                                              __nv_bfloat16* xs = nullptr, WorkGrid wg = launch_work_grid()) {
  constexpr int E = chunk_elems<kFp8>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int ks = p.ks;
  const int groups_per_block = kGemvWarps / ks;
  const int slice = warp % ks;
  const int64_t cols = p.w[0].cols;
  const int64_t nchunks = cols / E;
  const int64_t per_slice = ((nchunks + ks - 1) / ks + 31) / 32 * 32;
  const int64_t c_begin = slice * per_slice;
  const int64_t c_end = c_begin + per_slice < nchunks ? c_begin + per_slice : nchunks;
  const int64_t groups = p.group_end[p.jobs - 1];
  int64_t i_begin, i_end;  // items: row groups (ks == 1) or block groups (ks > 1)
  if (ks == 1) {
    const int64_t nw = static_cast<int64_t>(wg.count) * kGemvWarps;
    const int64_t gw = static_cast<int64_t>(wg.index) * kGemvWarps + warp;
    i_begin = gw * groups / nw;
    i_end = (gw + 1) * groups / nw;
  } else {
    const int64_t bgs = (groups + groups_per_block - 1) / groups_per_block;
    i_begin = static_cast<int64_t>(wg.index) * bgs / wg.count;
    i_end = static_cast<int64_t>(wg.index + 1) * bgs / wg.count;
  }
  auto group_of = [&](int64_t i) { return ks == 1 ? i : i * groups_per_block + warp / ks; };
  if constexpr (kPdl) {
    pdl_launch_dependents();
    const int64_t g = group_of(i_begin);
    if (i_begin < i_end && g < groups) {
      const GemvJobView j = gemv_job_of(p, g);
#pragma unroll
      for (int r = 0; r < RPW; ++r)
        prefetch_weight_row<U>(weight_row(j.w, (g - j.first_group) * RPW + r, kFp8), c_begin, c_end);
    }
    pdl_wait();
  }
  [[maybe_unused]] unsigned ticket = 0;
  if constexpr (kNorm) ticket = gemv_norm_prologue(p, xs, static_cast<int>(blockDim.x));
  for (int64_t i = i_begin; i < i_end; ++i) {
    const int64_t g = group_of(i);
    const GemvJobView j = gemv_job_of(p, g < groups ? g : groups - 1);
    const int64_t row0 = (g - j.first_group) * RPW;
    WeightRow rows[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) rows[r] = g < groups ? weight_row(j.w, row0 + r, kFp8) : WeightRow{};
    OutT* y = static_cast<OutT*>(j.y);
    for (int t0 = 0; t0 < p.m; t0 += MT) {
      const __nv_bfloat16* xr[1][MT];
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const int64_t xrow = t0 + t < p.m ? (p.x_rows ? p.x_rows[t0 + t] : t0 + t) : -1;
        xr[0][t] = xrow < 0 ? nullptr : kNorm ? xs + xrow * cols : p.x + xrow * cols;
      }
      float part[RPW][MT];
      gemv_warp_partial<kFp8, RPW, MT, U, false, kNorm>(rows, xr, c_begin, c_end, j.w.block_cols, part);
#pragma unroll
      for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int t = 0; t < MT; ++t) part[r][t] = warp_sum(part[r][t]);
      if (ks > 1) {
        if (lane == 0)
#pragma unroll
          for (int k = 0; k < RPW * MT; ++k) red[warp * RPW * MT + k] = part[k / MT][k % MT];
        __syncthreads();
        if (slice == 0)
#pragma unroll
          for (int k = 0; k < RPW * MT; ++k) {
            float v = 0.f;
            for (int s = 0; s < ks; ++s) v += red[(warp + s) * RPW * MT + k];  // fixed order
            part[k / MT][k % MT] = v;
          }
        __syncthreads();
      }
      if (slice != 0 || g >= groups) continue;
#pragma unroll
      for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const int64_t row = row0 + r;
          if (lane == ((r * MT + t) & 31) && row < j.w.rows && t0 + t < p.m)
            gemv_store(y, (int64_t)(t0 + t) * j.w.rows + row, part[r][t]);
        }
    }
  }
  if constexpr (kNorm) gemv_norm_epilogue(p, xs, ticket, wg.count);
}

// Any shape, any alignment: one warp per (row, token), element by element. Only for matrices
// whose width is not a multiple of the 16-byte chunk (no real checkpoint has one).
__device__ __forceinline__ float load_weight(const rs::cuda::DeviceMatrix& w, int64_t row,
                                             int64_t col) {
  const int64_t i = row * w.cols + col;
  if (w.type == rs::cuda::WeightType::BF16)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(w.data)[i]);
  const uint8_t b = static_cast<const uint8_t*>(w.data)[i];
  const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
  return e4m3x2_to_float2(b).x * w.scale_inv[(row / w.block_rows) * scale_cols + col / w.block_cols];
}

__device__ __forceinline__ void gemv_scalar_op(const rs::cuda::DeviceMatrix& w,
                                               const __nv_bfloat16* x, int m, __nv_bfloat16* y) {
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t nwarps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t item = warp; item < w.rows * m; item += nwarps) {
    const int64_t row = item % w.rows, t = item / w.rows;
    float acc = 0.f;
    for (int64_t c = lane; c < w.cols; c += 32)
      acc = fmaf(load_weight(w, row, c), __bfloat162float(x[t * w.cols + c]), acc);
    acc = warp_sum(acc);
    if (lane == 0) y[t * w.rows + row] = __float2bfloat16_rn(acc);
  }
}

}  // namespace rs::kern
