#include "engine/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace rs {

TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int top) {
  // Max-subtracted log-sum-exp in double: the same raw-logit log-softmax the sampler reports.
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob out;
  out.id = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  if (top > 0) {
    const int k = std::min<int>(top, static_cast<int>(logits.size()));
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < k; ++i) out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  }
  return out;
}

}  // namespace rs
