#pragma once
// What a request asks of the sampler, and the per-step state that makes a seeded request
// reproducible whatever else is batched with it: the random draw for output token t is a pure
// function of (seed, t), never of a shared generator.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace rs {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;
  int top_k = 0;             // 0 or -1: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  int logprobs = -1;         // -1: none; 0: the chosen token's; n: also the n most likely
  // Added to the logits before penalties and sampling (OpenAI logit_bias; vLLM applies it in
  // that order); logprobs still come from the raw logits. Ids unique and inside the vocabulary.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct SamplingState {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_tokens;  // repetition penalty covers prompt and output (vLLM)
  std::span<const int32_t> output_tokens;  // presence/frequency penalties cover output only
  uint64_t draw_index = 0;                 // = number of tokens this sequence sampled before
  // Guided decoding (JSON mode): bit id % 32 of word id / 32 set = the token may be sampled;
  // the others are at -inf before anything else. Empty: every token may.
  std::span<const uint32_t> allowed;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;                          // log-softmax of the raw logits (vLLM default)
  std::vector<std::pair<int32_t, float>> top;    // the n most likely, by the same logprobs
};

// Host sampler over one row of logits (fp32). Used by the CPU backend, and the reference the
// GPU sampler is tested against.
SampledToken sample_token(std::span<const float> logits, const SamplingState& state);

// Uniform in [0,1) for draw `index` of a request seeded with `seed` (shared with the GPU sampler).
float sampling_uniform(uint64_t seed, uint64_t index);

}  // namespace rs
