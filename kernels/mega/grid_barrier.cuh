#pragma once
// The decode megakernel's grid barrier, split in two: each CTA arrives once per instruction on
// one monotonic counter when its share is done (grid_arrive), and waits for the count of the
// previous instruction inside the next one, after that op's weight prologue
// (instruction_wait.cuh). A CTA may thus run at most one instruction ahead of the slowest,
// exactly the overlap PDL allows between separate kernels.
//
// Memory ordering (the pattern of cooperative groups' grid sync, split): __syncthreads orders
// every thread's writes of the instruction before thread 0's arrival, a release at gpu scope;
// the waiting thread's loads are acquires at gpu scope, and the
// __syncthreads after the wait orders the rest of the CTA's later reads after them. Readers of
// the activations use ordinary (coherent) loads, never the non-coherent path (RS_MEGAKERNEL_TU
// in kernels/common/bf16_fp8.cuh).
//
// A CTA must not arrive for instruction i+1 before the barrier of i completed (the count would
// then complete i with an arrival meant for i+1): the interpreter waits after every op.
//
// Bounded like every spin-wait of the project: a CTA that never arrives (a trapped or hung
// instruction elsewhere) ends the wait after kGridBarrierTimeoutNs with a diagnostic and a trap
// instead of a silent hang of the step.
#include <cstdint>
#include <cstdio>

#include "kernels/common/global_timer.cuh"
#include "kernels/mega/instruction_wait.cuh"

namespace rs::kern::mega {

constexpr uint64_t kGridBarrierTimeoutNs = 2000000000ull;  // 2 s: no instruction takes more than microseconds


__device__ unsigned grid_load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __noinline__ void grid_wait_slow(const unsigned* counter, unsigned target, int instr) {
  const uint64_t start = global_time_ns();
  for (uint32_t spin = 1;; ++spin) {
    if (grid_load_acquire(counter) >= target) return;
    if ((spin & 255u) == 0u && global_time_ns() - start > kGridBarrierTimeoutNs) {
      printf("rackserve: megakernel instruction %d waited for the previous one's %u arrivals, saw %u after %llu ms "
             "(block %d); trapping\n",
             instr, target, grid_load_acquire(counter), static_cast<unsigned long long>(kGridBarrierTimeoutNs / 1000000),
             blockIdx.x);
      __trap();
    }
  }
}

// This CTA's share of the current instruction is done: count it (all threads call it).
// A release reduction, not a fence and a returning atomic: thread 0 does not wait for the
// count's round trip, and release cumulativity covers the writes the CTA's other threads ordered
// before it through the __syncthreads.
__device__ __forceinline__ void grid_arrive(unsigned* counter) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}

}  // namespace rs::kern::mega
