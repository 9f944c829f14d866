// The engine over the real CPU reference backend on the tiny-v3 fixture: its greedy outputs must
// equal HF transformers' (expected.safetensors), whatever batching, chunking, prefix caching or
// preemption the scheduler applies.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/model_spec.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "unit/engine_test_util.h"

using namespace rs;
using rs::testing::collect;
using rs::testing::wait_until;

namespace {

const std::string kDir = std::string(RS_FIXTURES_DIR) + "/models/tiny-v3";

struct TinyV3 {
  ModelSpec spec;
  std::unique_ptr<Weights> weights;
  std::vector<std::vector<int32_t>> prompts, greedy;  // p0..p3 (lengths 1, 6, 29, 77)
  TinyV3() {
    spec = load_model_spec(kDir);
    weights = Weights::load(kDir, spec);
    auto ex = SafetensorsFile::open(kDir + "/expected.safetensors");
    for (int p = 0; p < 4; ++p) {
      prompts.push_back(read(*ex, "p" + std::to_string(p) + ".input_ids"));
      greedy.push_back(read(*ex, "p" + std::to_string(p) + ".greedy"));
    }
  }
  static std::vector<int32_t> read(const SafetensorsFile& f, const std::string& name) {
    const SafetensorsEntry* e = f.find(name);
    REQUIRE_MESSAGE(e != nullptr, name);
    std::vector<int32_t> v(e->nbytes / sizeof(int32_t));
    std::memcpy(v.data(), e->data, e->nbytes);
    return v;
  }
  std::unique_ptr<Engine> engine(EngineConfig cfg) const {
    if (cfg.num_kv_blocks == 0) cfg.num_kv_blocks = 256;
    return Engine::create(make_cpu_backend(spec, *weights, 2), nullptr, cfg);
  }
};

const TinyV3& model() {
  static TinyV3 m;
  return m;
}

GenerationRequest greedy_request(const std::vector<int32_t>& prompt, int max_tokens = 10) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // the fixture's continuations are 10 tokens whatever they contain
  return r;
}

std::vector<int32_t> run_alone(Engine& e, const GenerationRequest& r) {
  auto c = collect(*e.submit(r));
  REQUIRE_FALSE(c.timed_out);
  REQUIRE(c.choices[0].finish == FinishReason::Length);
  return c.choices[0].tokens;
}

