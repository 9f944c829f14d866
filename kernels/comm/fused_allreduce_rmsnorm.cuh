#pragma once
// All-reduce + residual add + RMSNorm in one pass, as device ops: the form every
// tensor-parallel decode layer ends with. Built on the one-shot Lamport exchange. Three ops:
//   decode     a few rows (batch-1 decode): every CTA computes each row's sum of squares from the
//              whole row and writes only its own chunk, so no CTA waits for another;
//   whole-row  rows (tokens) dealt to CTAs, one row per CTA at a time, so the norm's sum of
//              squares is a block reduction with no cross-CTA step (rows up to 1024 vectors);
//   cluster    a row split over the CTAs of a thread block cluster, the sum of squares combined
//              through DSMEM (wider rows, where one CTA would hold 4 vectors per thread).
// Each thread owns the same few vectors of every row it takes, so it loads its gamma vectors
// once, before griddepcontrol.wait (they do not depend on the previous kernel): the PDL prologue.
#include <cooperative_groups.h>

#include "kernels/comm/lamport_common.cuh"

namespace rs::comm {

__host__ __device__ inline uint32_t fused_row_vecs(uint32_t hidden, int lanes) {
  return hidden / lanes;
}

struct FusedGammaWholeRow {
  uint4 v[kFusedMaxVecsPerThread];
};

// Only the kVecs vectors a thread will use: the others would hold registers for nothing.
template <class E, int kVecs = kFusedMaxVecsPerThread>
__device__ __forceinline__ FusedGammaWholeRow fused_load_gamma_whole_row(const FusedArNormParams& p) {
  FusedGammaWholeRow g;
  const uint32_t row_vecs = fused_row_vecs(p.hidden, E::kLanes);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const uint32_t v = threadIdx.x + j * blockDim.x;
    g.v[j] = v < row_vecs ? reinterpret_cast<const uint4*>(p.gamma)[v] : make_uint4(0, 0, 0, 0);
  }
  return g;
}

__device__ __forceinline__ float fused_block_sum(float x, float* scratch /* 32 floats */) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = (blockDim.x + 31) >> 5;
  __syncthreads();  // scratch may still be read by the previous row's reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float total = 0.f;  // fixed order: the same bits on every rank and every CTA
  for (int w = 0; w < nwarps; ++w) total += scratch[w];
  return total;
}

// Step 1 of both ops: push this rank's partials into slot `rank` of every peer. Pushing depends
// on nothing, so every CTA pushes an equal contiguous slice of the whole message, whoever reduces
// those rows: one row's 14 KB then leaves through 32 SMs instead of one.
template <class E>
__device__ __forceinline__ void fused_push(const FusedArNormParams& p, uint32_t buffer, uint32_t row_vecs, int cta,
                                           int ctas) {
  const LamportView& ws = p.ws;
  const auto* x = reinterpret_cast<const uint4*>(p.x);
  const uint64_t total = static_cast<uint64_t>(p.rows) * row_vecs;
  const uint64_t slice = (total + ctas - 1) / ctas;
  const uint64_t slice_end = min(total, static_cast<uint64_t>(cta + 1) * slice);
  for (uint64_t v = static_cast<uint64_t>(cta) * slice + threadIdx.x; v < slice_end; v += blockDim.x) {
    const uint4 own = canonical<E>(x[v]);
    for (int i = 0; i < ws.nranks; ++i) {
      const int peer = ws.write_order[i];
      if (peer != ws.rank) st_volatile(ws.region(peer, buffer, ws.rank) + v, own);
    }
  }
}

