#pragma once
// The GPU's global nanosecond timer, for the bounded spin-waits (bulk-copy ring, Lamport
// all-reduce, the megakernel's grid barrier), the megakernel's profile and timing tests.
#include <cstdint>

namespace rs::kern {

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace rs::kern