// Eight distinct prompts: the fixture's four and four derived ones.
std::vector<std::vector<int32_t>> eight_prompts() {
  const auto& m = model();
  std::vector<std::vector<int32_t>> ps = m.prompts;
  ps.push_back(std::vector<int32_t>(m.prompts[3].begin(), m.prompts[3].begin() + 40));
  ps.push_back(std::vector<int32_t>(m.prompts[2].rbegin(), m.prompts[2].rend()));
  auto cat = m.prompts[1];
  cat.insert(cat.end(), m.prompts[2].begin(), m.prompts[2].end());
  ps.push_back(cat);
  ps.push_back({7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  return ps;
}

}  // namespace

TEST_SUITE("golden.engine") {

TEST_CASE("engine greedy output equals HF's for every fixture prompt") {
  const auto& m = model();
  auto e = m.engine({});
  for (int p = 0; p < 4; ++p) {
    CAPTURE(p);
    CHECK(run_alone(*e, greedy_request(m.prompts[p])) == m.greedy[p]);
  }
}

TEST_CASE("overlapped steps (each decode step launched before the last is read) equal HF's greedy output") {
  const auto& m = model();
  EngineConfig cfg;
  cfg.overlap_steps = 1;  // the CPU backend's launch runs the step at once: the engine's chaining is what is tested
  auto e = m.engine(cfg);
  for (int p = 0; p < 4; ++p) {
    CAPTURE(p);
    CHECK(run_alone(*e, greedy_request(m.prompts[p])) == m.greedy[p]);
  }
  // All four at once: one chained batch after the prefills.
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int p = 0; p < 4; ++p) hs.push_back(e->submit(greedy_request(m.prompts[p])));
  for (int p = 0; p < 4; ++p) {
    CAPTURE(p);
    auto c = collect(*hs[p]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == m.greedy[p]);
  }
  CHECK(wait_until([&] { return e->stats().kv_blocks_used == 0; }));
  CHECK(e->stats().overlapped_steps >= 4 * 8);  // tokens 3..10 of each of the four alone, at least
}

TEST_CASE("overlapped steps with penalties equal the same requests stepped in sync") {
  // Negative penalties (rewarding what was said) change the greedy output towards repeating the
  // newest tokens, so each chained step's penalties must count the token still in flight: a
  // missing or doubled count picks differently.
  const auto& m = model();
  EngineConfig sync_cfg, overlap_cfg;
  sync_cfg.overlap_steps = 0;
  overlap_cfg.overlap_steps = 1;
  auto in_sync = m.engine(sync_cfg);
  auto overlapped = m.engine(overlap_cfg);
  int changed = 0;
  for (int p = 0; p < 4; ++p) {
    CAPTURE(p);
    GenerationRequest r = greedy_request(m.prompts[p]);
    r.sampling.frequency_penalty = -1.5f;
    r.sampling.presence_penalty = -1.0f;
    r.sampling.repetition_penalty = 0.9f;
    const auto want = run_alone(*in_sync, r);
    CHECK(run_alone(*overlapped, r) == want);
    changed += want != m.greedy[p];
  }
  CHECK(changed > 0);  // the penalties did change something
  CHECK(overlapped->stats().overlapped_steps >= 4 * 8);
  CHECK(in_sync->stats().overlapped_steps == 0);
}

TEST_CASE("8 concurrent requests, batched with chunked prefill, equal the same requests one at a time") {
  const auto& m = model();
  auto prompts = eight_prompts();
  std::vector<std::vector<int32_t>> alone;
  {
    EngineConfig cfg;
    cfg.enable_prefix_caching = false;
    auto e = m.engine(cfg);
    for (const auto& p : prompts) alone.push_back(run_alone(*e, greedy_request(p)));
  }
  for (int p = 0; p < 4; ++p) CHECK(alone[p] == m.greedy[p]);

  EngineConfig cfg;
  cfg.max_num_batched_tokens = 48;  // the 77-token prompt takes two chunks, mixed with decodes
  auto e = m.engine(cfg);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& p : prompts) hs.push_back(e->submit(greedy_request(p)));
  for (size_t i = 0; i < hs.size(); ++i) {
    CAPTURE(i);
    auto c = collect(*hs[i]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == alone[i]);
  }
  CHECK(wait_until([&] { return e->stats().kv_blocks_used == 0; }));
}

TEST_CASE("a second request sharing a prefix hits the prefix cache and gives the identical output") {
  const auto& m = model();
  std::vector<int32_t> b(m.prompts[3].begin(), m.prompts[3].begin() + 64);
  b.insert(b.end(), m.prompts[1].begin(), m.prompts[1].end());  // 64 shared tokens, new tail

  std::vector<int32_t> want;
  {
    EngineConfig cfg;
    cfg.enable_prefix_caching = false;
    auto e = m.engine(cfg);
    want = run_alone(*e, greedy_request(b));
  }
  auto e = m.engine({});
  CHECK(run_alone(*e, greedy_request(m.prompts[3])) == m.greedy[3]);
  const auto before = e->stats();
  auto c = collect(*e->submit(greedy_request(b)));
  const auto after = e->stats();
  CHECK(c.choices[0].tokens == want);
  CHECK(c.cached_prompt_tokens == 64);  // four full blocks of 16
  CHECK(after.prefix_hits_tokens - before.prefix_hits_tokens == 64);
  CHECK(after.prefix_queries_tokens - before.prefix_queries_tokens == b.size());
}

