#pragma once
// Statistics of repeated timings: the benches report medians, which ignore the odd slow
// repetition (a clock ramp, a preempted host thread) that would drag a mean.
#include <algorithm>
#include <vector>

namespace rs::bench {

// The middle value; for an even count, the mean of the two middle values.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace rs::bench
