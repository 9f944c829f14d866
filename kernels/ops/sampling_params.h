#pragma once
// GPU sampler with the host sampler's semantics (src/backend/sampler.cpp, vLLM's order):
// logit bias and penalties on the raw logits, then temperature, min_p, top_k, top_p over the ranking
// (probability descending, lower id first on ties), one uniform draw u = rs::sampling_uniform
// (seed, draw_index) and the inverse CDF walked in token-id order; logprobs from the raw logits.
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

constexpr int kMaxTopLogprobs = 20;  // vLLM's limit

struct SampleRow {
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  float presence = 0.f, frequency = 0.f, repetition = 1.f;
  int top_k = 0;
  int logprobs = -1;       // top entries wanted (<= kMaxTopLogprobs)
  float uniform = 0.f;     // sampling_uniform(seed, draw_index), computed on the host
  int logits_row = 0;
  int prompt_off = 0, prompt_len = 0, output_off = 0, output_len = 0;  // into `tokens`
  int bias_off = 0, bias_len = 0;  // into `tokens`: bias_len pairs (id, bias as float bits)
  int mask_off = -1;               // into `tokens`: (vocab + 31) / 32 allowed-token bitmask words, or none
  // A chained step's row (>= 0): the output tokens end with one the host has not seen yet, the
  // forward pass's input token of this row, read from `resolved` (EmbedParams::resolved).
  int pending_row = -1;
};

struct SampleResult {
  int32_t id = -1;
  float logprob = 0.f;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// Per-segment summary of one raw logits row, computed by a wide pre-pass so the one-block-per-row
// sampler never streams the whole vocabulary for the log-sum-exp or a plain greedy argmax:
// max, its lowest id, and sum(exp(x - max)) over the segment (double: see sampling.cuh).
struct LogitStats {
  double sumexp;
  float max;
  int argmax;
};
constexpr int kLogitStatsSegmentElems = 1024;  // one 256-thread block per segment, 4 loads a thread
constexpr int kLogitStatsMaxSegments = 256;    // longer rows get longer segments
__host__ __device__ inline int logit_stats_segments(int vocab) {
  const int s = (vocab + kLogitStatsSegmentElems - 1) / kLogitStatsSegmentElems;
  return s < 1 ? 1 : (s > kLogitStatsMaxSegments ? kLogitStatsMaxSegments : s);
}

struct SamplingParamsDev {
  const float* logits = nullptr;  // [rows, vocab]
  int vocab = 0, n = 0;
  const SampleRow* rows = nullptr;  // [n]
  const int32_t* tokens = nullptr;  // penalty token and logit-bias pool
  const int32_t* resolved = nullptr;  // the forward pass's input tokens by row (SampleRow::pending_row)
  float* work = nullptr;            // [n, vocab] scratch
  int32_t* flags = nullptr;         // [n, vocab] zero before and after the kernel
  int32_t* counts = nullptr;        // [n, vocab] zero before and after the kernel
  SampleResult* out = nullptr;      // [n]
  int32_t* ids = nullptr;           // [n] the chosen ids again, in device memory (optional)
  LogitStats* stats = nullptr;      // [n, logit_stats_segments(vocab)] scratch
};
constexpr int kSamplingThreads = 1024;
void launch_sampling(const SamplingParamsDev& p, cudaStream_t stream);

}  // namespace rs::cuda
