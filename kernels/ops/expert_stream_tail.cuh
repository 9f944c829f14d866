#pragma once
// The tail of the one-token FFN launch (expert_stream_ffn.cuh with kTail): the next layer's input
// add + RMSNorm and its grouped q/kv GEMV (DenseGemvParams with the norm prologue, as
// linear_group would launch it), streamed through the FFN's ring after the down rows.
//
// Why: the q/kv GEMV's own launch could not start beside the FFN's 216 KB blocks, so its weights
// only began to move once the FFN had ended, and it paid its ramp and its launch on the step's
// critical path (H200, V2-Lite bf16, 2026-11-30: 10.0 us after the FFN for 15 MB). Its rows need
// nothing from the FFN, so the producer lane copies them into the ring as the down stages free
// it; after a second grid-wide wait (every block's down rows written) the consumers form the norm
// and reduce rows that are already in shared memory.
//
// Arithmetic: the streaming GEMV's (gemv_stream.cuh: stream_row_piece over whole rows, the
// warp's sum, lane 0's store) and its norm prologue's (gemv_norm_prologue: 256 threads take the
// float4 chunks, the same block sum with zeros from the other warps, the same ticket and
// epilogue), so the tail writes the bits the separate launch would. Only the barriers differ: the
// producer warp is streaming while the consumers run this, so they meet on named barrier 1.
#include "kernels/ops/expert_stream.cuh"
#include "kernels/ops/gemv_stream.cuh"

namespace rs::kern {

constexpr int kXsNormThreads = 256;  // the norm prologue's arithmetic threads (add_rmsnorm's count)

// The consumer warps only (the producer may be blocked on the ring): named barrier 1.
__device__ __forceinline__ void xs_consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kXsConsumerWarps * 32) : "memory");
}

// Producer lane: tail stage i = rows [r0, r0 + cnt) of the jobs' concatenated rows (one copy per
// job the stage touches), whole rows of row_bytes.
template <int S>
__device__ __forceinline__ void xs_issue_tail(const DenseGemvParams& t, const ExpertStreamGeom& g, uint8_t* smem,
                                              BulkRing<S>& ring, uint32_t i, const XsStage& st, uint64_t policy) {
  const int s = ring.stage(i);
  uint8_t* dst = smem + static_cast<size_t>(s) * g.stage_bytes;
  const uint32_t rb = g.tail_row_bytes;
  mbar_arrive_expect_tx(&ring.full[s], static_cast<uint32_t>(st.cnt) * rb);
  const int64_t end = st.r0 + st.cnt;
  for (int64_t a = st.r0; a < end;) {
    const GemvJobView j = gemv_job_of(t, a);
    const int64_t job_end = j.first_group + j.w.rows;
    const int64_t b = end < job_end ? end : job_end;
    bulk_copy_g2s(dst + (a - st.r0) * rb, static_cast<const uint8_t*>(j.w.data) + (a - j.first_group) * rb,
                  static_cast<uint32_t>(b - a) * rb, &ring.full[s], policy);
    a = b;
  }
}

// Chunks of 4 a norm thread holds in registers: the prologue's largest row (kGemvNormMaxElems).
constexpr int kXsNormChunks = static_cast<int>(kGemvNormMaxElems / 4 / kXsNormThreads);

// Consumer threads: xs = rmsnorm(residual + deltas) * weight (bf16, one row), gemv_norm_prologue's
// arithmetic with coherent loads (a delta, the FFN's output, was written by other blocks of this
// launch). The sums v stay in registers for the epilogue, and the norm weight comes in the same
// round of loads: one L2 round trip on the critical path where gemv_norm_prologue takes two and
// its epilogue a third. Returns thread 0's ticket for xs_tail_norm_epilogue.
__device__ __forceinline__ unsigned xs_tail_norm(const DenseGemvParams& t, __nv_bfloat16* xs,
                                                 float4 (&v)[kXsNormChunks]) {
  __shared__ float scratch[kXsConsumerWarps];
  const int64_t chunks = t.w[0].cols / 4;
  const float4* wt = reinterpret_cast<const float4*>(t.norm_weight);
  const int64_t tid = threadIdx.x < kXsNormThreads ? threadIdx.x : chunks;  // the others: no chunk
  float4 w[kXsNormChunks];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kXsNormChunks; ++k) {
    const int64_t c = tid + static_cast<int64_t>(k) * kXsNormThreads;
    if (c < chunks) {
      v[k] = gemv_norm_row_chunk<true>(t, 0, c);
      w[k] = __ldg(wt + c);
    }
  }