// Step 2's reduction for one row: this thread's vectors are row_base + col0 + j * blockDim.x
// where mine[j]. All polls of the row, for every owned vector and a batch of slots, are issued
// before the first wait, so one link latency covers them all; the additions stay in rank order
// per element, then the residual is added and rounded (h, also written to residual_out). Returns
// this thread's sum of squares of the rounded values.
template <class E, int kVecs>
__device__ __forceinline__ float fused_reduce_row(const FusedArNormParams& p, uint32_t buffer, uint64_t row_base,
                                                  uint32_t col0, const bool (&mine)[kVecs], uint4 (&h)[kVecs]) {
  // Slots polled at once per vector: kVecs x kBatch polls in flight; 4 in all keeps the 2-vector
  // bf16 instance (hidden 7168) free of spills.
  constexpr int kBatch = 4 / kVecs > 0 ? 4 / kVecs : 1;
  const LamportView& ws = p.ws;
  const auto* x = reinterpret_cast<const uint4*>(p.x);
  float acc[kVecs][E::kLanes];
  uint4 own[kVecs], res[kVecs];  // loaded before the polls: their latency hides under the wait
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    if (mine[j]) {
      const uint64_t v = row_base + col0 + j * blockDim.x;
      own[j] = canonical<E>(x[v]);
      res[j] = reinterpret_cast<const uint4*>(p.residual)[v];
    }
#pragma unroll
    for (int l = 0; l < E::kLanes; ++l) acc[j][l] = 0.f;
  }
  for (int s0 = 0; s0 < ws.nranks; s0 += kBatch) {
    uint4 polled[kVecs][kBatch];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const uint64_t v = row_base + col0 + j * blockDim.x;
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int s = s0 + i;
        if (mine[j] && s < ws.nranks && s != ws.rank) polled[j][i] = ld_volatile(ws.region(ws.rank, buffer, s) + v);
      }
    }
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!mine[j]) continue;
      const uint64_t v = row_base + col0 + j * blockDim.x;
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int s = s0 + i;
        if (s >= ws.nranks) break;
        const uint4 w = s == ws.rank
                            ? own[j]
                            : wait_ready<E>(ws.region(ws.rank, buffer, s) + v, polled[j][i], ws.timeout_ns,
                                            WaitSite{"fused all-reduce+rmsnorm", ws.rank, buffer,
                                                     static_cast<uint32_t>(s), v, &ws.state->reported});
        float f[E::kLanes];
        E::to_float(w, f);
#pragma unroll
        for (int l = 0; l < E::kLanes; ++l) acc[j][l] += f[l];
      }
    }
  }
  float sumsq = 0.f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    if (!mine[j]) continue;
    const uint64_t v = row_base + col0 + j * blockDim.x;
    float r[E::kLanes];
    E::to_float(res[j], r);
#pragma unroll
    for (int l = 0; l < E::kLanes; ++l) acc[j][l] += r[l];
    h[j] = E::from_float(acc[j]);
    reinterpret_cast<uint4*>(p.residual_out)[v] = h[j];
    float hf[E::kLanes];
    E::to_float(h[j], hf);
#pragma unroll
    for (int l = 0; l < E::kLanes; ++l) sumsq += hf[l] * hf[l];
  }
  return sumsq;
}

// Step 2's norm: normed = h * scale * gamma for this thread's vectors.
template <class E, int kVecs>
__device__ __forceinline__ void fused_write_normed(const FusedArNormParams& p, const uint4* gamma, uint64_t row_base,
                                                   uint32_t col0, const bool (&mine)[kVecs],
                                                   const uint4 (&h)[kVecs], float scale) {
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    if (!mine[j]) continue;
    float g[E::kLanes], o[E::kLanes];
    E::to_float(gamma[j], g);
    E::to_float(h[j], o);
#pragma unroll
    for (int l = 0; l < E::kLanes; ++l) o[l] = o[l] * scale * g[l];
    reinterpret_cast<uint4*>(p.normed)[row_base + col0 + j * blockDim.x] = E::from_float(o);
  }
}

// Each thread owns kVecs vectors of every row it takes (vector c = threadIdx.x + j * blockDim.x).
template <class E, int kVecs>
__device__ void fused_allreduce_rmsnorm_whole_row_op(const FusedArNormParams& p, const FusedGammaWholeRow& gamma,
                                           uint32_t buffer, int cta, int ctas) {
  __shared__ float scratch[32];
  const uint32_t row_vecs = fused_row_vecs(p.hidden, E::kLanes);
  fused_push<E>(p, buffer, row_vecs, cta, ctas);
  rearm_previous<E>(p.ws, buffer, cta, ctas);

  // 2. Per row: reduce in rank order, add the residual, round, norm.
  for (uint32_t row = cta; row < p.rows; row += ctas) {
    const uint64_t row_base = static_cast<uint64_t>(row) * row_vecs;
    bool mine[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) mine[j] = threadIdx.x + j * blockDim.x < row_vecs;
    uint4 h[kVecs];  // residual_out as rounded: what the norm reads
    const float sumsq = fused_reduce_row<E, kVecs>(p, buffer, row_base, threadIdx.x, mine, h);
    const float total = fused_block_sum(sumsq, scratch);
    const float scale = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);
    fused_write_normed<E, kVecs>(p, gamma.v, row_base, threadIdx.x, mine, h, scale);
  }
}

