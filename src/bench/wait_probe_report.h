#pragma once
// Reading the wait probe's records (kernels/common/wait_probe.h) of one decode graph replay:
// plain arithmetic, tested without a GPU. Where the CUPTI timeline (kernel_timeline.h) of the
// same graph is at hand, its kernels name the probe's launches.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/kernel_timeline.h"
#include "kernels/common/wait_probe.h"

namespace rs::bench {

// One launch, times in us from the replay's first entry. release: its first block's wait
// returned (the previous grid had completed); late: its last block reached the wait this long
// after the release (> 0: blocks that were not resident when the previous grid ended); spread:
// last minus first wait return; advance: the next launch's release minus this one's (one
// boundary and this kernel's work after its wait).
struct ProbeLaunch {
  std::string kernel;  // from the timeline, else "<blocks>x<threads>"
  int blocks = 0, threads = 0, records = 0;
  double first_entry_us = 0, last_entry_us = 0, release_us = 0, last_exit_us = 0;
  double late_us = 0, spread_us = 0, advance_us = 0;
  // Marks 1..7 (wait_probe.h: input ready, main loop done, grid-wide wait passed, end, steps): when the
  // last block set it, from the release; < 0 where the kernel sets no such mark.
  double mark_last_us[kern::kWaitProbeSlots] = {-1, -1, -1, -1, -1, -1, -1, -1};
  // With the SMs' L2 sides given (kernels/common/l2_sides.h): the same per side, slot 0 the side's
  // last block out of its wait; -1 where that side set none.
  double side_last_us[2][kern::kWaitProbeSlots] = {{-1, -1, -1, -1, -1, -1, -1, -1}, {-1, -1, -1, -1, -1, -1, -1, -1}};
};

// Launches in order of their first entry. `spans`: the timeline's kernels in start order (may be
// empty); a launch takes the name of the next span with its grid and block sizes. sm_side
// (optional): each SM's L2 side, indexed by SM id (0 or 1).
std::vector<ProbeLaunch> probe_launches(const std::vector<kern::WaitProbeRecord>& records,
                                        const std::vector<cuda::KernelSpan>& spans,
                                        const std::vector<uint8_t>* sm_side = nullptr);

// By kernel name: launches, and the medians of advance, late and spread; the largest total
// advance first.
struct ProbeSummary {
  std::string kernel;
  int count = 0;
  double advance_total_us = 0, advance_median_us = 0, late_median_us = 0, spread_median_us = 0;
  double mark_median_us[kern::kWaitProbeSlots] = {-1, -1, -1, -1, -1, -1, -1, -1};  // medians of mark_last_us
  double side_median_us[2][kern::kWaitProbeSlots] = {{-1, -1, -1, -1, -1, -1, -1, -1},
                                                     {-1, -1, -1, -1, -1, -1, -1, -1}};  // of side_last_us
};
std::vector<ProbeSummary> probe_summary(const std::vector<ProbeLaunch>& launches);

// CSV: index,kernel,blocks,threads,records,first_entry_us,last_entry_us,release_us,last_exit_us,late_us,spread_us,
// advance_us, then the marks 1..7 (input_us,main_us,grid_wait_us,end_us,step1_us,step2_us,step3_us)
std::string probe_csv(const std::vector<ProbeLaunch>& launches);

// CSV of every record as taken, one line a block's wait or mark, times in us from the earliest
// wait entry: grid,block,smid,tag,entry_us,exit_us (a mark's time is its exit_us). For questions
// the per-launch figures cannot answer (how a mark spreads over a grid's blocks, which SMs lag).
std::string probe_records_csv(const std::vector<kern::WaitProbeRecord>& records);

}  // namespace rs::bench
