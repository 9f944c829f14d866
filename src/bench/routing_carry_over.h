#pragma once
// How much of one decode step's expert routing the next step repeats: of the first k experts a
// layer chose in step t (in the router's order), the fraction that the same layer chose again in
// step t + 1, averaged over layers. `bench forward` prints it for decode: how much a step's expert
// bytes could be reused or predicted from the last step's (dummy weights: 11-15%, H200 2026-12-02).
#include <algorithm>
#include <cstdint>
#include <vector>

namespace rs::bench {

inline double routing_carry_over(const std::vector<std::vector<int32_t>>& prev,
                                 const std::vector<std::vector<int32_t>>& next, int k) {
  const size_t layers = std::min(prev.size(), next.size());
  int found = 0, asked = 0;
  for (size_t l = 0; l < layers; ++l) {
    const int n = std::min<int>(k, int(prev[l].size()));
    for (int i = 0; i < n; ++i) {
      ++asked;
      found += std::find(next[l].begin(), next[l].end(), prev[l][i]) != next[l].end();
    }
  }
  return asked ? double(found) / asked : 0.0;
}

}  // namespace rs::bench
