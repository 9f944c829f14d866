#include <doctest/doctest.h>

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/prompt_logprobs.h"
#include "unit/engine_fake_backend.h"
#include "unit/engine_test_util.h"

using namespace rs;
using namespace rs::testing;

namespace {

using Fixture = FakeEngine;

}  // namespace

TEST_SUITE("unit.engine") {

TEST_CASE("a single greedy request matches the cache-free reference") {
  Fixture f;
  auto req = greedy_request(make_prompt(11, 1), 9);
  auto expect = fake_reference(req.prompt, req.sampling, 9, 101);
  auto h = f.engine->submit(req);
  auto c = collect(*h);
  REQUIRE_FALSE(c.timed_out);
  CHECK(c.choices[0].tokens == expect);
  CHECK(c.choices[0].finish == FinishReason::Length);
  CHECK(c.completion_tokens == 9);
  CHECK(f.fake->violations().empty());
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0; }));
}

TEST_CASE("concurrent requests are batched and give the same outputs as one at a time") {
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 32;  // forces chunked prefill of the longer prompts
  Fixture f(cfg);
  f.fake->close_gate();  // let all of them queue up before the first step
  std::vector<std::shared_ptr<RequestHandle>> hs;
  std::vector<std::vector<int32_t>> expect;
  for (int i = 0; i < 8; ++i) {
    auto req = greedy_request(make_prompt(5 + 9 * i, i), 6 + i);
    expect.push_back(fake_reference(req.prompt, req.sampling, req.max_tokens, 101));
    hs.push_back(f.engine->submit(req));
  }
  f.fake->open_gate();
  for (int i = 0; i < 8; ++i) {
    auto c = collect(*hs[i]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == expect[i]);
  }
  CHECK(f.fake->max_batch() > 1);
  CHECK(f.fake->max_step_tokens() <= 32);
  CHECK(f.fake->violations().empty());
}

TEST_CASE("a shared prefix hits the prefix cache and gives the identical output") {
  Fixture f;
  auto prefix = make_prompt(20, 3);
  auto a = prefix;
  a.push_back(5);
  auto b = prefix;
  b.push_back(6);
  b.push_back(7);
  auto ca = collect(*f.engine->submit(greedy_request(a, 5)));
  CHECK(ca.cached_prompt_tokens == 0);
  auto before = f.engine->stats();
  auto cb = collect(*f.engine->submit(greedy_request(b, 5)));
  auto after = f.engine->stats();
  CHECK(cb.choices[0].tokens == fake_reference(b, greedy_request(b, 5).sampling, 5, 101));
  CHECK(cb.cached_prompt_tokens == 20);  // 5 full blocks of 4
  CHECK(after.prefix_hits_tokens - before.prefix_hits_tokens == 20);
  CHECK(after.prefix_queries_tokens - before.prefix_queries_tokens == b.size());
  CHECK(f.fake->violations().empty());
}

TEST_CASE("prefix caching off: no hits, same output") {
  EngineConfig cfg;
  cfg.enable_prefix_caching = false;
  Fixture f(cfg);
  auto p = make_prompt(20, 4);
  collect(*f.engine->submit(greedy_request(p, 3)));
  auto c = collect(*f.engine->submit(greedy_request(p, 3)));
  CHECK(c.cached_prompt_tokens == 0);
  CHECK(f.engine->stats().prefix_hits_tokens == 0);
  CHECK(c.choices[0].tokens == fake_reference(p, greedy_request(p, 3).sampling, 3, 101));
}

