#pragma once
// Helpers for the CUDA executor's GPU tests (suite gpu.cuda): GPU presence, device buffers,
// bf16 rounding, cosine similarity.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

}  // namespace rs::cudatest
