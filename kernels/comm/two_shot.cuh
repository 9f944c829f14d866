#pragma once
// Two-shot all-reduce (reduce-scatter, then all-gather) over Lamport buffers, as a device op.
// Rank j owns chunk j (ceil(vectors / N) vectors). Shot 1: every rank stores its copy of chunk j
// into slot `rank` of rank j's scatter regions. Rank j reduces its chunk in rank order and
// shot 2 stores the result into region N+j of every peer, which copies the gathered chunks out.
// Each rank sends 2 (N-1)/N x message instead of one-shot's (N-1) x message, for two hops of
// latency: the algorithm for large messages. No flags and no barriers, as in the one-shot.
#include "kernels/comm/lamport_common.cuh"

namespace rs::comm {

__host__ __device__ inline uint32_t two_shot_chunk_vecs(uint32_t count, int lanes, int nranks) {
  const uint32_t nvec = (count + lanes - 1) / lanes;
  return (nvec + nranks - 1) / nranks;
}

template <class E>
__device__ void two_shot_op(const TwoShotParams& p, uint32_t buffer, int cta, int ctas) {
  const LamportView& ws = p.ws;
  const int n = ws.nranks, me = ws.rank;
  const uint32_t nvec = (p.count + E::kLanes - 1) / E::kLanes;
  const uint32_t chunk = two_shot_chunk_vecs(p.count, E::kLanes, n);
  const uint32_t tile = blockDim.x;
  auto chunk_len = [&](int j) -> uint32_t {
    const uint64_t first = static_cast<uint64_t>(j) * chunk;
    if (first >= nvec) return 0u;
    const uint64_t left = nvec - first;
    return left < chunk ? static_cast<uint32_t>(left) : chunk;
  };

  // Shot 1: chunk j of this rank's input into rank j's scatter slot `me`.
  for (int i = 0; i < n; ++i) {
    const int j = ws.write_order[i];
    if (j == me) continue;
    const uint32_t len = chunk_len(j);
    uint4* dst = ws.region(j, buffer, static_cast<uint32_t>(me));
    for (uint32_t base = cta * tile; base < len; base += ctas * tile) {
      const uint32_t v = base + threadIdx.x;
      if (v < len) st_volatile(dst + v, canonical<E>(load_vec<E>(p.in, p.count, static_cast<uint64_t>(j) * chunk + v)));
    }
  }

  rearm_previous<E>(ws, buffer, cta, ctas);

  // Reduce my chunk in rank order; shot 2 sends the result to every peer's gather region.
  const uint32_t my_len = chunk_len(me);
  const uint64_t my_first = static_cast<uint64_t>(me) * chunk;
  for (uint32_t base = cta * tile; base < my_len; base += ctas * tile) {
    const uint32_t v = base + threadIdx.x;
    if (v >= my_len) continue;
    float acc[E::kLanes];
    reduce_slots<E>(ws, buffer, v, canonical<E>(load_vec<E>(p.in, p.count, my_first + v)),
                    "two-shot reduce-scatter", acc);
    // Canonical again: a sum can round to -0.0, which a peer would take for "not yet written".
    // The owner stores the same canonical bits, so every rank's output is identical.
    const uint4 r = canonical<E>(E::from_float(acc));
    for (int i = 0; i < n; ++i) {
      const int peer = ws.write_order[i];
      if (peer != me) st_volatile(ws.region(peer, buffer, static_cast<uint32_t>(n + me)) + v, r);
    }
    store_vec<E>(p.out, p.count, my_first + v, r);
  }

  // All-gather: copy out the chunks the other ranks reduced.
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    const uint32_t len = chunk_len(j);
    const uint4* src = ws.region(me, buffer, static_cast<uint32_t>(n + j));
    for (uint32_t base = cta * tile; base < len; base += ctas * tile) {
      const uint32_t v = base + threadIdx.x;
      if (v >= len) continue;
      const uint4 w = wait_ready<E>(src + v, ld_volatile(src + v), ws.timeout_ns,
                                    WaitSite{"two-shot all-gather", me, buffer, static_cast<uint32_t>(n + j), v,
                                             &ws.state->reported});
      store_vec<E>(p.out, p.count, static_cast<uint64_t>(j) * chunk + v, w);
    }
  }
}

}  // namespace rs::comm
