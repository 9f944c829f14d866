#pragma once
// Tray-first all-reduce, as a device op: a Lamport one-shot inside each tray, then a Lamport
// one-shot across trays between corresponding ranks (same position in their trays). With N ranks
// in T trays of R, rank (t, l) sends its input to the R-1 ranks of its tray and its tray's partial
// sum to the T-1 ranks (u, l) of the other trays: (R-1) + (T-1) x 2 (bf16) stores of the message
// instead of the flat one-shot's N-1, and only T-1 of them cross between trays instead of
// (T-1) x R. Two link latencies instead of one: it pays where the links between trays are slower
// than those inside one.
//
// Numerics: the tray partial is sent in fp32 (for bf16, two 16-byte vectors per 8 values), so the
// result is rounded to the element type once, as in the flat one-shot; the order of the additions
// (in-tray positions 0..R-1, then trays 0..T-1) is the same on every rank, so every rank's output
// is bit-identical. The partial of a tray is the same bits on all of its ranks for the same reason.
//
// Both exchanges are flag-free Lamport exchanges over the same buffer index (three rotating
// buffers, re-armed one call later; the argument in lamport_common.cuh holds for each: every rank
// that stores into one of my buffers also reads something I store in every call, so it cannot
// reach the call after next before I finished this one). Every CTA stores all its in-tray data
// before it waits for anything, and stores a vector's partial across trays as soon as that
// vector's in-tray sum is complete, before it waits across trays: no wait closes a cycle.
#include "kernels/comm/lamport_common.cuh"
#include "kernels/comm/lamport_oneshot.cuh"

namespace rs::comm {

template <class E>
__device__ void tray_first_op(const TrayFirstParams& p, uint32_t buffer, int cta, int ctas) {
  using F = Elem<ElemType::fp32>;
  constexpr int kPV = E::kLanes / F::kLanes;  // fp32 vectors per element vector: 2 (bf16), 1 (fp32)
  const LamportView& tray = p.tray;
  const LamportView& across = p.across;
  const int me = tray.rank, R = p.tray_size, T = p.trays, t = me / R, l = me % R;
  const uint32_t nvec = oneshot_vecs(p.count, E::kLanes);
  const uint32_t tile = blockDim.x;
  // The re-arm extents, loaded now: the re-arm sits after the across-tray stores (step 3), and
  // these loads' latency would otherwise delay the polls of step 4.
  const uint32_t tray_dirty = tray.state->dirty_vecs[previous_buffer(buffer)];
  const uint32_t across_dirty = across.state->dirty_vecs[previous_buffer(buffer)];

  // 1. Inside the tray: this rank's input into slot l of every tray peer.
  if (R > 1) {
    for (uint32_t base = cta * tile; base < nvec; base += ctas * tile) {
      const uint32_t v = base + threadIdx.x;
      if (v >= nvec) continue;
      const uint4 x = canonical<E>(load_vec<E>(p.in, p.count, v));
      for (int i = 1; i < R; ++i) st_volatile(tray.region(t * R + (l + i) % R, buffer, l) + v, x);
    }
  }

  // 2. The tray partial, in fp32 and position order; across trays it goes into slot t of the
  //    corresponding rank of every other tray, and into this rank's own slot t (read back in 4).
  for (uint32_t base = cta * tile; base < nvec; base += ctas * tile) {
    const uint32_t v = base + threadIdx.x;
    if (v >= nvec) continue;
    const uint32_t vec[1] = {v};
    const bool active[1] = {true};
    const uint4 own[1] = {canonical<E>(load_vec<E>(p.in, p.count, v))};
    float part[1][E::kLanes];
    reduce_slots_multi<E, 1>(tray, buffer, vec, active, own, R, l, "tray-first in-tray", part);
    if (T == 1) {
      store_vec<E>(p.out, p.count, v, E::from_float(part[0]));
      continue;
    }
#pragma unroll
    for (int q = 0; q < kPV; ++q) {
      // Canonical: the sentinel must never be sent (a sum starting at +0.0 cannot be -0.0, but
      // the rule costs one compare and keeps the argument local).
      const uint4 w = canonical<F>(F::from_float(&part[0][q * F::kLanes]));
      const uint64_t fv = static_cast<uint64_t>(v) * kPV + q;
      for (int i = 1; i < T; ++i) st_volatile(across.region(((t + i) % T) * R + l, buffer, t) + fv, w);
      across.region(me, buffer, t)[fv] = w;
    }
  }

  // 3. Re-arm both previous buffers while the stores travel. Not before step 2: with one rank a
  //    tray (R = 1) step 2's stores are this call's first, and the re-arm would delay them (the
  //    first version, re-arm first, measured 3.8 us at N = 2, T = 2 and 7168 bf16, against the
  //    one-shot's 2.5). Any point of this call is safe (lamport_common.cuh).
  rearm_previous<E>(tray, buffer, cta, ctas, tray_dirty);
  rearm_previous<F>(across, buffer, cta, ctas, across_dirty);
  if (T == 1) return;

  // 4. Across trays: the T partials of this position, added in tray order.
  for (uint32_t base = cta * tile; base < nvec; base += ctas * tile) {
    const uint32_t v = base + threadIdx.x;
    if (v >= nvec) continue;
    uint32_t fvec[kPV];
    bool active[kPV];
    uint4 own[kPV];
#pragma unroll
    for (int q = 0; q < kPV; ++q) {
      fvec[q] = v * kPV + q;
      active[q] = true;
      own[q] = across.region(me, buffer, t)[fvec[q]];  // written by this thread in step 2
    }
    float sum[kPV][F::kLanes];
    reduce_slots_multi<F, kPV>(across, buffer, fvec, active, own, T, t, "tray-first across trays", sum);
    float out[E::kLanes];
#pragma unroll
    for (int q = 0; q < kPV; ++q)
#pragma unroll
      for (int k = 0; k < F::kLanes; ++k) out[q * F::kLanes + k] = sum[q][k];
    store_vec<E>(p.out, p.count, v, E::from_float(out));
  }
}

}  // namespace rs::comm
