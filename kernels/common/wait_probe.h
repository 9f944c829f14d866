#pragma once
// Host side of the wait probe (wait_probe.cuh): when each block of each PDL-launched kernel
// reached griddepcontrol.wait and when the wait let it go, from the GPU's global timer. Built in
// only with the CMake option RS_WAIT_PROBE (a separate build: every PDL kernel then pays a few
// instructions and one atomic before its wait). Plain C++.
#include <cstdint>

namespace rs::kern {

// One block's record: its wait (tag 0), or a mark a kernel sets after the wait (tags 1..7,
// time in exit_ns; kernels/common/pdl.cuh probe_mark). Record 0 of an armed buffer is a header
// whose `grid` counts the records taken (kWaitProbeSlots a block; unused marks have grid 0).
struct WaitProbeRecord {
  uint64_t grid = 0;           // %gridid: one launch (a graph replay's node launches get new ids)
  uint64_t entry_ns = 0;       // thread 0 reached the wait
  uint64_t exit_ns = 0;        // the wait returned (the previous grid had completed), or the mark
  uint32_t smid = 0, block = 0;  // where it ran, its linear block index
  uint32_t blocks = 0, threads = 0;  // the launch's grid and block sizes
  uint32_t tag = 0, pad = 0;
};
constexpr int kWaitProbeSlots = 8;  // a block's wait, then marks 1..7
// The marks' meaning, where a kernel sets them.
constexpr int kProbeInputReady = 1;  // the kernel's inputs are in shared memory / registers
constexpr int kProbeMainDone = 2;    // this block's main loop (its share of the weights) is done
constexpr int kProbeGridWait = 3;    // a grid-wide wait inside the launch has passed
constexpr int kProbeEnd = 4;         // thread 0 is done
constexpr int kProbeStep1 = 5;       // finer steps, each kernel's own: the router in the expert
constexpr int kProbeStep2 = 6;       // launch (norm and logit partials, every block's logits, the
constexpr int kProbeStep3 = 7;       // selection); the cluster router (logits, cluster barrier,
                                     // selection); the register down (routing read, first row group);
                                     // the one-launch FFN behind a router launch (first down stage
                                     // landed, the first issued after its grid-wide wait, the last)

// Whether this binary was built with RS_WAIT_PROBE.
bool wait_probe_built();
// Every translation unit with PDL kernels records into `records` (device memory, `capacity`
// records, the first one the header, zeroed by the caller), or stops recording (nullptr).
void wait_probe_arm(WaitProbeRecord* records, uint32_t capacity);

}  // namespace rs::kern
