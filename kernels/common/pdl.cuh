#pragma once
// Programmatic dependent launch (PDL), device side. A kernel launched with the programmatic
// stream serialization attribute may start while the previous kernel in its stream still runs:
//  - pdl_wait(): everything before it must not read what the previous kernel writes (do the
//    prologue there: weight and constant loads); after it, the previous grid has completed and
//    its memory is visible.
//  - pdl_launch_dependents(): lets the next kernel start its prologue now. Its pdl_wait() still
//    waits for this whole grid to finish, so triggering early never breaks correctness.
// Both are no-ops when the kernel was launched without the attribute.

#ifdef RS_MEGAKERNEL_TU
#include "kernels/mega/instruction_wait.cuh"
#endif

namespace rs::pdl {

__device__ __forceinline__ void wait() {
#if defined(RS_MEGAKERNEL_TU)
  rs::kern::mega::wait_for_previous_instruction();  // the decode megakernel (instruction_wait.cuh)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(RS_MEGAKERNEL_TU)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace rs::pdl
