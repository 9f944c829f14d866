#pragma once
// All-reduce + residual add + RMSNorm in one pass, as a device op: the form every
// tensor-parallel decode layer ends with. Built on the one-shot Lamport exchange; rows (tokens)
// are dealt to CTAs, one row per CTA at a time, so the norm's sum of squares is a block
// reduction with no cross-CTA step. Each thread owns the same few vectors of every row, so it
// loads its gamma vectors once, before griddepcontrol.wait (they do not depend on the previous
// kernel): the PDL prologue.
#include <cooperative_groups.h>

#include "kernels/comm/lamport_common.cuh"

namespace rs::comm {

__host__ __device__ inline uint32_t fused_row_vecs(uint32_t hidden, int lanes) {
  return hidden / lanes;
}

struct FusedGammaWholeRow {
  uint4 v[kFusedMaxVecsPerThread];
};

template <class E>
__device__ __forceinline__ FusedGammaWholeRow fused_load_gamma_whole_row(const FusedArNormParams& p) {
  FusedGammaWholeRow g;
  const uint32_t row_vecs = fused_row_vecs(p.hidden, E::kLanes);
#pragma unroll
  for (int j = 0; j < kFusedMaxVecsPerThread; ++j) {
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

// Each thread owns kVecs vectors of every row (vector c = threadIdx.x + j * blockDim.x). All
// polls of a row, for every owned vector and a batch of slots, are issued before the first
// wait, so one link latency covers them all; the additions stay in rank order per element.
template <class E, int kVecs>
__device__ void fused_allreduce_rmsnorm_whole_row_op(const FusedArNormParams& p, const FusedGammaWholeRow& gamma,
                                           uint32_t buffer, int cta, int ctas) {
  // Slots polled at once per vector: kVecs x kBatch polls in flight; 4 in all keeps the 2-vector
  // bf16 instance (hidden 7168) free of spills.
  constexpr int kBatch = 4 / kVecs > 0 ? 4 / kVecs : 1;
  __shared__ float scratch[32];
  const LamportView& ws = p.ws;
  const uint32_t row_vecs = fused_row_vecs(p.hidden, E::kLanes);
  const auto* x = reinterpret_cast<const uint4*>(p.x);

  // 1. Push this rank's partials into slot `rank` of every peer. Pushing depends on nothing, so
  // every CTA pushes an equal contiguous slice of the whole message, whoever reduces those rows:
  // one row's 14 KB then leaves through 32 SMs instead of one.
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

  rearm_previous<E>(ws, buffer, cta, ctas);

  // 2. Per row: reduce in rank order, add the residual, round, norm.
  for (uint32_t row = cta; row < p.rows; row += ctas) {
    const uint64_t row_base = static_cast<uint64_t>(row) * row_vecs;
    bool mine[kVecs];
    float acc[kVecs][E::kLanes];
    uint4 own[kVecs], res[kVecs];  // loaded before the polls: their latency hides under the wait
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      mine[j] = threadIdx.x + j * blockDim.x < row_vecs;
      if (mine[j]) {
        const uint64_t v = row_base + threadIdx.x + j * blockDim.x;
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
        const uint64_t v = row_base + threadIdx.x + j * blockDim.x;
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          const int s = s0 + i;
          if (mine[j] && s < ws.nranks && s != ws.rank) polled[j][i] = ld_volatile(ws.region(ws.rank, buffer, s) + v);
        }
      }
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        if (!mine[j]) continue;
        const uint64_t v = row_base + threadIdx.x + j * blockDim.x;
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
    uint4 h[kVecs];  // residual_out as rounded: what the norm reads
    float sumsq = 0.f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!mine[j]) continue;
      const uint64_t v = row_base + threadIdx.x + j * blockDim.x;
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
    const float total = fused_block_sum(sumsq, scratch);
    const float scale = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!mine[j]) continue;
      float g[E::kLanes], o[E::kLanes];
      E::to_float(gamma.v[j], g);
      E::to_float(h[j], o);
#pragma unroll
      for (int l = 0; l < E::kLanes; ++l) o[l] = o[l] * scale * g[l];
      reinterpret_cast<uint4*>(p.normed)[row_base + threadIdx.x + j * blockDim.x] = E::from_float(o);
    }
  }
}

