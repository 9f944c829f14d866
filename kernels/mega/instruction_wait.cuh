#pragma once
// Inside the decode megakernel the ops' programmatic-dependent-launch wait (pdl_wait /
// pdl::wait, called between an op's weight prologue and its first read of a predecessor's
// output) becomes the wait for the previous instruction's grid barrier, so a CTA that finished
// instruction i starts instruction i+1's weight loads while other CTAs still work on i: the
// overlap PDL gives separate kernels, kept inside one launch. The ops' PDL contract carries
// over unchanged: nothing before the wait reads what a predecessor writes, or writes at all.
//
// Every op calls it block-uniformly (all threads of the CTA), as the ops' PDL waits are; it is
// idempotent within an instruction, and the interpreter calls it again after each op for the
// ops (and CTAs without work) that never did.
#include <cstdint>

namespace rs::kern::mega {

struct InstructionWait {
  unsigned* counter;  // the grid barrier's arrivals (SyncWords::barrier)
  unsigned target;    // arrivals that complete the previous instruction
  unsigned reached;   // largest target already seen complete by this CTA
  int instr;          // for the timeout's diagnostic
};
static __shared__ InstructionWait s_instruction_wait;

void __device__ grid_wait_slow(const unsigned* counter, unsigned target, int instr);
unsigned __device__ grid_load_acquire(const unsigned* p);

__device__ __forceinline__ void wait_for_previous_instruction() {
  if (threadIdx.x == 0) {
    InstructionWait& w = s_instruction_wait;
    if (w.reached < w.target) {
      if (grid_load_acquire(w.counter) < w.target) grid_wait_slow(w.counter, w.target, w.instr);
      w.reached = w.target;
    }
  }
  __syncthreads();
}

}  // namespace rs::kern::mega
