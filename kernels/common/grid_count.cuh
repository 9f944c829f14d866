#pragma once
// Counting a grid's CTAs on a global counter, for the grid-wide waits inside one launch (the
// decode megakernel's barrier, kernels/mega/grid_barrier.cuh; the one-token expert FFN's wait
// for every block's h, kernels/ops/expert_stream_ffn.cuh). Every CTA of such a grid must be
// resident at once; the caller's launcher makes sure of it.
//
// Memory ordering is cooperative groups' grid sync, split: a CTA barrier orders its threads'
// writes before one thread's release add at gpu scope (release cumulativity covers what the
// barrier ordered); the waiter's loads are acquires at gpu scope, and a CTA barrier after the wait
// orders the CTA's later reads after them. Readers of what other CTAs wrote use coherent loads,
// never the non-coherent path.
#include <cstdint>
#include <cstdio>

#include "kernels/common/global_timer.cuh"

namespace rs::kern {

constexpr uint64_t kGridCountTimeoutNs = 2000000000ull;  // 2 s: no wait takes more than microseconds

__device__ __forceinline__ unsigned grid_count_load(const unsigned* counter) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

// A reduction, not a returning atomic: the thread does not wait for the count's round trip.
__device__ __forceinline__ void grid_count_arrive(unsigned* counter) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}

// One thread: until *counter >= target. Bounded like every spin-wait of the project: a CTA that
// never arrives (a trapped or hung one elsewhere) ends it after kGridCountTimeoutNs with a
// diagnostic naming the wait (`what`, and `id` where >= 0) and a trap, not a silent hang.
// static: internal linkage, so that every translation unit including this header may keep its
// copy (a non-inline __device__ function also gets a host stub, which would be defined twice).
static __device__ __noinline__ void grid_count_wait(const unsigned* counter, unsigned target, const char* what,
                                                    int id) {
  const uint64_t start = global_time_ns();
  for (uint32_t spin = 1;; ++spin) {
    if (grid_count_load(counter) >= target) return;
    if ((spin & 255u) == 0u && global_time_ns() - start > kGridCountTimeoutNs) {
      const unsigned seen = grid_count_load(counter);
      const unsigned long long ms = kGridCountTimeoutNs / 1000000;
      if (id >= 0)
        printf("rackserve: %s %d: block %d waited for %u arrivals, saw %u after %llu ms; trapping\n", what, id,
               blockIdx.x, target, seen, ms);
      else
        printf("rackserve: %s: block %d waited for %u arrivals, saw %u after %llu ms; trapping\n", what, blockIdx.x,
               target, seen, ms);
      __trap();
    }
  }
}

// The same arrival on two counters (a copy homed on each L2 side, l2_sides.h): one release fence
// for both reductions.
__device__ __forceinline__ void grid_count_arrive2(unsigned* a, unsigned* b) {
  asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [%0], 1;\n\tred.relaxed.gpu.global.add.u32 [%1], 1;" ::"l"(a),
               "l"(b)
               : "memory");
}

// One thread of each CTA, after its wait on w[0] (arrivals): counts itself on w[1] (departures);
// the last of the grid's CTAs to pass zeroes both words for the next launch (nobody reads w[0]
// again in this one) and returns true, so a caller with more arrival words (one per L2 side)
// zeroes those too.
__device__ __forceinline__ bool grid_count_depart(unsigned* w) {
  if (atomicAdd(w + 1, 1u) != gridDim.x - 1) return false;
  w[0] = 0u;
  w[1] = 0u;
  return true;
}

}  // namespace rs::kern
