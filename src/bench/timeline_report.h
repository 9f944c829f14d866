#pragma once
// Reading a kernel timeline (backend/cuda/kernel_timeline.h): plain arithmetic over spans, so
// it is tested without a GPU.
#include <string>
#include <vector>

#include "backend/cuda/kernel_timeline.h"

namespace rs::bench {

// One kernel, relative to the earliest start of its timeline, in us. gap: this start minus the
// previous kernel's end (negative: the two ran at once, as PDL lets them).
struct TimelineRow {
  std::string kernel;
  double start_us = 0, end_us = 0, dur_us = 0, gap_us = 0;
};

// Rows in start order.
std::vector<TimelineRow> timeline_rows(std::vector<cuda::KernelSpan> spans);

struct TimelineTotals {
  int kernels = 0;
  double span_us = 0;  // first start to last end
  double busy_us = 0;  // time with at least one kernel running (the union of the spans)
  double idle_us = 0;  // span - busy: no kernel on the GPU at all
  double sum_us = 0;   // the kernels' durations added up (> busy where they overlap)
};
TimelineTotals timeline_totals(const std::vector<TimelineRow>& rows);

// The rows from `before` rows ahead of the `occurrence`-th (0-based) row whose kernel name
// contains `marker` to `after` rows past it, clipped to the timeline; empty if there is no
// such row.
std::vector<TimelineRow> timeline_window(const std::vector<TimelineRow>& rows, const std::string& marker,
                                         int occurrence, int before, int after);

// How far each kernel moved the step's end: a row's advance is its end minus the latest end of
// the rows before it (0 when it ended inside them). In a PDL chain a kernel that starts early
// and waits costs nothing until its predecessor is done, so its duration says little; the
// advances add up to the span and split it between the kernels that held the chain up.
struct TimelineAdvance {
  std::string kernel;
  int count = 0;
  double total_us = 0, median_us = 0;
};
// By kernel name, the largest total first.
std::vector<TimelineAdvance> timeline_advance(const std::vector<TimelineRow>& rows);

// CSV: index,kernel,start_us,end_us,dur_us,gap_us (kernel names quoted).
std::string timeline_csv(const std::vector<TimelineRow>& rows);

}  // namespace rs::bench