TEST_CASE("preemption by recompute under a tiny KV pool keeps outputs identical") {
  EngineConfig cfg;
  cfg.num_kv_blocks = 12;  // 48 token slots for 6 requests that need up to 9 blocks each
  Fixture f(cfg);
  f.fake->close_gate();
  std::vector<std::shared_ptr<RequestHandle>> hs;
  std::vector<std::vector<int32_t>> expect;
  for (int i = 0; i < 6; ++i) {
    auto req = greedy_request(make_prompt(6 + 2 * i, 10 + i), 24);
    expect.push_back(fake_reference(req.prompt, req.sampling, 24, 101));
    hs.push_back(f.engine->submit(req));
  }
  f.fake->open_gate();
  for (int i = 0; i < 6; ++i) {
    auto c = collect(*hs[i]);
    REQUIRE_FALSE(c.timed_out);
    CHECK(c.choices[0].tokens == expect[i]);
  }
  CHECK(f.engine->stats().preemptions > 0);
  CHECK(f.fake->violations().empty());
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0; }));
}

TEST_CASE("cancel frees every block by the next step and ends the request as cancelled") {
  Fixture f({}, 1024);
  f.fake->allow_steps(2);  // prefill + one decode, then the engine waits at the gate
  auto h = f.engine->submit(greedy_request(make_prompt(30, 5), 2000));
  REQUIRE(wait_until([&] { return f.fake->blocked(); }));
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used > 0; }));
  h->cancel();
  h->cancel();  // idempotent
  f.fake->open_gate();
  auto c = collect(*h);
  CHECK(c.choices[0].finish == FinishReason::Cancelled);
  CHECK(c.choices[0].tokens.size() == 3);  // the step in flight when it was cancelled still reports
  CHECK(wait_until([&] {
    auto s = f.engine->stats();
    return s.kv_blocks_used == 0 && s.running == 0 && s.waiting == 0;
  }));
  // The engine keeps serving.
  auto p = make_prompt(7, 6);
  auto c2 = collect(*f.engine->submit(greedy_request(p, 4)));
  CHECK(c2.choices[0].tokens == fake_reference(p, greedy_request(p, 4).sampling, 4, 101));
}

TEST_CASE("cancel of a queued request removes it from the queue") {
  EngineConfig cfg;
  cfg.max_num_seqs = 1;
  Fixture f(cfg);
  f.fake->allow_steps(1);
  auto a = f.engine->submit(greedy_request(make_prompt(5, 1), 50));
  REQUIRE(wait_until([&] { return f.fake->blocked(); }));
  auto b = f.engine->submit(greedy_request(make_prompt(5, 2), 50));
  b->cancel();
  a->cancel();
  f.fake->open_gate();
  auto cb = collect(*b);
  CHECK(cb.choices[0].finish == FinishReason::Cancelled);
  CHECK(cb.choices[0].tokens.empty());
  CHECK(collect(*a).choices[0].finish == FinishReason::Cancelled);
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0 && f.engine->stats().waiting == 0; }));
}

TEST_CASE("n = 2 shares the prompt, copies the partial block on write, and is reproducible with a seed") {
  Fixture f;
  GenerationRequest req;
  req.prompt = make_prompt(10, 8);  // 9 shared tokens: 2 full blocks + 1 token in a shared partial block
  req.sampling.temperature = 0.8f;
  req.sampling.seed = 1234;
  req.max_tokens = 12;
  req.ignore_eos = true;
  req.n = 2;
  auto c1 = collect(*f.engine->submit(req));
  auto c2 = collect(*f.engine->submit(req));
  REQUIRE(c1.choices.size() == 2);
  CHECK(c1.choices[0].tokens == c2.choices[0].tokens);
  CHECK(c1.choices[1].tokens == c2.choices[1].tokens);
  CHECK(c1.choices[0].tokens != c1.choices[1].tokens);
  CHECK(c1.completion_tokens == 24);
  CHECK(f.fake->copies() > 0);
  CHECK(f.fake->violations().empty());
  // Choice 0 keeps the request's seed: it equals the n = 1 output.
  req.n = 1;
  auto single = collect(*f.engine->submit(req));
  CHECK(single.choices[0].tokens == c1.choices[0].tokens);
  CHECK(single.choices[0].tokens == fake_reference(req.prompt, req.sampling, 12, 101));
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0; }));
}