TEST_CASE("preemption under a tiny KV pool still gives identical outputs") {
  const auto& m = model();
  auto all = eight_prompts();
  // 29, 29, 35 and 40 tokens: two prompts fill 16 of 19 blocks, and their decodes outgrow it.
  std::vector<std::vector<int32_t>> prompts = {all[2], all[5], all[6], all[4]};
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = m.engine({});
    for (const auto& p : prompts) alone.push_back(run_alone(*e, greedy_request(p)));
  }
  CHECK(alone[0] == m.greedy[2]);
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 19;
  auto e = m.engine(cfg);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& p : prompts) hs.push_back(e->submit(greedy_request(p)));
  for (size_t i = 0; i < hs.size(); ++i) {
    CAPTURE(i);
    auto c = collect(*hs[i]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == alone[i]);
  }
  CHECK(e->stats().preemptions > 0);
  CHECK(wait_until([&] { return e->stats().kv_blocks_used == 0; }));
}

TEST_CASE("cancel frees all the request's blocks by the next step") {
  const auto& m = model();
  auto e = m.engine({});
  auto keep = e->submit(greedy_request(m.prompts[2], 200));
  auto h = e->submit(greedy_request(m.prompts[3], 3000));
  REQUIRE(h->next(std::chrono::seconds(30)));
  h->cancel();
  CHECK(collect(*h).choices[0].finish == FinishReason::Cancelled);
  CHECK(wait_until([&] {
    // Only the other request's blocks remain: ceil((29 + generated) / 16) at most 15.
    auto s = e->stats();
    return s.running == 1 && s.kv_blocks_used <= 15;
  }));
  keep->cancel();
  collect(*keep);
  CHECK(wait_until([&] { return e->stats().kv_blocks_used == 0 && e->stats().running == 0; }));
}

TEST_CASE("n = 2 with a seed is reproducible, and choice 0 equals the n = 1 request") {
  const auto& m = model();
  auto e = m.engine({});
  GenerationRequest r;
  r.prompt = m.prompts[2];
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 50;
  r.sampling.seed = 42;
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.n = 2;
  auto a = collect(*e->submit(r));
  auto b = collect(*e->submit(r));
  REQUIRE(a.choices.size() == 2);
  CHECK(a.choices[0].tokens == b.choices[0].tokens);
  CHECK(a.choices[1].tokens == b.choices[1].tokens);
  CHECK(a.choices[0].tokens != a.choices[1].tokens);
  r.n = 1;
  auto one = collect(*e->submit(r));
  CHECK(one.choices[0].tokens == a.choices[0].tokens);
  CHECK(wait_until([&] { return e->stats().kv_blocks_used == 0; }));
}

TEST_CASE("prompt logprobs from the engine's prefill match log_softmax of HF's logits") {
  const auto& m = model();
  auto e = m.engine({});
  GenerationRequest r = greedy_request(m.prompts[2], 2);
  r.prompt_logprobs = true;
  r.sampling.logprobs = 1;
  auto c = collect(*e->submit(r));
  REQUIRE(c.prompt_logprobs.size() == m.prompts[2].size());
  auto ex = SafetensorsFile::open(kDir + "/expected.safetensors");
  const SafetensorsEntry* lg = ex->find("p2.logits");
  REQUIRE(lg != nullptr);
  const float* L = static_cast<const float*>(lg->data);
  const int V = m.spec.vocab_size;
  for (size_t i = 1; i < m.prompts[2].size(); ++i) {
    const float* row = L + (i - 1) * V;
    double mx = row[0], sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const double want = row[m.prompts[2][i]] - mx - std::log(sum);
    REQUIRE(c.prompt_logprobs[i].has_value());
    CHECK(c.prompt_logprobs[i]->logprob == doctest::Approx(want).epsilon(1e-3));
  }
  REQUIRE(c.choices[0].logprobs.size() == 2);
  CHECK(c.choices[0].logprobs[0].id == m.greedy[2][0]);
  CHECK(c.choices[0].logprobs[0].top.size() == 1);
  CHECK(c.choices[0].logprobs[0].top[0].first == m.greedy[2][0]);
}

}
