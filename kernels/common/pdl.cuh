#pragma once
// Programmatic dependent launch (PDL), device side. A kernel launched with the programmatic
// stream serialization attribute may start while the previous kernel in its stream still runs:
//  - pdl_wait(): everything before it must not read what the previous kernel writes (do the
//    prologue there: weight and constant loads); after it, the previous grid has completed and
//    its memory is visible.
//  - pdl_launch_dependents(): lets the next kernel start its prologue now. Its pdl_wait() still
//    waits for this whole grid to finish, so triggering early never breaks correctness.
// Both are no-ops when the kernel was launched without the attribute.

#include "kernels/common/wait_probe.h"
#ifdef RS_MEGAKERNEL_TU
#include "kernels/mega/instruction_wait.cuh"
#elif defined(RS_WAIT_PROBE)
#include "kernels/common/wait_probe.cuh"  // bench forward --wait-probe's build only
#endif

namespace rs::pdl {

__device__ __forceinline__ void wait() {
#if defined(RS_MEGAKERNEL_TU)
  rs::kern::mega::wait_for_previous_instruction();  // the decode megakernel (instruction_wait.cuh)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef RS_WAIT_PROBE
  const rs::kern::probe::Slot slot = rs::kern::probe::before_wait();
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
#ifdef RS_WAIT_PROBE
  rs::kern::probe::after_wait(slot);
#endif
#endif
}

// A point in this block's work after its wait (kernels/common/wait_probe.h tags), recorded by
// thread 0 in the wait probe's measuring build; nothing otherwise.
__device__ __forceinline__ void probe_mark([[maybe_unused]] unsigned tag) {
#if defined(RS_WAIT_PROBE) && !defined(RS_MEGAKERNEL_TU) && defined(__CUDA_ARCH__)
  rs::kern::probe::mark(tag);
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(RS_MEGAKERNEL_TU)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace rs::pdl