TEST_CASE("n > 1 with a one-token prompt runs independent choices") {
  Fixture f;
  GenerationRequest req = greedy_request({17}, 5);
  req.n = 3;
  auto c = collect(*f.engine->submit(req));
  REQUIRE(c.choices.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(c.choices[i].tokens == fake_reference({17}, req.sampling, 5, 101));
}

TEST_CASE("a seeded request gives the same tokens alone and in a busy batch") {
  Fixture f;
  GenerationRequest req;
  req.prompt = make_prompt(9, 2);
  req.sampling.temperature = 1.0f;
  req.sampling.seed = 77;
  req.max_tokens = 10;
  req.ignore_eos = true;
  auto alone = collect(*f.engine->submit(req));
  f.fake->close_gate();
  std::vector<std::shared_ptr<RequestHandle>> others;
  for (int i = 0; i < 5; ++i) others.push_back(f.engine->submit(greedy_request(make_prompt(3 + i, 20 + i), 15)));
  auto h = f.engine->submit(req);
  f.fake->open_gate();
  auto busy = collect(*h);
  CHECK(alone.choices[0].tokens == busy.choices[0].tokens);
  for (auto& o : others) collect(*o);
}

TEST_CASE("stop token ids, eos and max_tokens end a choice with the right reason") {
  Fixture f;
  auto p = make_prompt(8, 9);
  auto ref = fake_reference(p, greedy_request(p, 20).sampling, 20, 101);
  GenerationRequest req = greedy_request(p, 20);
  req.stop_token_ids = {ref[3]};
  auto c = collect(*f.engine->submit(req));
  auto upto = std::find(ref.begin(), ref.end(), ref[3]);
  CHECK(c.choices[0].tokens == std::vector<int32_t>(ref.begin(), upto + 1));
  CHECK(c.choices[0].finish == FinishReason::Stop);

  // eos (vocab - 1 for the fake) ends it unless ignore_eos; find a prompt whose output hits it.
  bool found = false;
  for (int salt = 0; salt < 400 && !found; ++salt) {
    auto q = make_prompt(4, salt);
    auto r = fake_reference(q, greedy_request(q, 40).sampling, 40, 101);
    auto e = std::find(r.begin(), r.end(), 100);
    if (e == r.end()) continue;
    found = true;
    GenerationRequest g = greedy_request(q, 40);
    g.ignore_eos = false;
    auto ce = collect(*f.engine->submit(g));
    CHECK(ce.choices[0].tokens == std::vector<int32_t>(r.begin(), e + 1));
    CHECK(ce.choices[0].finish == FinishReason::Stop);
    g.ignore_eos = true;
    auto ci = collect(*f.engine->submit(g));
    CHECK(ci.choices[0].tokens == r);
    CHECK(ci.choices[0].finish == FinishReason::Length);
  }
  CHECK(found);
}

TEST_CASE("min_tokens bans eos and stop tokens until that many tokens exist, then they stop again") {
  Fixture f;
  // eos is 100 for the fake; 42 is a stop token; a banned token becomes the next id up.
  f.fake->set_script({5, 100, 42, 7, 42, 9});
  GenerationRequest g = greedy_request(make_prompt(4, 1), 20);
  g.ignore_eos = false;
  g.stop_token_ids = {42};
  auto c0 = collect(*f.engine->submit(g));
  CHECK(c0.choices[0].tokens == std::vector<int32_t>{5, 100});
  g.min_tokens = 3;  // tokens 2 and 3 may not stop: 100 -> 0, 42 -> 43; token 5 may
  auto c1 = collect(*f.engine->submit(g));
  CHECK(c1.choices[0].tokens == std::vector<int32_t>{5, 0, 43, 7, 42});
  CHECK(c1.choices[0].finish == FinishReason::Stop);
  g.ignore_eos = true;  // eos is then an ordinary token, never banned
  auto c2 = collect(*f.engine->submit(g));
  CHECK(c2.choices[0].tokens == std::vector<int32_t>{5, 100, 43, 7, 42});
  g.min_tokens = 21;
  CHECK_THROWS_WITH_AS(f.engine->submit(g), doctest::Contains("min_tokens"), Error);
}

TEST_CASE("logprobs and prompt logprobs are passed through and computed from the prefill logits") {
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 8;  // prompt logprobs across several prefill chunks
  Fixture f(cfg);
  auto p = make_prompt(13, 4);
  collect(*f.engine->submit(greedy_request(p, 2)));  // warm the prefix cache: must not be used
  GenerationRequest req = greedy_request(p, 3);
  req.sampling.logprobs = 2;
  req.prompt_logprobs = true;
  auto c = collect(*f.engine->submit(req));
  REQUIRE(c.choices[0].logprobs.size() == 3);
  CHECK(c.choices[0].logprobs[0].top.size() == 2);
  CHECK(c.choices[0].logprobs[1].id == c.choices[0].tokens[1]);
  CHECK(c.prompt_logprob_events == 1);
  REQUIRE(c.prompt_logprobs.size() == p.size());
  CHECK_FALSE(c.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < p.size(); ++i) {
    REQUIRE(c.prompt_logprobs[i].has_value());
    std::vector<float> row(101);
    std::vector<int32_t> upto(p.begin(), p.begin() + i);
    for (int v = 0; v < 101; ++v) row[v] = fake_logit(upto, v);
    auto want = logprob_of(row, p[i], 2);
    CHECK(c.prompt_logprobs[i]->id == p[i]);
    CHECK(c.prompt_logprobs[i]->logprob == doctest::Approx(want.logprob));
    CHECK(c.prompt_logprobs[i]->top.size() == 2);
    CHECK(c.prompt_logprobs[i]->top[0].first == want.top[0].first);
  }
}

TEST_CASE("a backend failure ends the requests in that step with an error and the engine keeps serving") {
  Fixture f;
  f.fake->fail_on_step(f.fake->steps() + 1);
  auto c = collect(*f.engine->submit(greedy_request(make_prompt(6, 1), 4)));
  CHECK(c.choices[0].finish == FinishReason::Error);
  CHECK(c.choices[0].error.find("fake backend failure") != std::string::npos);
  auto p = make_prompt(6, 2);
  auto ok = collect(*f.engine->submit(greedy_request(p, 4)));
  CHECK(ok.choices[0].tokens == fake_reference(p, greedy_request(p, 4).sampling, 4, 101));
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0; }));
}

