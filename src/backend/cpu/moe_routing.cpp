#include "backend/cpu/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rs::cpu {

namespace {
// Indices of the k largest values, best first; ties go to the lower index.
std::vector<int> top_k(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(k);
  return idx;
}
}  // namespace

Route route_token(const ModelSpec& s, const float* logits, const float* bias) {
  const int E = s.n_routed_experts, K = s.num_experts_per_tok;
  std::vector<float> scores(E);
  if (s.scoring_func == ScoringFunc::Softmax) {
    float mx = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += scores[e] = std::exp(logits[e] - mx);
    for (int e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / sum);
  } else {
    for (int e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }

  // Choice scores: the correction bias steers selection only (noaux_tc); weights below come
  // from the unbiased scores.
  std::vector<float> choice = scores;
  if (s.topk_method == TopkMethod::NoauxTc && bias)
    for (int e = 0; e < E; ++e) choice[e] += bias[e];

  if (s.topk_method != TopkMethod::Greedy && s.n_group > 1) {
    const int G = s.n_group, per = E / G;
    std::vector<float> group_score(G);
    for (int g = 0; g < G; ++g) {
      const float* c = &choice[g * per];
      if (s.topk_method == TopkMethod::GroupLimitedGreedy) {
        group_score[g] = *std::max_element(c, c + per);  // V2: a group's best expert
      } else {
        std::vector<float> grp(c, c + per);  // V3: sum of a group's two best
        std::partial_sort(grp.begin(), grp.begin() + 2, grp.end(), std::greater<float>());
        group_score[g] = grp[0] + grp[1];
      }
    }
    std::vector<int> keep = top_k(group_score, s.topk_group);
    std::vector<char> kept(G, 0);
    for (int g : keep) kept[g] = 1;
    // HF (and DeepSeek's HF-format MoEGate) mask the other groups with 0.0, not -inf: identical
    // unless fewer than top_k experts of the kept groups score above zero.
    for (int e = 0; e < E; ++e)
      if (!kept[e / per]) choice[e] = 0.0f;
  }

  Route r;
  r.experts = top_k(choice, K);
  r.weights.resize(K);
  float sum = 0;
  for (int i = 0; i < K; ++i) sum += r.weights[i] = scores[r.experts[i]];
  const float rsf = static_cast<float>(s.routed_scaling_factor);
  if (s.model_type == ModelType::DeepseekV3) {
    if (s.norm_topk_prob)
      for (float& w : r.weights) w /= sum + 1e-20f;
    for (float& w : r.weights) w *= rsf;
  } else {
    // DeepSeek-V2's own MoEGate: renormalised weights are not scaled; otherwise they are.
    if (K > 1 && s.norm_topk_prob) {
      for (float& w : r.weights) w /= sum + 1e-20f;
    } else {
      for (float& w : r.weights) w *= rsf;
    }
  }
  return r;
}

}  // namespace rs::cpu
