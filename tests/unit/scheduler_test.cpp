#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "engine/kv_blocks.h"
#include "engine/request.h"
#include "engine/scheduler.h"

using namespace rs;

namespace {

struct Reqs {
  std::vector<std::unique_ptr<Request>> all;
  Sequence* add(int prompt_len, int n = 1) {
    auto r = std::make_unique<Request>();
    r->id = all.size() + 1;
    r->req.n = n;
    for (int i = 0; i < prompt_len; ++i) r->req.prompt.push_back(static_cast<int32_t>(r->id * 1000 + i));
    for (int c = 0; c < n; ++c) {
      auto s = std::make_unique<Sequence>();
      s->seq_id = r->id * 100 + c;
      s->choice = c;
      s->request = r.get();
      s->tokens = r->req.prompt;
      s->awaiting_fork = n > 1 && c == 0;
      r->seqs.push_back(std::move(s));
    }
    all.push_back(std::move(r));
    return all.back()->seqs[0].get();
  }
};

// Runs the plan as the engine would: commit every chunk, append a token where one is sampled.
void run(Scheduler& s, const StepPlan& plan) {
  for (const auto& sc : plan.seqs) {
    s.commit(sc.seq, sc.num_tokens);
    if (sc.sample) {
      sc.seq->tokens.push_back(1);
      sc.seq->output_tokens.push_back(1);
      sc.seq->state = SeqState::Decoding;
    }
  }
}

int tokens_of(const StepPlan& p, const Sequence* s) {
  for (const auto& sc : p.seqs)
    if (sc.seq == s) return sc.num_tokens;
  return 0;
}

}  // namespace

