// Host sampler with vLLM's semantics: logit bias and penalties on the raw logits, then temperature, min_p,
// top_k, top_p, and one seeded uniform draw per output token (inverse CDF in token-id order),
// so a request's output depends only on (seed, draw index), never on its batch neighbours.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "backend/sampling.h"
#include "kernels/common/dummy_init.h"

namespace rs {

float sampling_uniform(uint64_t seed, uint64_t index) {
  // Same mixing as the dummy weights (kernels/common/dummy_init.h, usable on the GPU): 24
  // random bits, so the result is exact in fp32 and strictly below 1.
  uint64_t r = dummy::mix64(seed ^ dummy::mix64(index * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}

namespace {

// log-softmax of the raw logits (vLLM's default "raw_logprobs").
std::vector<float> log_softmax(std::span<const float> x) {
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
  const float lse = mx + static_cast<float>(std::log(sum));
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - lse;
  return out;
}

int argmax(const std::vector<float>& v) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(v.size()); ++i)
    if (v[i] > v[best]) best = i;  // first maximum, like torch.argmax
  return best;
}

}  // namespace

SampledToken sample_token(std::span<const float> raw, const SamplingState& state) {
  static const SamplingParams kGreedy = [] {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }();
  const SamplingParams& p = state.params ? *state.params : kGreedy;
  const int V = static_cast<int>(raw.size());
  std::vector<float> logits(raw.begin(), raw.end());
  for (auto [t, b] : p.logit_bias)
    if (t >= 0 && t < V) logits[t] += b;
  if (!state.allowed.empty())
    for (int i = 0; i < V; ++i)
      if (size_t(i / 32) >= state.allowed.size() || !(state.allowed[size_t(i / 32)] >> (i % 32) & 1u))
        logits[i] = -INFINITY;

  // Penalties (vLLM apply_penalties): repetition over prompt and output, presence and
  // frequency over output only.
  if (p.repetition_penalty != 1.0f) {
    std::vector<char> seen(V, 0);
    for (int32_t t : state.prompt_tokens) if (t >= 0 && t < V) seen[t] = 1;
    for (int32_t t : state.output_tokens) if (t >= 0 && t < V) seen[t] = 1;
    for (int i = 0; i < V; ++i)
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty
                                             : logits[i] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : state.output_tokens) if (t >= 0 && t < V) ++counts[t];
    for (auto [t, c] : counts)
      logits[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }

  int chosen;
  if (p.temperature < 1e-5f) {  // vLLM treats temperature below _SAMPLING_EPS as greedy
    chosen = argmax(logits);
  } else {
    for (float& v : logits) v /= p.temperature;
    float mx = *std::max_element(logits.begin(), logits.end());
    std::vector<float> prob(V);
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += prob[i] = std::exp(logits[i] - mx);
    for (float& v : prob) v = static_cast<float>(v / sum);
    std::vector<char> keep(V, 1);
    if (p.min_p > 0.0f) {  // drop tokens below min_p x the most likely one's probability
      float pmax = *std::max_element(prob.begin(), prob.end());
      for (int i = 0; i < V; ++i) if (prob[i] < p.min_p * pmax) keep[i] = 0;
    }
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    if (p.top_k > 0 && p.top_k < V)
      for (int r = p.top_k; r < V; ++r) keep[order[r]] = 0;
    if (p.top_p < 1.0f) {
      // Keep the smallest prefix of the ranking whose mass reaches top_p (at least one), over
      // what top-k left, renormalised (vLLM applies top-k first).
      double kept_mass = 0;
      for (int i = 0; i < V; ++i) if (keep[i]) kept_mass += prob[i];
      double cum = 0;
      bool done = false;
      for (int r = 0; r < V; ++r) {
        int i = order[r];
        if (!keep[i]) continue;
        if (done) { keep[i] = 0; continue; }
        cum += prob[i] / kept_mass;
        if (cum >= p.top_p) done = true;
      }
    }
    double total = 0;
    for (int i = 0; i < V; ++i) if (keep[i]) total += prob[i];
    const double target = static_cast<double>(sampling_uniform(p.seed, state.draw_index)) * total;
    double cum = 0;
    chosen = -1;
    for (int i = 0; i < V; ++i) {
      if (!keep[i]) continue;
      cum += prob[i];
      chosen = i;
      if (cum > target) break;
    }
    if (chosen < 0) chosen = argmax(logits);
  }

  SampledToken out;
  out.id = chosen;
  const std::vector<float> lp = log_softmax(raw);
  out.logprob = lp[chosen];
  if (p.logprobs > 0) {
    const int n = std::min(p.logprobs, V);
    std::vector<int> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int a, int b) {
      return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
    });
    for (int k = 0; k < n; ++k) out.top.push_back({idx[k], lp[idx[k]]});
  }
  return out;
}

}  // namespace rs