TEST_CASE("a sampled id outside the vocabulary ends that choice with an error and the engine keeps serving") {
  Fixture f;
  f.fake->set_script({5, 101, 7});  // 101: one past the fake vocabulary (a backend bug: the samplers never give one)
  auto c = collect(*f.engine->submit(greedy_request(make_prompt(6, 1), 4)));
  REQUIRE_FALSE(c.timed_out);
  CHECK(c.choices[0].finish == FinishReason::Error);
  CHECK_MESSAGE(c.choices[0].error.find("no valid token for sequence") != std::string::npos, c.choices[0].error);
  CHECK_MESSAGE(c.choices[0].error.find("(id 101, vocabulary 101)") != std::string::npos, c.choices[0].error);
  CHECK(c.choices[0].tokens == std::vector<int32_t>{5});
  f.fake->set_script({});
  auto p = make_prompt(6, 2);
  auto ok = collect(*f.engine->submit(greedy_request(p, 4)));
  CHECK(ok.choices[0].tokens == fake_reference(p, greedy_request(p, 4).sampling, 4, 101));
  CHECK(wait_until([&] { return f.engine->stats().kv_blocks_used == 0; }));
  CHECK(f.fake->violations().empty());
}

TEST_CASE("submit rejects bad requests with the numbers") {
  EngineConfig cfg;
  cfg.max_model_len = 64;
  Fixture f(cfg);
  auto expect_error = [&](GenerationRequest r, const std::string& needle) {
    try {
      f.engine->submit(std::move(r));
      FAIL("no error for " << needle);
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  expect_error(greedy_request({}, 4), "at least one token");
  expect_error(greedy_request({1, 500}, 4), "token id 500 at position 1");
  expect_error(greedy_request(make_prompt(60, 1), 10), "maximum context length is 64 tokens");
  CHECK(f.engine->max_model_len() == 64);
  auto r = greedy_request({1, 2}, 4);
  r.stop = {"x"};
  expect_error(r, "stop strings need a tokenizer");
  r = greedy_request({1, 2}, 4);
  r.n = 0;
  expect_error(r, "n: must be at least 1");
  r = greedy_request({1, 2}, 4);
  r.sampling.top_p = 0;
  expect_error(r, "top_p");
  r = greedy_request({1, 2}, 0);
  expect_error(r, "max_tokens");
  r = greedy_request({1, 2}, 4);
  r.sampling.logprobs = 21;
  expect_error(r, "logprobs");
}

TEST_CASE("the waiting queue has a bound: QueueFullError past max_queued_requests") {
  EngineConfig cfg;
  cfg.max_num_seqs = 1;
  cfg.max_queued_requests = 1;
  Fixture f(cfg, 1024);
  f.fake->allow_steps(1);
  auto a = f.engine->submit(greedy_request(make_prompt(5, 1), 500));
  REQUIRE(wait_until([&] { return f.fake->blocked(); }));  // a is running; the engine is held
  auto b = f.engine->submit(greedy_request(make_prompt(5, 2), 5));
  CHECK_THROWS_AS(f.engine->submit(greedy_request(make_prompt(5, 3), 5)), QueueFullError);
  a->cancel();
  f.fake->open_gate();
  CHECK(collect(*b).choices[0].finish == FinishReason::Length);
}

TEST_CASE("the observer sees first tokens, gaps and completions") {
  struct Counting : Engine::Observer {
    std::atomic<int> first{0}, gaps{0}, finished{0}, completion{0};
    void on_first_token(double s) override { first += s >= 0; }
    void on_token_gap(double s) override { gaps += s >= 0; }
    void on_finished(double, int, int c) override { finished++; completion += c; }
  } obs;
  Fixture f;
  f.engine->set_observer(&obs);
  collect(*f.engine->submit(greedy_request(make_prompt(5, 1), 6)));
  collect(*f.engine->submit(greedy_request(make_prompt(5, 2), 3)));
  CHECK(wait_until([&] { return obs.finished.load() == 2; }));
  CHECK(obs.first.load() == 2);
  CHECK(obs.gaps.load() == 5 + 2);
  CHECK(obs.completion.load() == 9);
  f.engine->set_observer(nullptr);
}

TEST_CASE("shutdown lets running requests finish within the timeout, then refuses new ones") {
  Fixture f;
  auto h = f.engine->submit(greedy_request(make_prompt(5, 1), 20));
  f.engine->shutdown(std::chrono::seconds(10));
  auto c = collect(*h);
  CHECK(c.choices[0].finish == FinishReason::Length);
  CHECK_THROWS_AS(f.engine->submit(greedy_request(make_prompt(5, 1), 2)), Error);
}

TEST_CASE("shutdown with a zero timeout cancels what is still running") {
  Fixture f({}, 1024);
  f.fake->allow_steps(1);
  auto h = f.engine->submit(greedy_request(make_prompt(5, 1), 3000));
  REQUIRE(wait_until([&] { return f.fake->blocked(); }));
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    f.engine->shutdown(std::chrono::milliseconds(0));
    done = true;
  });
  // One step at a time until shutdown returns: 3000 tokens would take far longer than that.
  while (!done) {
    f.fake->allow_steps(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
  auto c = collect(*h);
  CHECK(c.choices[0].finish == FinishReason::Cancelled);
  CHECK(c.choices[0].tokens.size() < 3000);
}

}

TEST_SUITE("unit.engine") {

TEST_CASE("randomised load: mixed lengths, n, seeds, cancels, tiny KV pool and budget; every surviving output is exact") {
  uint64_t preemptions = 0, hits = 0, overlapped = 0;
  // Rounds 4-7 repeat 0-3 with overlapped steps (EngineConfig::overlap_steps).
  for (uint64_t pass = 0; pass < 8; ++pass) {
    const uint64_t round = pass % 4;
    CAPTURE(pass);
    EngineConfig cfg;
    cfg.overlap_steps = pass >= 4 ? 1 : 0;
    cfg.num_kv_blocks = 14 + static_cast<int>(round) * 4;  // block size 4: 56..104 token slots
    cfg.max_num_batched_tokens = 12 + static_cast<int>(round) * 10;
    cfg.max_num_seqs = 4 + static_cast<int>(round) * 3;
    cfg.enable_prefix_caching = round % 2 == 0;
    Fixture f(cfg, 1024);
    uint64_t rng = 0x1234 + round;
    auto next = [&](int mod) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int>((rng >> 33) % static_cast<uint64_t>(mod));
    };
    struct Job {
      GenerationRequest req;
      std::shared_ptr<RequestHandle> h;
      bool cancel;
    };
    std::vector<Job> jobs;
    const auto shared = make_prompt(16, 99);  // some prompts share this prefix
    for (int i = 0; i < 24; ++i) {
      GenerationRequest r;
      r.prompt = next(3) == 0 ? shared : make_prompt(1 + next(30), 200 + i);
      if (r.prompt == shared) r.prompt.push_back(next(50));
      r.max_tokens = 1 + next(20);
      r.ignore_eos = true;
      r.n = 1 + next(3);
      if (r.n == 1 && next(2) == 0) {
        r.sampling.temperature = 0.9f;
        r.sampling.seed = next(1000);
      } else {
        r.sampling.temperature = 0;
      }
      jobs.push_back({r, nullptr, next(5) == 0});
    }
    f.fake->close_gate();  // everything queued before the first step: a reproducible schedule
    for (auto& j : jobs) j.h = f.engine->submit(j.req);
    f.fake->open_gate();
    // Cancels land mid-flight, after a varying number of steps.
    std::thread canceller([&] {
      int k = 0;
      for (auto& j : jobs) {
        if (!j.cancel) continue;
        const int at = 2 + 3 * k++;
        wait_until([&] { return f.fake->steps() >= at; });
        j.h->cancel();
      }
    });
    for (auto& j : jobs) {
      auto c = collect(*j.h);
      REQUIRE_FALSE(c.timed_out);
      const auto want = fake_reference(j.req.prompt, j.req.sampling, j.req.max_tokens, 101);
      REQUIRE(static_cast<int>(c.choices.size()) == j.req.n);
      for (auto& [choice, res] : c.choices) {
        if (res.finish == FinishReason::Cancelled) {
          CHECK(j.cancel);
          // What was produced before the cancel is still a prefix of the right answer.
          CHECK(std::equal(res.tokens.begin(), res.tokens.end(), want.begin()));
          continue;
        }
        CHECK(res.finish == FinishReason::Length);
        CHECK(res.tokens == want);
      }
    }
    canceller.join();
    CHECK(f.fake->violations().empty());
    CHECK(wait_until([&] {
      auto s = f.engine->stats();
      return s.kv_blocks_used == 0 && s.running == 0 && s.waiting == 0;
    }));
    preemptions += f.engine->stats().preemptions;
    hits += f.engine->stats().prefix_hits_tokens;
    overlapped += f.engine->stats().overlapped_steps;
  }
  CHECK(preemptions > 0);  // the pools are small enough that the load exercises preemption
  CHECK(hits > 0);
  CHECK(overlapped > 0);  // the queue drains in every pass: its last requests decode in chains
}

}