TEST_SUITE("unit.scheduler") {

TEST_CASE("a long prompt is prefilled in chunks of the token budget, sampling only at the end") {
  KvBlockPool pool(64, 4, true);
  Scheduler s({8, 16}, pool);
  Reqs r;
  Sequence* a = r.add(40);
  s.add(a);
  std::vector<int> chunks;
  std::vector<bool> samples;
  for (int i = 0; i < 3; ++i) {
    auto p = s.schedule();
    REQUIRE(p.seqs.size() == 1);
    chunks.push_back(p.seqs[0].num_tokens);
    samples.push_back(p.seqs[0].sample);
    run(s, p);
  }
  CHECK(chunks == std::vector<int>{16, 16, 8});
  CHECK(samples == std::vector<bool>{false, false, true});
  CHECK(a->state == SeqState::Decoding);
  CHECK(a->block_table.size() == 10);
  auto p = s.schedule();
  CHECK(tokens_of(p, a) == 1);  // now a decode
}

TEST_CASE("decodes go first and prefill chunks fill the rest of the budget") {
  KvBlockPool pool(64, 4, true);
  Scheduler s({8, 10}, pool);
  Reqs r;
  Sequence* a = r.add(3);
  s.add(a);
  run(s, s.schedule());  // a prefilled, decoding now
  Sequence* b = r.add(30);
  s.add(b);
  auto p = s.schedule();
  CHECK(tokens_of(p, a) == 1);
  CHECK(tokens_of(p, b) == 9);
  CHECK(p.seqs[0].seq == a);
}

TEST_CASE("max_num_seqs caps the running set; the rest wait in order") {
  KvBlockPool pool(64, 4, true);
  Scheduler s({2, 100}, pool);
  Reqs r;
  Sequence* a = r.add(3);
  Sequence* b = r.add(3);
  Sequence* c = r.add(3);
  s.add(a);
  s.add(b);
  s.add(c);
  CHECK_FALSE(s.admission_blocked_by_max_seqs());  // nothing runs yet
  auto p = s.schedule();
  CHECK(p.seqs.size() == 2);
  CHECK(s.waiting().front() == c);
  CHECK(s.admission_blocked_by_max_seqs());  // what lets the engine chain steps while c waits
  run(s, p);
  s.remove(a);
  a->state = SeqState::Finished;
  CHECK_FALSE(s.admission_blocked_by_max_seqs());
  p = s.schedule();
  CHECK(tokens_of(p, c) == 3);
  CHECK_FALSE(s.admission_blocked_by_max_seqs());  // nobody waits
}

TEST_CASE("the queue head is never overtaken when it does not fit") {
  KvBlockPool pool(6, 4, false);
  Scheduler s({8, 100}, pool);
  Reqs r;
  Sequence* a = r.add(12);  // 3 blocks
  s.add(a);
  run(s, s.schedule());
  Sequence* big = r.add(16);   // 4 blocks: does not fit in the 3 left
  Sequence* small = r.add(2);  // would fit
  s.add(big);
  s.add(small);
  auto p = s.schedule();
  CHECK(tokens_of(p, a) == 1);
  CHECK(tokens_of(p, big) == 0);
  CHECK(tokens_of(p, small) == 0);
  CHECK(s.waiting().front() == big);
}

TEST_CASE("when blocks run out the latest arrival is preempted and requeued in arrival order") {
  KvBlockPool pool(4, 2, false);
  Scheduler s({8, 100}, pool);
  Reqs r;
  Sequence* a = r.add(4);  // 2 blocks
  Sequence* b = r.add(4);  // 2 blocks
  s.add(a);
  s.add(b);
  run(s, s.schedule());  // both prefilled: pool full, each holds a sampled token needing a block
  CHECK(pool.num_available() == 0);
  auto p = s.schedule();
  REQUIRE(p.preempted.size() == 1);
  CHECK(p.preempted[0] == b);
  CHECK(tokens_of(p, a) == 1);
  CHECK(b->state == SeqState::Queued);
  CHECK(b->num_computed == 0);
  CHECK(b->block_table.empty());
  CHECK(s.preemptions() == 1);
  CHECK(s.waiting().front() == b);
  run(s, p);
  // Once a finishes, b is recomputed from scratch: prompt + its output so far.
  s.remove(a);
  a->state = SeqState::Finished;
  p = s.schedule();
  CHECK(tokens_of(p, b) == 5);
  CHECK(p.seqs[0].sample);
}

TEST_CASE("a sequence that cannot grow and is the latest arrival preempts itself") {
  KvBlockPool pool(2, 2, false);
  Scheduler s({8, 100}, pool);
  Reqs r;
  Sequence* a = r.add(4);
  s.add(a);
  run(s, s.schedule());
  auto p = s.schedule();
  CHECK(p.seqs.empty());
  CHECK(p.preempted == std::vector<Sequence*>{a});
}

TEST_CASE("n = 2 forks after the shared prompt and copies the partial last block on write") {
  KvBlockPool pool(16, 4, true);
  Scheduler s({8, 100}, pool);
  Reqs r;
  Sequence* a = r.add(7, 2);  // 6 shared tokens: one full block + a partial one
  Sequence* b = r.all.back()->seqs[1].get();
  s.add(a);
  auto p = s.schedule();
  REQUIRE(p.seqs.size() == 1);
  CHECK(p.seqs[0].num_tokens == 6);
  CHECK_FALSE(p.seqs[0].sample);
  run(s, p);
  p = s.schedule();
  CHECK(tokens_of(p, a) == 1);
  CHECK(tokens_of(p, b) == 1);
  CHECK(p.seqs[0].sample);
  CHECK(p.seqs[1].sample);
  REQUIRE(p.block_copies.size() == 1);
  CHECK(a->block_table[0] == b->block_table[0]);  // the full block stays shared
  CHECK(a->block_table[1] != b->block_table[1]);
  CHECK(pool.refcount(a->block_table[0]) == 2);
}

TEST_CASE("a cached prefix is reused on admission but at least one token is always computed") {
  KvBlockPool pool(16, 4, true);
  Scheduler s({8, 100}, pool);
  Reqs r;
  Sequence* a = r.add(8);
  // Same prompt tokens for the second request.
  Sequence* b = r.add(8);
  b->tokens = a->tokens;
  s.add(a);
  run(s, s.schedule());
  s.remove(a);
  a->state = SeqState::Finished;
  s.add(b);
  auto p = s.schedule();
  CHECK(tokens_of(p, b) == 4);  // block 0 hit; block 1 recomputed to sample from its last token
  CHECK(pool.hit_tokens() == 4);
  CHECK(pool.query_tokens() == 16);
}

}