// ---- decode: a few rows, every CTA computes each row's norm from the whole row ------------
// The form for decode-sized calls (one row per token, batch 1). A one-CTA row puts the whole
// epilogue on one SM: all its element work and its 28 KB of output stores; splitting the row over
// CTAs needs their partial sums of squares combined, a cross-CTA step measured at more than it
// saves (docs/perf/comm.md). Here the row's peer data, own partial and residual sit in L2, so
// every CTA reads the *whole* row and computes the same sum of squares itself (the same threads,
// order and bits in every CTA and on every rank), then normalises and stores only its own column
// chunk [cta * chunk_vecs, +chunk_vecs): no CTA ever waits for another. Each CTA pushes the chunk
// it owns and re-arms a share of the previous buffer. Measured best on 2 CTAs (7168 bf16: 3.30-3.33
// us; 1 CTA 3.73, 4 CTAs 3.62-3.69, 8 CTAs 3.77-3.79: each extra CTA polls the whole row again).
// The op reads and advances the rotation state itself (LamportState::next_buffer[cta]), so a
// megakernel calls it after griddepcontrol.wait with the workspace's fixed CTA count.
//
// Thread t holds vectors t + j * blockDim.x (j < kVecs) of the row; chunk_vecs is a multiple of 32
// (a warp is wholly in or out of a chunk), set by the host. A CTA whose chunk is empty only
// re-arms. In-place residual (residual_out == residual) needs chunk_vecs >= the row: another CTA
// still reading residual could otherwise see a value this CTA already replaced, so the host then
// gives the whole row to CTA 0.
//
// Every load this op depends on is issued at once after griddepcontrol.wait (rotation state,
// own partial, residual), so the push waits for one memory latency, not two in series; the state
// advance is stored after the first block barrier (every thread of the CTA has read it by then)
// so no barrier is added at the end.
template <class E, int kVecs>
struct FusedDecodeGamma {
  float g[kVecs][E::kLanes];  // gamma of the owned vectors, as floats (zero elsewhere)
};

__device__ __forceinline__ uint32_t fused_decode_chunk_lo(const FusedArNormParams& p, int cta) {
  return static_cast<uint32_t>(cta) * p.chunk_vecs;
}

template <class E, int kVecs>
__device__ __forceinline__ bool fused_decode_owns(const FusedArNormParams& p, int cta, int j) {
  const uint32_t row_vecs = fused_row_vecs(p.hidden, E::kLanes);
  const uint32_t v = threadIdx.x + j * blockDim.x, lo = fused_decode_chunk_lo(p, cta);
  return v < row_vecs && v >= lo && v - lo < p.chunk_vecs;
}

// The PDL prologue: gamma is a weight, independent of the previous kernel.
template <class E, int kVecs>
__device__ __forceinline__ FusedDecodeGamma<E, kVecs> fused_decode_load_gamma(const FusedArNormParams& p, int cta) {
  FusedDecodeGamma<E, kVecs> g;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const uint4 w = fused_decode_owns<E, kVecs>(p, cta, j)
                        ? reinterpret_cast<const uint4*>(p.gamma)[threadIdx.x + j * blockDim.x]
                        : make_uint4(0, 0, 0, 0);
    E::to_float(w, g.g[j]);
  }
  return g;
}

// Sum over the block, the same bits in every thread: xor butterflies give every lane the same
// value (each step adds the same two numbers, a + b == b + a), one exchange through shared
// memory, then the same butterfly over the warp partials in every warp. One barrier; the slot
// set alternates by `parity`, since a warp may write the next row's partial before a slower warp
// has read this row's (it cannot be two rows ahead: the next row's barrier lies between).
__device__ __forceinline__ float fused_block_sum_once(float x, float (*scratch)[32], uint32_t parity) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[parity][warp] = x;
  __syncthreads();
  float y = lane < nwarps ? scratch[parity][lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
  return y;
}

