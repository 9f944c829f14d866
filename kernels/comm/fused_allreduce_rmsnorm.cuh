#pragma once
// All-reduce + residual add + RMSNorm in one pass, as a device op: the form every
// tensor-parallel decode layer ends with. Built on the one-shot Lamport exchange; rows (tokens)
// are dealt to CTAs, one row per CTA at a time, so the norm's sum of squares is a block
// reduction with no cross-CTA step. Each thread owns the same few vectors of every row, so it
// loads its gamma vectors once, before griddepcontrol.wait (they do not depend on the previous
// kernel): the PDL prologue.
#include "kernels/comm/lamport_common.cuh"

namespace rs::comm {

__host__ __device__ inline uint32_t fused_row_vecs(uint32_t hidden, int lanes) {
  return hidden / lanes;
}

struct FusedGamma {
  uint4 v[kFusedMaxVecsPerThread];
};

template <class E>
__device__ __forceinline__ FusedGamma fused_load_gamma(const FusedArNormParams& p) {
  FusedGamma g;
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
__device__ void fused_allreduce_rmsnorm_op(const FusedArNormParams& p, const FusedGamma& gamma,
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

}  // namespace rs::comm
