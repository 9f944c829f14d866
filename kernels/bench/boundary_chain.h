#pragma once
// What one dependency step between two pieces of decode work costs on the device, measured four
// ways (`rackserve bench boundary`, kernels/bench/boundary_chain.cu). Each step is the smallest
// real one: every block loads one value per thread that the previous step's blocks stored, and
// stores one. Plain C++: src/ includes it.
#include <cuda_runtime.h>

namespace rs::kern {

enum class BoundaryMode {
  kStreamOrder,   // a chain of kernels, plain stream order (no PDL)
  kPdl,           // a chain of kernels with PDL: launch_dependents at entry, griddepcontrol.wait
  kFlag,          // a chain of kernels with the PDL attribute, no griddepcontrol.wait: the previous
                  // grid's blocks count themselves on a global counter that the next one polls
  kGridBarrier,   // one persistent kernel, a grid-wide barrier (release add, acquire poll, the
                  // decode megakernel's and the one-token FFN's) between the steps
};
const char* boundary_mode_name(BoundaryMode m);

// Median and p90 device time per step over `reps` CUDA-graph replays of `steps` (even) steps,
// grid blocks of `threads` threads, after checking that every step saw the previous one's values.
// kGridBarrier needs every block resident at once: false (nothing measured) where the grid does
// not fit, on a wrong value, or on a CUDA error (*error says which).
struct BoundaryTiming {
  double median_us = 0, p90_us = 0;
};
bool measure_boundary(BoundaryMode mode, int grid, int threads, int steps, int reps, BoundaryTiming* out,
                      const char** error);

}  // namespace rs::kern