template <class E, int kVecs>
__device__ void fused_allreduce_rmsnorm_decode_op(const FusedArNormParams& p, const FusedDecodeGamma<E, kVecs>& gamma,
                                                  int cta, int ctas) {
  __shared__ float scratch[2][32];
  const LamportView& ws = p.ws;
  LamportState* const st = ws.state;
  const uint32_t row_vecs = fused_row_vecs(p.hidden, E::kLanes);
  const bool any_owned = fused_decode_chunk_lo(p, cta) < row_vecs;
  const auto* x = reinterpret_cast<const uint4*>(p.x);
  const auto* residual = reinterpret_cast<const uint4*>(p.residual);

  // Rotation state, and the first row's own partial and residual, all in flight together.
  const uint32_t buffer = st->next_buffer[cta];
  const uint4 dirty4 = *reinterpret_cast<const uint4*>(st->dirty_vecs);  // dirty_vecs[0..2], reported
  uint4 own[kVecs], res[kVecs];
  bool active[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const uint32_t v = threadIdx.x + j * blockDim.x;
    active[j] = any_owned && v < row_vecs;
    own[j] = active[j] ? x[v] : make_uint4(0, 0, 0, 0);
    res[j] = active[j] ? residual[v] : make_uint4(0, 0, 0, 0);
  }
  const uint32_t prev = previous_buffer(buffer);
  const uint32_t dirty = prev == 0 ? dirty4.x : prev == 1 ? dirty4.y : dirty4.z;

  // 1. Push the owned chunk of every row into slot `rank` of every peer, before any wait (so no
  // wait closes a cycle between CTAs or ranks); row 0's own partial is already in registers.
  const auto push = [&](uint64_t v, const uint4& data) {
    const uint4 c = canonical<E>(data);
    for (int i = 0; i < ws.nranks; ++i) {
      const int peer = ws.write_order[i];
      if (peer != ws.rank) st_volatile(ws.region(peer, buffer, ws.rank) + v, c);
    }
  };
#pragma unroll
  for (int j = 0; j < kVecs; ++j)
    if (fused_decode_owns<E, kVecs>(p, cta, j)) push(threadIdx.x + j * blockDim.x, own[j]);
  for (uint32_t row = 1; row < p.rows; ++row) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!fused_decode_owns<E, kVecs>(p, cta, j)) continue;
      const uint64_t v = static_cast<uint64_t>(row) * row_vecs + threadIdx.x + j * blockDim.x;
      push(v, x[v]);
    }
  }
  // 2. While the pushes travel: re-arm this CTA's share of the previous buffer. Only the peers'
  // slots: nobody writes a rank's own slot of its own buffer, so it stays armed.
  {
    const uint4 s = sentinel_vec<E>();
    const uint32_t stride = static_cast<uint32_t>(ctas) * blockDim.x;
    for (int slot = 0; slot < ws.nranks; ++slot) {
      if (slot == ws.rank) continue;
      uint4* r = ws.region(ws.rank, prev, static_cast<uint32_t>(slot));
      for (uint32_t i = static_cast<uint32_t>(cta) * blockDim.x + threadIdx.x; i < dirty; i += stride) r[i] = s;
    }
  }

  uint32_t parity = 0;
  for (uint32_t row = 0; any_owned && row < p.rows; ++row) {  // any_owned is uniform over the CTA
    const uint64_t row_base = static_cast<uint64_t>(row) * row_vecs;
    if (row > 0) {
#pragma unroll
      for (int j = 0; j < kVecs; ++j)
        if (active[j]) {
          own[j] = x[row_base + threadIdx.x + j * blockDim.x];
          res[j] = residual[row_base + threadIdx.x + j * blockDim.x];
        }
    }

    // 3. Poll every peer slot of the whole row and sum in slot order; the own partial is taken
    // raw: adding a -0.0 among terms that include a canonical peer value gives the same bits as
    // adding +0.0 (x + -0.0 == x, and -0.0 + y == +0.0 + y for y != -0.0). All of a thread's polls
    // are in flight together; spinning first on the owned chunk and reading the rest after it
    // (one spinning CTA a line) measured 0.9 us slower (docs/perf/comm.md).
    uint32_t vec[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) vec[j] = static_cast<uint32_t>(row_base) + threadIdx.x + j * blockDim.x;
    float acc[kVecs][E::kLanes];
    reduce_slots_multi<E, kVecs>(ws, buffer, vec, active, own, ws.nranks, ws.rank, "fused all-reduce+rmsnorm (decode)",
                                 acc);

    // 4. h = round(sum + residual); the norm reads h as rounded. Stores of residual_out go out
    // now, under the block reduction, for the owned chunk only.
    float hf[kVecs][E::kLanes];
    float sumsq = 0.f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!active[j]) {
#pragma unroll
        for (int l = 0; l < E::kLanes; ++l) hf[j][l] = 0.f;
        continue;
      }
      float r[E::kLanes];
      E::to_float(res[j], r);