#pragma unroll
  for (int k = 0; k < kXsNormChunks; ++k)
    if (tid + static_cast<int64_t>(k) * kXsNormThreads < chunks)
      ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  // block_sum's order; warps past the eighth add zeros, which leaves the sum's bits unchanged.
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = ss;
  xs_consumer_sync();
  float total = 0.f;
  for (int i = 0; i < kXsConsumerWarps; ++i) total += scratch[i];
  const float inv = rsqrtf(total / t.w[0].cols + t.norm_eps);
#pragma unroll
  for (int k = 0; k < kXsNormChunks; ++k) {
    const int64_t c = tid + static_cast<int64_t>(k) * kXsNormThreads;
    if (c < chunks) reinterpret_cast<uint2*>(xs)[c] = rs::cuda::rmsnorm_bf16x4(v[k], inv, w[k]);
  }
  xs_consumer_sync();  // xs is complete; every read of the old residual is done
  unsigned ticket = 0;
  if (threadIdx.x == 0) {
    __threadfence();
    ticket = atomicAdd(t.norm_counter, 1u);
  }
  return ticket;
}

// The last block to take a ticket writes the new residual (v, from its norm threads' registers)
// and the normed x back and re-zeroes the counter (gemv_norm_epilogue, consumer threads).
__device__ __forceinline__ void xs_tail_norm_epilogue(const DenseGemvParams& t, const __nv_bfloat16* xs,
                                                      unsigned ticket, const float4 (&v)[kXsNormChunks]) {
  __shared__ unsigned last;
  if (threadIdx.x == 0) last = ticket == gridDim.x - 1;
  xs_consumer_sync();
  if (!last) return;
  const int64_t chunks = t.w[0].cols / 4;
  const int64_t tid = threadIdx.x < kXsNormThreads ? threadIdx.x : chunks;
#pragma unroll
  for (int k = 0; k < kXsNormChunks; ++k) {
    const int64_t c = tid + static_cast<int64_t>(k) * kXsNormThreads;
    if (c < chunks) {
      reinterpret_cast<float4*>(t.norm_residual)[c] = v[k];
      reinterpret_cast<uint2*>(t.norm_out)[c] = reinterpret_cast<const uint2*>(xs)[c];
    }
  }
  if (threadIdx.x == 0) *t.norm_counter = 0u;
}

// A consumer warp's rows of one landed tail stage: y_job[row] = W_job[row] . xs.
template <bool kFp8>
__device__ __forceinline__ void xs_tail_rows(const DenseGemvParams& t, const uint8_t* stage, const XsStage& st,
                                             int k0, const __nv_bfloat16* xs, uint32_t row_bytes) {
  const int lane = threadIdx.x & 31;
  const int64_t cols = t.w[0].cols;
  for (int q = xs_first_row(k0); q < st.cnt; q += kXsConsumerWarps) {
    const GemvJobView j = gemv_job_of(t, st.r0 + q);
    const int64_t row = st.r0 + q - j.first_group;
    const float* srow = nullptr;
    if constexpr (kFp8) {
      const int64_t scale_cols = (cols + j.w.block_cols - 1) / j.w.block_cols;
      srow = j.w.scale_inv + (row / j.w.block_rows) * scale_cols;
    }
    float acc[1] = {0.f};
    stream_row_piece<kFp8, 1>(stage + static_cast<size_t>(q) * row_bytes, xs, cols, 1, 0u, row_bytes, srow,
                              j.w.block_cols, acc);
    const float v = warp_sum(acc[0]);
    if (lane == 0) gemv_store(static_cast<__nv_bfloat16*>(j.y), row, v);
  }
}

}  // namespace rs::kern
