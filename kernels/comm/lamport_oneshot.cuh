#pragma once
// Lamport one-shot all-reduce, as a device op (the graph path's kernel wraps it; the megakernel
// can call it with its own CTA index and count). One NVLink hop: each rank stores its whole
// input into its slot of every peer's buffer, then reduces the N slots of its own buffer.
// Latency is one peer store plus one local poll; bytes sent per rank are (N-1) x message, so
// it is the algorithm for small messages.
#include "kernels/comm/lamport_common.cuh"

namespace rs::comm {

__host__ __device__ inline uint32_t oneshot_vecs(uint32_t count, int lanes) {
  return (count + lanes - 1) / lanes;
}

// Vectors are dealt to CTAs in tiles of blockDim.x, so a CTA's stores and polls are coalesced.
template <class E>
__device__ void lamport_oneshot_op(const OneShotParams& p, uint32_t buffer, int cta, int ctas) {
  const LamportView& ws = p.ws;
  const uint32_t nvec = oneshot_vecs(p.count, E::kLanes);
  const uint32_t tile = blockDim.x;

  // 1. Push: this rank's input, canonicalised, into slot `rank` of every peer's buffer.
  for (uint32_t base = cta * tile; base < nvec; base += ctas * tile) {
    const uint32_t v = base + threadIdx.x;
    if (v >= nvec) continue;
    const uint4 x = canonical<E>(load_vec<E>(p.in, p.count, v));
    for (int i = 0; i < ws.nranks; ++i) {
      const int peer = ws.write_order[i];
      if (peer != ws.rank) st_volatile(ws.region(peer, buffer, ws.rank) + v, x);
    }
  }

  // 2. Re-arm the previous call's buffer while the peers' stores travel.
  rearm_previous<E>(ws, buffer, cta, ctas);

  // 3. Poll and reduce, in rank order 0..N-1 on every rank, so all ranks get the same bits.
  for (uint32_t base = cta * tile; base < nvec; base += ctas * tile) {
    const uint32_t v = base + threadIdx.x;
    if (v >= nvec) continue;
    float acc[E::kLanes];
    reduce_slots<E>(ws, buffer, v, canonical<E>(load_vec<E>(p.in, p.count, v)), "lamport one-shot", acc);
    store_vec<E>(p.out, p.count, v, E::from_float(acc));
  }
}

}  // namespace rs::comm
