// Overlapped stepping (EngineConfig::overlap_steps): the next decode step launched before the
// step in flight is read, each sequence's token taken from that step. Driven here on the fake
// backend through Backend's default launch/collect, which resolve the chained tokens from the
// previous launch's results; the outputs must be exactly those of stepping in sync, with the
// step past a stop dropped and no block or KV slot misused.
#include <doctest/doctest.h>

#include <algorithm>

#include "engine/engine.h"
#include "unit/engine_fake_backend.h"
#include "unit/engine_test_util.h"

using namespace rs;
using namespace rs::testing;

namespace {

GenerationRequest request(std::vector<int32_t> prompt, int max_tokens, float temperature = 0, uint64_t seed = 0) {
  GenerationRequest r = greedy_request(std::move(prompt), max_tokens);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

EngineConfig overlapped(int overlap = 1, int max_num_seqs = 256) {
  EngineConfig cfg;
  cfg.overlap_steps = overlap;
  cfg.max_num_seqs = max_num_seqs;
  return cfg;
}

}  // namespace

TEST_SUITE("unit.engine") {

TEST_CASE("overlapped steps: greedy and seeded requests give the reference tokens, their decode steps chained") {
  FakeEngine f(overlapped());
  auto g = request(make_prompt(9, 1), 17);
  auto s = request(make_prompt(6, 2), 13, 0.8f, 77);
  auto hg = f.engine->submit(g);
  auto cg = collect(*hg);
  auto hs = f.engine->submit(s);
  auto cs = collect(*hs);
  REQUIRE_FALSE(cg.timed_out);
  REQUIRE_FALSE(cs.timed_out);
  CHECK(cg.choices[0].tokens == fake_reference(g.prompt, g.sampling, 17, 101));
  CHECK(cs.choices[0].tokens == fake_reference(s.prompt, s.sampling, 13, 101));
  CHECK(cg.choices[0].finish == FinishReason::Length);
  CHECK(cg.completion_tokens == 17);
  // Tokens 3.. came from chained steps: the prefill (token 1) is read before anything else is
  // launched, the first decode (token 2) follows it, and no step is launched past max_tokens
  // (known in advance): 15 + 11.
  CHECK(f.fake->chained() == 15 + 11);
  CHECK(f.fake->violations().empty());
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0; }));

  FakeEngine off(overlapped(0));
  auto c0 = collect(*off.engine->submit(g));
  CHECK(c0.choices[0].tokens == cg.choices[0].tokens);
  CHECK(off.fake->chained() == 0);
}

TEST_CASE("overlapped steps: a stop token or eos mid-chain ends the choice there; the step past it is dropped") {
  FakeEngine f(overlapped());
  auto p = make_prompt(8, 3);
  const auto ref = fake_reference(p, request(p, 30).sampling, 30, 101);
  GenerationRequest st = request(p, 30);
  st.stop_token_ids = {ref[5]};
  auto c = collect(*f.engine->submit(st));
  const auto upto = std::find(ref.begin(), ref.end(), ref[5]);
  CHECK(c.choices[0].tokens == std::vector<int32_t>(ref.begin(), upto + 1));
  CHECK(c.choices[0].finish == FinishReason::Stop);
  CHECK(c.completion_tokens == static_cast<int>(upto - ref.begin()) + 1);
  // Tokens 3.. came from chained steps, and one more was launched past the stop (not known yet)
  // and dropped.
  CHECK(f.fake->chained() == (c.completion_tokens - 2) + 1);

  bool found = false;
  for (int salt = 0; salt < 400 && !found; ++salt) {
    auto q = make_prompt(5, salt);
    auto r = fake_reference(q, request(q, 40).sampling, 40, 101);
    auto e = std::find(r.begin(), r.end(), 100);
    if (e == r.end() || e == r.begin()) continue;
    found = true;
    GenerationRequest ge = request(q, 40);
    ge.ignore_eos = false;
    auto ce = collect(*f.engine->submit(ge));
    CHECK(ce.choices[0].tokens == std::vector<int32_t>(r.begin(), e + 1));
    CHECK(ce.choices[0].finish == FinishReason::Stop);
  }
  CHECK(found);
  CHECK(f.fake->violations().empty());
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0 && f.engine->stats().running == 0; }));
}

TEST_CASE("overlapped steps: a batch chains as a whole; a request arriving mid-chain is admitted and exact") {
  FakeEngine f(overlapped());
  std::vector<GenerationRequest> reqs = {request(make_prompt(7, 4), 25), request(make_prompt(3, 5), 25, 1.0f, 5),
                                         request(make_prompt(11, 6), 25)};
  f.fake->close_gate();
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (auto& r : reqs) hs.push_back(f.engine->submit(r));
  f.fake->open_gate();
  // A late request once the first three decode in a chain.
  REQUIRE(wait_until([&] { return f.fake->chained() >= 6; }));
  auto late = request(make_prompt(5, 7), 9, 0.7f, 9);
  auto hl = f.engine->submit(late);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto c = collect(*hs[i]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == fake_reference(reqs[i].prompt, reqs[i].sampling, 25, 101));
  }
  auto cl = collect(*hl);
  REQUIRE_FALSE(cl.timed_out);
  CHECK(cl.choices[0].tokens == fake_reference(late.prompt, late.sampling, 9, 101));
  CHECK(f.fake->max_batch() >= 3);
  CHECK(f.fake->violations().empty());
}