// ---- split rows: the dispatched variant ----------------------------------------------------
// One CTA holding a whole 7168-wide row serialised the row's polls, loads and stores through one
// SM (+1.24 us over the plain one-shot at 14 KiB). Here a row is split into chunks of
// blockDim.x x kVecs vectors, one chunk per CTA, so a row's polls spread over as many SMs as the
// plain one-shot's. The norm needs the whole row's sum of squares: each CTA publishes its chunk's
// partial into the workspace's auxiliary region (this rank's own memory, one 32-bit lane per
// chunk, armed with the sentinel like the data) and every CTA of the row polls all of them, so
// the combination is a second flag-free Lamport exchange, local to the GPU: no atomics, no
// barrier, no counter to reset. Every CTA sums the partials in the same order, so every CTA and
// every rank gets the same bits.
//
// CTA c takes chunk c % chunks of rows c / chunks, + groups, + 2 groups ... (groups = ctas /
// chunks; the host keeps chunks <= ctas). The CTAs of one group walk the same rows in the same
// order and wait only for each other's partials of the row at hand, and every CTA pushes its
// share of the message before any wait, so no wait can close a cycle.
struct FusedSplit {
  uint32_t row_vecs, chunk_vecs, chunks, span, groups, chunk, group;
  __device__ bool active() const { return group < groups; }
  // Vector j of this thread's share of the chunk, if it holds one.
  __device__ bool owns(uint32_t local) const { return local < chunk_vecs && chunk * chunk_vecs + local < row_vecs; }
};

// kCluster: a group is one thread block cluster (span = cluster size >= chunks; CTAs past the
// last chunk hold nothing but take part in the exchange). Otherwise a group is `chunks` CTAs.
template <class E, bool kCluster>
__device__ __forceinline__ FusedSplit fused_split(const FusedArNormParams& p, int cta, int ctas) {
  FusedSplit s;
  s.row_vecs = fused_row_vecs(p.hidden, E::kLanes);
  s.chunk_vecs = p.chunk_vecs;
  s.chunks = (s.row_vecs + s.chunk_vecs - 1) / s.chunk_vecs;
  s.span = kCluster ? cooperative_groups::this_cluster().num_blocks() : s.chunks;
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
template <class E, int kVecs, bool kCluster>
__device__ __forceinline__ FusedGamma<kVecs> fused_load_gamma(const FusedArNormParams& p, int cta, int ctas) {
  const FusedSplit s = fused_split<E, kCluster>(p, cta, ctas);
  FusedGamma<kVecs> g;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const uint32_t local = threadIdx.x + j * blockDim.x;
    g.v[j] = s.active() && s.owns(local) ? reinterpret_cast<const uint4*>(p.gamma)[s.chunk * s.chunk_vecs + local]
                                         : make_uint4(0, 0, 0, 0);
  }
  return g;
}

// Re-arms the previous call's buffer (see rearm_previous for why that is safe): the peer slots
// (this rank's own slot is never written) and the auxiliary partial sums. The partials are
// written and read only by this rank's CTAs: call k-1's were all read before call k passed
// griddepcontrol.wait, and the next writer is call k+2.
template <class E>
__device__ __forceinline__ void fused_rearm_previous(const LamportView& ws, uint32_t buffer, int cta, int ctas) {
  const uint32_t prev = previous_buffer(buffer);
  const uint64_t dirty = ws.state->dirty_vecs[prev];
  const uint64_t peer_vecs = dirty * static_cast<uint64_t>(ws.nranks - 1);
  const uint64_t total = peer_vecs + ws.state->dirty_aux_vecs[prev];
  const uint4 s = sentinel_vec<E>();
  for (uint64_t i = static_cast<uint64_t>(cta) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<uint64_t>(ctas) * blockDim.x) {
    if (i < peer_vecs) {
      uint32_t slot = static_cast<uint32_t>(i / dirty);
      slot += slot >= static_cast<uint32_t>(ws.rank) ? 1u : 0u;
      ws.region(ws.rank, prev, slot)[i % dirty] = s;
    } else {
      ws.region(ws.rank, prev, static_cast<uint32_t>(ws.nranks))[i - peer_vecs] = s;
    }
  }
}

