// The host sampler: vLLM's semantics, seeded draws that depend only on (seed, draw index).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "backend/sampling.h"

namespace {
std::vector<float> logits5() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.0f}; }

rs::SampledToken draw(const std::vector<float>& l, const rs::SamplingParams& p, uint64_t index,
                      std::vector<int32_t> prompt = {}, std::vector<int32_t> out = {}) {
  static std::vector<int32_t> keep_prompt, keep_out;
  keep_prompt = std::move(prompt);
  keep_out = std::move(out);
  rs::SamplingState s;
  s.params = &p;
  s.prompt_tokens = keep_prompt;
  s.output_tokens = keep_out;
  s.draw_index = index;
  return rs::sample_token(l, s);
}

std::vector<double> softmax(const std::vector<float>& l, double t = 1.0) {
  double mx = -1e30, sum = 0;
  for (float v : l) mx = std::max(mx, double(v));
  std::vector<double> p;
  for (float v : l) p.push_back(std::exp((v - mx) / t));
  for (double v : p) sum += v;
  for (double& v : p) v /= sum;
  return p;
}
}  // namespace

TEST_SUITE("unit.sampler") {
TEST_CASE("temperature 0 (and no params) is argmax, first index on ties") {
  rs::SamplingParams p;
  p.temperature = 0;
  CHECK(draw(logits5(), p, 0).id == 1);
  CHECK(draw({2.0f, 5.0f, 5.0f}, p, 0).id == 1);
  rs::SamplingState none;
  std::vector<float> l = logits5();
  CHECK(rs::sample_token(l, none).id == 1);
}

TEST_CASE("sampling_uniform is a pure function of (seed, index) in [0, 1)") {
  CHECK(rs::sampling_uniform(7, 3) == rs::sampling_uniform(7, 3));
  CHECK(rs::sampling_uniform(7, 3) != rs::sampling_uniform(7, 4));
  CHECK(rs::sampling_uniform(7, 3) != rs::sampling_uniform(8, 3));
  double sum = 0;
  for (uint64_t i = 0; i < 20000; ++i) {
    float u = rs::sampling_uniform(1, i);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
  }
  CHECK(sum / 20000 == doctest::Approx(0.5).epsilon(0.02));
}

TEST_CASE("draws follow softmax(logits / T) and are reproducible") {
  rs::SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 99;
  std::vector<float> l = logits5();
  std::vector<double> want = softmax(l, 0.7);
  std::vector<int> count(5, 0);
  const int N = 20000;
  for (int i = 0; i < N; ++i) {
    int id = draw(l, p, i).id;
    ++count[id];
    if (i < 50) CHECK(draw(l, p, i).id == id);  // same (seed, index), same token
  }
  for (int k = 0; k < 5; ++k) CHECK(count[k] / double(N) == doctest::Approx(want[k]).epsilon(0.05).scale(1));
}

TEST_CASE("top_k, top_p and min_p never draw outside their sets") {
  std::vector<float> l = logits5();  // order by probability: 1, 2, 0, 4, 3
  rs::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  p.top_k = 2;
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[draw(l, p, i).id];
  CHECK(seen.size() == 2);
  CHECK(seen.count(1));
  CHECK(seen.count(2));
  // top_p: probabilities are about .55 (1) .34 (2) .08 (0) .03 (4) .01 (3): 0.8 keeps 1 and 2.
  p.top_k = 0;
  p.top_p = 0.8f;
  seen.clear();
  std::vector<double> pr = softmax(l);
  REQUIRE(pr[1] + pr[2] >= 0.8);
  REQUIRE(pr[1] < 0.8);
  for (int i = 0; i < 2000; ++i) ++seen[draw(l, p, i).id];
  CHECK(seen.size() == 2);
  // min_p 0.2: keep tokens with prob >= 0.2 x the best: 1 and 2 (0.61 x); 0 (0.14 x) goes.
  p.top_p = 1.0f;
  p.min_p = 0.2f;
  seen.clear();
  for (int i = 0; i < 2000; ++i) ++seen[draw(l, p, i).id];
  CHECK(seen.size() == 2);
  CHECK_FALSE(seen.count(0));
}

TEST_CASE("penalties: repetition over prompt and output, presence and frequency over output") {
  rs::SamplingParams p;
  p.temperature = 0;
  std::vector<float> l = {2.0f, 1.9f, -0.5f};
  p.repetition_penalty = 1.2f;  // 2.0 / 1.2 = 1.67 < 1.9
  CHECK(draw(l, p, 0, {0}).id == 1);
  CHECK(draw(l, p, 0, {}, {0}).id == 1);
  CHECK(draw(l, p, 0, {}, {}).id == 0);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.2f;  // output only
  CHECK(draw(l, p, 0, {0}, {}).id == 0);
  CHECK(draw(l, p, 0, {}, {0}).id == 1);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.06f;  // one occurrence: 1.94 > 1.9; two: 1.88 < 1.9
  CHECK(draw(l, p, 0, {}, {0}).id == 0);
  CHECK(draw(l, p, 0, {}, {0, 0}).id == 1);
  // Negative logits get multiplied by the repetition penalty.
  std::vector<float> neg = {-1.0f, -1.1f};
  p.frequency_penalty = 0;
  p.repetition_penalty = 1.2f;
  CHECK(draw(neg, p, 0, {0}).id == 1);
}

TEST_CASE("logit_bias moves the choice before penalties; logprobs stay raw") {
  rs::SamplingParams p;
  p.temperature = 0;
  p.logprobs = 0;
  std::vector<float> l = logits5();  // argmax 1 (3.0), then 2 (2.5)
  p.logit_bias = {{2, 0.6f}};        // 3.1 > 3.0
  rs::SampledToken t = draw(l, p, 0);
  CHECK(t.id == 2);
  CHECK(t.logprob == doctest::Approx(std::log(softmax(l)[2])).epsilon(1e-5));
  p.logit_bias = {{2, 0.4f}};        // 2.9 < 3.0
  CHECK(draw(l, p, 0).id == 1);
  // Bias first, then the repetition penalty divides the biased logit: (2.5 + 0.7) / 2 = 1.6 < 3.
  p.logit_bias = {{2, 0.7f}};
  p.repetition_penalty = 2.0f;
  CHECK(draw(l, p, 0, {2}).id == 1);
  // -100 removes a token from sampling at any temperature.
  p.repetition_penalty = 1.0f;
  p.temperature = 1.0f;
  p.logit_bias = {{1, -100.0f}, {2, -100.0f}};
  for (uint64_t i = 0; i < 200; ++i) {
    const int id = draw(l, p, i).id;
    CHECK((id != 1 && id != 2));
  }
}

TEST_CASE("an allowed-token mask confines every mode of sampling; logprobs stay raw") {
  std::vector<float> l = logits5();  // argmax 1
  std::vector<uint32_t> mask = {(1u << 0) | (1u << 3)};
  rs::SamplingParams p;
  p.temperature = 0;
  p.logprobs = 0;
  rs::SamplingState s;
  s.params = &p;
  s.allowed = mask;
  rs::SampledToken t = rs::sample_token(l, s);
  CHECK(t.id == 0);
  CHECK(t.logprob == doctest::Approx(std::log(softmax(l)[0])).epsilon(1e-5));
  p.temperature = 1.5f;
  for (uint64_t i = 0; i < 200; ++i) {
    s.draw_index = i;
    const int id = rs::sample_token(l, s).id;
    CHECK((id == 0 || id == 3));
  }
}

TEST_CASE("logprobs are log-softmax of the raw logits, with the top n") {
  rs::SamplingParams p;
  p.temperature = 0.5f;  // must not affect logprobs
  p.repetition_penalty = 2.0f;
  p.logprobs = 3;
  std::vector<float> l = logits5();
  rs::SampledToken t = draw(l, p, 4, {1});
  std::vector<double> want = softmax(l);
  CHECK(t.logprob == doctest::Approx(std::log(want[t.id])).epsilon(1e-5));
  REQUIRE(t.top.size() == 3);
  CHECK(t.top[0].first == 1);
  CHECK(t.top[1].first == 2);
  CHECK(t.top[2].first == 0);
  CHECK(t.top[0].second == doctest::Approx(std::log(want[1])).epsilon(1e-5));
}
}