#pragma unroll
      for (int l = 0; l < E::kLanes; ++l) acc[j][l] += r[l];
      const uint4 h = E::from_float(acc[j]);
      E::to_float(h, hf[j]);
#pragma unroll
      for (int l = 0; l < E::kLanes; ++l) sumsq += hf[j][l] * hf[j][l];
      if (fused_decode_owns<E, kVecs>(p, cta, j))
        reinterpret_cast<uint4*>(p.residual_out)[row_base + threadIdx.x + j * blockDim.x] = h;
    }
    const float total = fused_block_sum_once(sumsq, scratch, parity);
    parity ^= 1u;
    if (row == 0 && threadIdx.x == 0) {  // past the barrier: every thread has read the state
      st->next_buffer[cta] = (buffer + 1) % kLamportBuffers;
      if (cta == 0) st->dirty_vecs[buffer] = p.rows * row_vecs;
    }
    const float scale = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);

    // 5. normed = h * scale * gamma, the owned chunk.
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!fused_decode_owns<E, kVecs>(p, cta, j)) continue;
      float o[E::kLanes];
#pragma unroll
      for (int l = 0; l < E::kLanes; ++l) o[l] = hf[j][l] * scale * gamma.g[j][l];
      reinterpret_cast<uint4*>(p.normed)[row_base + threadIdx.x + j * blockDim.x] = E::from_float(o);
    }
  }
  if (!any_owned) {  // a CTA with no chunk still advances its rotation state
    __syncthreads();
    if (threadIdx.x == 0) st->next_buffer[cta] = (buffer + 1) % kLamportBuffers;
  }
}

// ---- a row split over a thread block cluster: rows wider than 1024 vectors ---------------
// Measured on 2x H200 (docs/perf/comm.md, 2026-11-30): for a 7168-wide bf16 row (896 vectors)
// splitting the row over 4 or 8 CTAs is slower than one CTA (4.24 / 4.43 us vs 3.80 us), with
// either way of combining the sum of squares (cluster DSMEM or a flag-free exchange through the
// workspace, 4.43 vs 4.44 us); one CTA loses only once a row needs more than 2 vectors per
// thread (7168 fp32: 4.22 us split over 8 CTAs vs 4.86 us in one CTA). So the host uses this op
// for rows wider than 1024 vectors and the whole-row op above otherwise.
//
// A cluster of `span` CTAs (the launch's cluster size, a power of two <= 8) shares a row, one
// chunk of p.chunk_vecs vectors each; CTAs past the last chunk hold nothing but take part in the
// combination. Each CTA publishes its chunk's partial sum of squares in shared memory; after the
// cluster barrier (arrive.release / wait.acquire) every thread reads all of them through DSMEM
// and adds them in cluster-rank order, so every CTA and every rank gets the same bits. Cluster c
// takes rows c, c + clusters, ...; all CTAs of a cluster walk the same rows, and every CTA pushes
// its share of the message before any wait, so no wait closes a cycle.
//
// Megakernel callers: launch with a cluster dimension of `span` along x (grid a multiple of it);
// the op reads the cluster size from the hardware.
struct FusedSplit {
  uint32_t row_vecs, chunk_vecs, span, groups, chunk, group;
  __device__ bool active() const { return group < groups; }
  // Vector `local` of this CTA's chunk exists.
  __device__ bool owns(uint32_t local) const { return local < chunk_vecs && chunk * chunk_vecs + local < row_vecs; }
};

