#pragma once
// Helpers for the CUDA executor's GPU tests (suite gpu.cuda): GPU presence, device buffers,
// bf16 rounding, cosine similarity.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "kernels/ops/moe_router_params.h"
#include "model/model_spec.h"
#include "model/numerics.h"

namespace rs::cudatest {

inline bool have_gpu() { return cuda_device_count(nullptr) > 0; }

inline bool skip_without_gpu(const char* test) {
  if (have_gpu()) return false;
  std::printf("[gpu.cuda] %s: skipped, no CUDA device\n", test);
  return true;
}

inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline float bf16_bits_to_float(uint16_t b) { return bf16_to_f32(b); }
inline uint16_t float_to_bf16_bits(float f) { return f32_to_bf16(f); }
inline float round_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// A router configuration of the GPU router tests, and the ModelSpec fields it sets.
struct RouterCase {
  ScoringFunc sf;
  TopkMethod tm;
  int E, k, groups, topk_groups, hidden;
  bool norm;
  double scale;
  bool v3;
};

inline ModelSpec router_spec(const RouterCase& c) {
  ModelSpec s;
  s.model_type = c.v3 ? ModelType::DeepseekV3 : ModelType::DeepseekV2;
  s.n_routed_experts = c.E;
  s.num_experts_per_tok = c.k;
  s.scoring_func = c.sf;
  s.topk_method = c.tm;
  s.n_group = c.groups;
  s.topk_group = c.topk_groups;
  s.norm_topk_prob = c.norm;
  s.routed_scaling_factor = c.scale;
  return s;
}

// The router kernel's parameters for a RouterCase, as the forward pass derives them from the
// ModelSpec; the correction bias reaches the kernel only for noaux_tc.
inline cuda::MoeRouterParams router_params(const RouterCase& c, const float* logits, const float* bias, int n,
                                           int32_t* topk_ids, float* topk_weights) {
  cuda::MoeRouterParams p;
  p.logits = logits;
  p.bias = c.tm == TopkMethod::NoauxTc ? bias : nullptr;
  p.n = n;
  p.experts = c.E;
  p.top_k = c.k;
  p.n_group = c.groups;
  p.topk_group = c.topk_groups;
  p.scoring = c.sf == ScoringFunc::Softmax ? cuda::RouterScoring::Softmax : cuda::RouterScoring::Sigmoid;
  p.method = c.tm == TopkMethod::Greedy ? cuda::RouterTopk::Greedy
             : c.tm == TopkMethod::GroupLimitedGreedy ? cuda::RouterTopk::GroupLimitedGreedy
                                                       : cuda::RouterTopk::NoauxTc;
  p.normalize = c.v3 ? c.norm : (c.norm && c.k > 1);
  p.scale_after_normalize = c.v3;
  p.routed_scaling = float(c.scale);
  p.topk_ids = topk_ids;
  p.topk_weights = topk_weights;
  return p;
}

template <class T>
struct Dev {
  T* ptr = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    ok(cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
    ok(cudaMemset(ptr, 0, std::max<size_t>(count, 1) * sizeof(T)), "cudaMemset");
  }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    ok(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "H2D");
  }
  ~Dev() { cudaFree(ptr); }
  Dev(const Dev&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    ok(cudaDeviceSynchronize(), "sync");
    ok(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
    return h;
  }
};

struct Rand {
  std::mt19937_64 g;
  explicit Rand(uint64_t s) : g(s) {}
  float uniform(float lo = -1.f, float hi = 1.f) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  float normal(float sd = 1.f) { return std::normal_distribution<float>(0.f, sd)(g); }
  // bf16 bits of uniform values, and their float values
  std::vector<uint16_t> bf16(size_t n, float lo, float hi, std::vector<float>* values) {
    std::vector<uint16_t> b(n);
    values->resize(n);
    for (size_t i = 0; i < n; ++i) {
      b[i] = float_to_bf16_bits(uniform(lo, hi));
      (*values)[i] = bf16_bits_to_float(b[i]);
    }
    return b;
  }
};

inline double cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / (std::sqrt(aa * bb) + 1e-30);
}

// ||a - b|| / ||b||
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += double(a[i] - b[i]) * (a[i] - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / (r + 1e-30));
}

