#pragma once
// The decode megakernel's grid barrier, split in two: each CTA arrives once per instruction on
// one monotonic counter when its share is done (grid_arrive), and waits for the count of the
// previous instruction inside the next one, after that op's weight prologue
// (instruction_wait.cuh). A CTA may thus run at most one instruction ahead of the slowest,
// exactly the overlap PDL allows between separate kernels.
//
// Memory ordering is kernels/common/grid_count.cuh's (cooperative groups' grid sync, split), the
// CTA barriers being __syncthreads. Readers of the activations use ordinary (coherent) loads,
// never the non-coherent path (RS_MEGAKERNEL_TU in kernels/common/bf16_fp8.cuh).
//
// A CTA must not arrive for instruction i+1 before the barrier of i completed (the count would
// then complete i with an arrival meant for i+1): the interpreter waits after every op.
//
// The wait is bounded (grid_count_wait): a CTA that never arrives ends it with a diagnostic and
// a trap instead of a silent hang of the step.
#include "kernels/common/grid_count.cuh"
#include "kernels/mega/instruction_wait.cuh"

namespace rs::kern::mega {

// The wait and its diagnostic are kernels/common/grid_count.cuh's; these are the names
// instruction_wait.cuh declares.
__device__ unsigned grid_load_acquire(const unsigned* p) { return grid_count_load(p); }

__device__ __noinline__ void grid_wait_slow(const unsigned* counter, unsigned target, int instr) {
  grid_count_wait(counter, target, "megakernel instruction", instr);
}

// This CTA's share of the current instruction is done: count it (all threads call it).
// A release reduction, not a fence and a returning atomic: thread 0 does not wait for the
// count's round trip, and release cumulativity covers the writes the CTA's other threads ordered
// before it through the __syncthreads.
__device__ __forceinline__ void grid_arrive(unsigned* counter) {
  __syncthreads();
  if (threadIdx.x == 0) grid_count_arrive(counter);
}

}  // namespace rs::kern::mega