// A partial is a sum of squares, stored with its sign bit cleared (only a NaN could carry one),
// so it never equals the sentinel word: -0.0 (fp32) or two bf16 -0.0 (bf16 workspaces), both
// with bit 31 set. Lanes past the row's chunk count stay armed and are not looked at.
template <class E>
struct PartialsReady {
  uint32_t lanes;  // 1..4 lanes of this vector hold partials
  __device__ bool operator()(const uint4& v) const {
    constexpr uint32_t S = E::kSentinelWord;
    return v.x != S && (lanes < 2 || v.y != S) && (lanes < 3 || v.z != S) && (lanes < 4 || v.w != S);
  }
};

// Warp 0 only: the row's sum of squares from its chunks' partials. Lane l adds the lanes of
// vectors l, l+32, ... in order, then a butterfly adds the lanes; fp addition is commutative, so
// both halves of every butterfly pair compute the same bits, and every CTA and rank the same sum.
template <class E>
__device__ __forceinline__ float fused_row_sum_of_partials(const LamportView& ws, uint32_t buffer,
                                                           uint32_t row, uint32_t chunks) {
  const uint32_t per_row = fused_partial_vecs_per_row(chunks);
  const uint4* base = ws.region(ws.rank, buffer, static_cast<uint32_t>(ws.nranks)) + static_cast<uint64_t>(row) * per_row;
  float sum = 0.f;
  for (uint32_t k = threadIdx.x & 31u; k < per_row; k += 32) {
    const PartialsReady<E> ready{min(4u, chunks - 4 * k)};
    const uint4 first = ld_volatile(base + k);
    const uint4 v = ready(first) ? first
                                 : wait_slow_until(base + k, ws.timeout_ns,
                                                   WaitSite{"fused all-reduce+rmsnorm partial sums", ws.rank, buffer,
                                                            static_cast<uint32_t>(ws.nranks),
                                                            static_cast<uint64_t>(row) * per_row + k, &ws.state->reported},
                                                   E::kName, ready);
    sum += __uint_as_float(v.x);
    if (ready.lanes > 1) sum += __uint_as_float(v.y);
    if (ready.lanes > 2) sum += __uint_as_float(v.z);
    if (ready.lanes > 3) sum += __uint_as_float(v.w);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  return sum;
}

// Each thread owns kVecs vectors of its CTA's chunk (column c = chunk * chunk_vecs + threadIdx.x
// + j * blockDim.x). All polls of a chunk are issued before the first wait, so one link latency
// covers them all; the additions stay in rank order per element.
template <class E, int kVecs, bool kCluster>
__device__ void fused_allreduce_rmsnorm_op(const FusedArNormParams& p, const FusedGamma<kVecs>& gamma,
                                           uint32_t buffer, int cta, int ctas) {
  constexpr int kBatch = 4 / kVecs > 0 ? 4 / kVecs : 1;  // polls in flight per thread: 4 in all
  __shared__ float scratch[32];
  __shared__ float s_row_sumsq;
  __shared__ float s_cluster_partial[2];  // by row parity: a row's slot is rewritten two rows later
  const LamportView& ws = p.ws;
  const FusedSplit sp = fused_split<E, kCluster>(p, cta, ctas);
  const auto* x = reinterpret_cast<const uint4*>(p.x);

  // 1. Push this rank's partials into slot `rank` of every peer: every CTA an equal contiguous
  // slice of the whole message, whoever reduces those rows (pushing waits for nothing).
  const uint64_t total = static_cast<uint64_t>(p.rows) * sp.row_vecs;
  const uint64_t slice = (total + ctas - 1) / ctas;
  const uint64_t slice_end = min(total, static_cast<uint64_t>(cta + 1) * slice);
  for (uint64_t v = static_cast<uint64_t>(cta) * slice + threadIdx.x; v < slice_end; v += blockDim.x) {
    const uint4 own = canonical<E>(x[v]);
    for (int i = 0; i < ws.nranks; ++i) {
      const int peer = ws.write_order[i];
      if (peer != ws.rank) st_volatile(ws.region(peer, buffer, ws.rank) + v, own);
    }
  }

  fused_rearm_previous<E>(ws, buffer, cta, ctas);
  if (!sp.active()) return;

  const uint32_t per_row = fused_partial_vecs_per_row(sp.chunks);
  auto* partials = reinterpret_cast<uint32_t*>(ws.region(ws.rank, buffer, static_cast<uint32_t>(ws.nranks)));
  const uint32_t col0 = sp.chunk * sp.chunk_vecs + threadIdx.x;
  uint32_t parity = 0;

  // 2. Per row: reduce the chunk in rank order, add the residual, round, norm.
  for (uint32_t row = sp.group; row < p.rows; row += sp.groups) {
    const uint64_t row_base = static_cast<uint64_t>(row) * sp.row_vecs;
    bool mine[kVecs];
    float acc[kVecs][E::kLanes];
    uint4 own[kVecs], res[kVecs];  // loaded before the polls: their latency hides under the wait
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      mine[j] = sp.owns(threadIdx.x + j * blockDim.x);
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
    uint4 h[kVecs];  // residual_out as rounded: what the norm reads
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
    float row_sumsq = fused_block_sum(sumsq, scratch);
    if (kCluster && sp.span > 1) {
      // Every CTA of the cluster publishes its partial in shared memory; after the cluster
      // barrier (arrive.release / wait.acquire) every thread reads all of them through DSMEM and
      // adds them in cluster-rank order: the same bits in every CTA and on every rank.
      auto cluster = cooperative_groups::this_cluster();
      if (threadIdx.x == 0) s_cluster_partial[parity] = row_sumsq;
      cluster.sync();
      float sum = 0.f;
      for (uint32_t r = 0; r < sp.span; ++r) sum += *cluster.map_shared_rank(&s_cluster_partial[parity], r);
      row_sumsq = sum;
      parity ^= 1u;
    } else if (!kCluster && sp.chunks > 1) {
      if (threadIdx.x == 0)
        st_volatile_u32(partials + static_cast<uint64_t>(row) * per_row * 4 + sp.chunk, __float_as_uint(fabsf(row_sumsq)));
      if (threadIdx.x < 32) {
        const float t = fused_row_sum_of_partials<E>(ws, buffer, row, sp.chunks);
        if (threadIdx.x == 0) s_row_sumsq = t;
      }
      __syncthreads();  // the next row's fused_block_sum syncs before warp 0 writes it again
      row_sumsq = s_row_sumsq;
    }
    const float scale = rsqrtf(row_sumsq / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (!mine[j]) continue;
      float g[E::kLanes], o[E::kLanes];
      E::to_float(gamma.v[j], g);
      E::to_float(h[j], o);
#pragma unroll
      for (int l = 0; l < E::kLanes; ++l) o[l] = o[l] * scale * g[l];
      reinterpret_cast<uint4*>(p.normed)[row_base + col0 + j * blockDim.x] = E::from_float(o);
    }
  }
  // No CTA may leave (its shared memory goes away) while a cluster peer may still read its last
  // partial. Every CTA of a cluster walks the same rows, so all of them arrive here.
  if (kCluster && sp.span > 1 && sp.group < p.rows) cooperative_groups::this_cluster().sync();
}

}  // namespace rs::comm