template <class E>
__device__ __forceinline__ FusedSplit fused_split(const FusedArNormParams& p, int cta, int ctas) {
  FusedSplit s;
  s.row_vecs = fused_row_vecs(p.hidden, E::kLanes);
  s.chunk_vecs = p.chunk_vecs;
  s.span = cooperative_groups::this_cluster().num_blocks();
  s.groups = static_cast<uint32_t>(ctas) / s.span;
  s.chunk = static_cast<uint32_t>(cta) % s.span;
  s.group = static_cast<uint32_t>(cta) / s.span;
  return s;
}

template <int kVecs>
struct FusedGamma {
  uint4 v[kVecs];
};

// A CTA's chunk is the same in every row it takes, so its gamma vectors are loaded once, before
// griddepcontrol.wait (weights do not depend on the previous kernel): the PDL prologue.
template <class E, int kVecs>
__device__ __forceinline__ FusedGamma<kVecs> fused_load_gamma_cluster(const FusedArNormParams& p, int cta, int ctas) {
  const FusedSplit s = fused_split<E>(p, cta, ctas);
  FusedGamma<kVecs> g;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const uint32_t local = threadIdx.x + j * blockDim.x;
    g.v[j] = s.active() && s.owns(local) ? reinterpret_cast<const uint4*>(p.gamma)[s.chunk * s.chunk_vecs + local]
                                         : make_uint4(0, 0, 0, 0);
  }
  return g;
}

// Each thread owns kVecs vectors of its CTA's chunk (column c = chunk * chunk_vecs + threadIdx.x
// + j * blockDim.x). The push, the re-arm and the per-row reduction are those of the whole-row op.
template <class E, int kVecs>
__device__ void fused_allreduce_rmsnorm_cluster_op(const FusedArNormParams& p, const FusedGamma<kVecs>& gamma,
                                                   uint32_t buffer, int cta, int ctas) {
  __shared__ float scratch[32];
  __shared__ float s_cluster_partial[2];  // by row parity: a row's slot is rewritten two rows later
  const LamportView& ws = p.ws;
  const FusedSplit sp = fused_split<E>(p, cta, ctas);

  fused_push<E>(p, buffer, sp.row_vecs, cta, ctas);

  rearm_previous<E>(ws, buffer, cta, ctas);
  if (!sp.active()) return;

  const uint32_t col0 = sp.chunk * sp.chunk_vecs + threadIdx.x;
  uint32_t parity = 0;

  // 2. Per row: reduce the chunk in rank order, add the residual, round, norm.
  for (uint32_t row = sp.group; row < p.rows; row += sp.groups) {
    const uint64_t row_base = static_cast<uint64_t>(row) * sp.row_vecs;
    bool mine[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) mine[j] = sp.owns(threadIdx.x + j * blockDim.x);
    uint4 h[kVecs];  // residual_out as rounded: what the norm reads
    const float sumsq = fused_reduce_row<E, kVecs>(p, buffer, row_base, col0, mine, h);
    float row_sumsq = fused_block_sum(sumsq, scratch);
    if (sp.span > 1) {
      auto cluster = cooperative_groups::this_cluster();
      if (threadIdx.x == 0) s_cluster_partial[parity] = row_sumsq;
      cluster.sync();
      float sum = 0.f;
      for (uint32_t r = 0; r < sp.span; ++r) sum += *cluster.map_shared_rank(&s_cluster_partial[parity], r);
      row_sumsq = sum;
      parity ^= 1u;
    }
    const float scale = rsqrtf(row_sumsq / static_cast<float>(p.hidden) + p.eps);
    fused_write_normed<E, kVecs>(p, gamma.v, row_base, col0, mine, h, scale);
  }
  // No CTA may leave (its shared memory goes away) while a cluster peer may still read its last
  // partial. Every CTA of a cluster walks the same rows, so all of them arrive here.
  if (sp.span > 1 && sp.group < p.rows) cooperative_groups::this_cluster().sync();
}

}  // namespace rs::comm
