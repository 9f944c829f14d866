#pragma once
// The device benches' summary of repeated timings: the median and the 90th percentile (nearest
// rank), into any result with median_us and p90_us. Plain C++.
#include <algorithm>
#include <vector>

namespace rs::kern {

template <class Timing>
void set_median_p90(std::vector<double> t, Timing* out) {
  std::sort(t.begin(), t.end());
  out->median_us = t[t.size() / 2];
  out->p90_us = t[std::min(t.size() - 1, t.size() * 9 / 10)];
}

}  // namespace rs::kern