TEST_CASE("overlapped steps: requests kept waiting by max_num_seqs do not stop the chain; they start once a slot frees") {
  FakeEngine f(overlapped(1, /*max_num_seqs=*/2));
  std::vector<GenerationRequest> reqs = {request(make_prompt(7, 4), 30), request(make_prompt(3, 5), 30, 1.0f, 5),
                                         request(make_prompt(11, 6), 8), request(make_prompt(5, 7), 8, 0.7f, 9)};
  f.fake->close_gate();
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (auto& r : reqs) hs.push_back(f.engine->submit(r));
  // Twelve steps: the first two decode about ten tokens each while the other two wait (the first
  // two need 30). Stepping in sync, no step would be chained before those two finished.
  f.fake->allow_steps(12);
  REQUIRE(wait_until([&] { return f.fake->steps() == 12 && f.fake->blocked(); }));
  CHECK(f.fake->chained() >= 2 * 8);
  CHECK(f.engine->stats().waiting == 2);
  f.fake->open_gate();
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    auto c = collect(*hs[i]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == fake_reference(reqs[i].prompt, reqs[i].sampling, reqs[i].max_tokens, 101));
  }
  CHECK(f.fake->max_batch() == 2);
  CHECK(f.fake->violations().empty());
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0 && f.engine->stats().running == 0; }));
}

TEST_CASE("overlapped steps: a cancel mid-chain ends the request as cancelled and frees its blocks") {
  FakeEngine f(overlapped());
  auto r = request(make_prompt(6, 8), 240);
  f.fake->allow_steps(30);  // the engine stops at the gate after 30 steps: the cancel lands mid-request
  auto h = f.engine->submit(r);
  REQUIRE(wait_until([&] { return f.fake->chained() >= 20; }));
  h->cancel();
  f.fake->open_gate();
  auto c = collect(*h);
  REQUIRE_FALSE(c.timed_out);
  CHECK(c.choices[0].finish == FinishReason::Cancelled);
  const auto want = fake_reference(r.prompt, r.sampling, static_cast<int>(c.choices[0].tokens.size()), 101);
  CHECK(c.choices[0].tokens == want);
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0 && f.engine->stats().running == 0; }));
  CHECK(f.fake->violations().empty());
}

TEST_CASE("overlapped steps: penalties chain, each step's output tokens ending with the token in flight") {
  // The fake backend records a violation whenever a sampled step's penalty outputs differ from
  // the sequence's outputs so far (for a chained step: the host's ones plus the resolved token).
  FakeEngine f(overlapped());
  auto r = request(make_prompt(6, 9), 12, 0.7f, 5);
  r.sampling.presence_penalty = 0.5f;
  r.sampling.repetition_penalty = 1.2f;
  auto q = request(make_prompt(8, 4), 9);
  q.sampling.frequency_penalty = -0.25f;
  auto cr = collect(*f.engine->submit(r));
  auto cq = collect(*f.engine->submit(q));
  REQUIRE_FALSE(cr.timed_out);
  REQUIRE_FALSE(cq.timed_out);
  CHECK(cr.choices[0].tokens == fake_reference(r.prompt, r.sampling, 12, 101));
  CHECK(cq.choices[0].tokens == fake_reference(q.prompt, q.sampling, 9, 101));
  CHECK(f.fake->chained() == 10 + 7);  // tokens 3.. of each (see the first case)
  CHECK(f.fake->violations().empty());

  // Forks (n = 2) and preemption (a pool too small for all four sequences: prompts and outputs
  // recomputed) with penalties: every sampled step's penalty outputs are still the outputs so far.
  FakeEngine g(overlapped(), /*kv_blocks=*/12);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 3; ++i) {
    auto p = request(make_prompt(9, 20 + i), 20, 0.8f, 40 + uint64_t(i));
    p.sampling.presence_penalty = 0.4f;
    p.n = i == 0 ? 2 : 1;
    hs.push_back(g.engine->submit(p));
  }
  for (auto& h : hs) {
    auto c = collect(*h);
    REQUIRE_FALSE(c.timed_out);
    for (const auto& [idx, ch] : c.choices) CHECK(ch.tokens.size() == 20);
  }
  CHECK(g.engine->stats().preemptions > 0);
  CHECK(g.fake->chained() > 0);
  CHECK(g.fake->violations().empty());
}

}  // TEST_SUITE