// One greedy step of sequence 1: `tokens` at start_pos (a one-token step after the prompt is a
// batch-1 decode step, the prompt a prefill); returns the sampled id.
inline int32_t greedy_step(Backend& be, const std::vector<int32_t>& tokens, int start_pos,
                           const std::vector<int32_t>& table) {
  static SamplingParams greedy = [] {
    SamplingParams g;
    g.temperature = 0;
    return g;
  }();
  Batch b;
  SeqStep s;
  s.seq_id = 1;
  s.tokens = tokens;
  s.start_pos = start_pos;
  s.block_table = table;
  s.sample = true;
  s.sampling.params = &greedy;
  b.seqs.push_back(s);
  return be.execute(b)[0].token->id;
}

// V2-Lite dummy weights (seed 7), a 10-token prompt and six batch-1 decode steps on two backends,
// one with a fast path on (path 0) and one with it off (path 1, set_path switches it before each
// backend is made): both are fed path 0's tokens, so a near-tie cannot make them diverge. Per
// step: each logits cosine >= min_cosine and, where the argmax differs, the reference's top-two
// margin below max_flip_margin. Returns the worst cosine. A V2-Lite backend's bf16 dummy weights
// take ~31 GB: the caller checks the free memory first (v2lite_decode_fits).
inline bool v2lite_decode_fits(const char* suite, const char* what) {
  size_t free_b = 0, total_b = 0;
  ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (free_b >= (size_t(40) << 30)) return true;
  std::printf("[%s] %s: skipped, %.1f GB free on the GPU (needs 40)\n", suite, what, double(free_b) / (1 << 30));
  return false;
}
struct PathCompare {
  double worst_cosine = 1.0;
  int flips = 0;
  int differing_steps = 0;  // steps whose logits differ in any bit
  float worst_flip_margin = 0.f;
  std::vector<std::string> failures;  // one line a step that misses a bar
};
template <class SetPath>
PathCompare compare_v2lite_decode(bool fp8, SetPath set_path, double min_cosine, float max_flip_margin) {
  ModelSpec spec = load_model_spec(std::string(RS_FIXTURES_DIR) + "/model-shapes/deepseek-v2-lite");
  if (fp8) {
    spec.quant.fp8_block = true;
    spec.quant.block_rows = spec.quant.block_cols = 128;
  }
  KvConfig kv;
  kv.block_size = 16;
  kv.num_blocks = 4;
  const std::vector<int32_t> prompt = {5, 17, 300, 42, 7, 99, 3, 1000, 2024, 11}, table = {0, 1, 2, 3};
  std::vector<std::vector<float>> logits[2];
  std::vector<int32_t> next[2], fed;
  for (int path = 0; path < 2; ++path) {
    set_path(path);
    auto be = make_cuda_backend_dummy(spec, 7);
    be->init_kv(kv);
    int32_t tok = greedy_step(*be, prompt, 0, table);
    for (int t = 0; t < 6; ++t) {
      if (path == 0) fed.push_back(tok);
      const int32_t got = greedy_step(*be, {fed[t]}, int(prompt.size()) + t, table);
      logits[path].push_back(cuda_last_step_logits(*be, 0));
      next[path].push_back(got);
      tok = got;
    }
  }
  PathCompare r;
  const int V = spec.vocab_size;
  for (size_t t = 0; t < logits[0].size(); ++t) {
    const double c = cosine(logits[0][t].data(), logits[1][t].data(), V);
    if (std::memcmp(logits[0][t].data(), logits[1][t].data(), size_t(V) * sizeof(float)) != 0) ++r.differing_steps;
    r.worst_cosine = std::min(r.worst_cosine, c);
    if (c < min_cosine) r.failures.push_back("step " + std::to_string(t) + ": cosine " + std::to_string(c));
    if (next[0][t] != next[1][t]) {
      std::vector<float> sorted = logits[1][t];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const float margin = sorted[0] - sorted[1];
      ++r.flips;
      r.worst_flip_margin = std::max(r.worst_flip_margin, margin);
      std::printf("  step %zu: path 0 %d, path 1 %d, margin %.5f\n", t, next[0][t], next[1][t], margin);
      if (margin >= max_flip_margin)
        r.failures.push_back("step " + std::to_string(t) + ": argmax flip at margin " + std::to_string(margin));
    }
  }
  return r;
}

}  // namespace rs::cudatest
