#include "engine/scheduler.h"

#include <algorithm>
#include <optional>
#include <string>

#include "common/error.h"

namespace rs {

namespace {
bool arrived_before(const Sequence* a, const Sequence* b) {
  if (a->request->id != b->request->id) return a->request->id < b->request->id;
  return a->choice < b->choice;
}
int ceil_div(int a, int b) { return (a + b - 1) / b; }
// Prompt logprobs need the full logits row of every prefill position back from the backend:
// 256 rows of a 129k vocabulary are 130 MB of fp32, which bounds what one step can ask for.
constexpr int kPromptLogitsChunk = 256;
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& cfg, KvBlockPool& pool) : cfg_(cfg), pool_(pool) {
  if (cfg_.max_num_seqs <= 0) throw Error("max_num_seqs must be positive (got " + std::to_string(cfg_.max_num_seqs) + ")");
  if (cfg_.max_num_batched_tokens <= 0)
    throw Error("max_num_batched_tokens must be positive (got " + std::to_string(cfg_.max_num_batched_tokens) + ")");
}

void Scheduler::add(Sequence* seq) {
  seq->state = SeqState::Queued;
  insert_waiting(seq);
}

void Scheduler::insert_waiting(Sequence* seq) {
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), seq, arrived_before);
  waiting_.insert(it, seq);
}

int Scheduler::reserved_slots() const {
  // Choices not forked yet still need their slots: forking never exceeds max_num_seqs.
  int n = static_cast<int>(running_.size());
  for (const Sequence* s : running_)
    if (s->awaiting_fork) n += s->request->req.n - 1;
  return n;
}

bool Scheduler::admission_blocked_by_max_seqs() const {
  if (waiting_.empty()) return false;
  const Sequence* head = waiting_.front();
  const int slots = head->awaiting_fork ? head->request->req.n : 1;
  return reserved_slots() + slots > cfg_.max_num_seqs;  // schedule()'s admission test
}

int Scheduler::tokens_wanted(const Sequence* seq) const {
  // Before the fork, choice 0 computes the prompt minus its last token: each choice computes
  // that one itself and samples from its own logits row.
  if (seq->awaiting_fork) return seq->prompt_len() - 1 - seq->num_computed;
  return seq->uncomputed();
}

void Scheduler::fork(size_t idx) {
  Sequence* parent = running_[idx];
  parent->awaiting_fork = false;
  auto& siblings = parent->request->seqs;
  size_t at = idx + 1;
  for (auto& sib : siblings) {
    Sequence* s = sib.get();
    if (s == parent || is_terminal(s->state)) continue;
    s->num_computed = parent->num_computed;
    s->block_table = parent->block_table;
    s->block_hashes = parent->block_hashes;
    for (int32_t b : s->block_table) pool_.retain(b);
    s->state = SeqState::Prefilling;
    running_.insert(running_.begin() + static_cast<std::ptrdiff_t>(at++), s);
  }
}

bool Scheduler::allocate_for(Sequence* seq, int k, StepPlan& plan) {
  const int bs = pool_.block_size();
  const int need_total = ceil_div(seq->num_computed + k, bs);
  const int new_blocks = need_total - static_cast<int>(seq->block_table.size());
  // Writing into a partially filled block that another choice also references: copy first.
  const bool cow = seq->num_computed % bs != 0 && !seq->block_table.empty() &&
                   pool_.refcount(seq->block_table.back()) > 1;
  if (pool_.num_available() < std::max(new_blocks, 0) + (cow ? 1 : 0)) return false;
  if (cow) {
    int32_t dst = *pool_.allocate();
    int32_t src = seq->block_table.back();
    plan.block_copies.emplace_back(src, dst);
    pool_.release(src);
    seq->block_table.back() = dst;
  }
  for (int i = 0; i < new_blocks; ++i) seq->block_table.push_back(*pool_.allocate());
  return true;
}

void Scheduler::release_blocks(Sequence* seq) {
  // Tail first, so that under eviction pressure the ends of prefixes go before their starts.
  for (auto it = seq->block_table.rbegin(); it != seq->block_table.rend(); ++it) pool_.release(*it);
  seq->block_table.clear();
  seq->block_hashes.clear();
}

void Scheduler::preempt(Sequence* seq, StepPlan& plan) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) running_.erase(it);
  release_blocks(seq);
  seq->num_computed = 0;
  seq->state = SeqState::Queued;
  insert_waiting(seq);
  plan.preempted.push_back(seq);
  ++preemptions_;
}

int Scheduler::schedule_running(size_t idx, int budget, bool allow_preempt, StepPlan& plan) {
  Sequence* seq = running_[idx];
  if (seq->awaiting_fork && tokens_wanted(seq) == 0) fork(idx);
  int k = std::min(tokens_wanted(seq), budget);
  if (seq->request->req.prompt_logprobs && !seq->request->prompt_logprobs_done)
    k = std::min(k, kPromptLogitsChunk);
  if (k <= 0) return 0;
  while (!allocate_for(seq, k, plan)) {
    if (!allow_preempt) return 0;
    Sequence* victim = running_.back();
    preempt(victim, plan);
    if (victim == seq) return -1;
  }
  plan.seqs.push_back({seq, k, !seq->awaiting_fork && seq->num_computed + k == static_cast<int>(seq->tokens.size())});
  return k;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int budget = cfg_.max_num_batched_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    int k = schedule_running(i, budget, /*allow_preempt=*/true, plan);
    if (k < 0) break;  // the sequence preempted itself: everything after it is gone too
    budget -= k;
    ++i;
  }
  // Admitting while running sequences are being preempted would only thrash.
  if (!plan.preempted.empty()) return plan;

  while (!waiting_.empty() && budget > 0) {
    Sequence* seq = waiting_.front();
    if (admission_blocked_by_max_seqs()) break;
    std::vector<int32_t> matched;
    std::vector<uint64_t> hashes;
    if (seq->num_computed == 0 && pool_.prefix_caching()) {
      // At least one token is always computed on admission: for a plain sequence its logits
      // give the first sample; before a fork it keeps the fork out of admission.
      const int target = seq->awaiting_fork ? seq->prompt_len() - 2 : static_cast<int>(seq->tokens.size()) - 1;
      const bool want_prompt_logits = seq->request->req.prompt_logprobs && !seq->request->prompt_logprobs_done;
      if (!want_prompt_logits && target > 0)
        matched = pool_.match_prefix(seq->tokens, target / pool_.block_size(), &hashes);
      pool_.count_query(seq->tokens.size(), matched.size() * pool_.block_size());
      if (seq->choice == 0 && !seq->counted_prefix_query) {
        seq->request->cached_prompt_tokens = static_cast<int>(matched.size()) * pool_.block_size();
        seq->counted_prefix_query = true;
      }
    }
    seq->block_table = matched;
    seq->block_hashes = hashes;
    seq->num_computed = static_cast<int>(matched.size()) * pool_.block_size();

    running_.push_back(seq);
    waiting_.pop_front();
    seq->state = SeqState::Prefilling;
    const int k = schedule_running(running_.size() - 1, budget, /*allow_preempt=*/false, plan);
    if (k <= 0) {
      // Did not fit: undo the admission; the queue head waits for blocks to free up.
      running_.pop_back();
      release_blocks(seq);
      seq->num_computed = 0;
      seq->state = SeqState::Queued;
      waiting_.push_front(seq);
      break;
    }
    budget -= k;
  }
  return plan;
}

void Scheduler::commit(Sequence* seq, int k) {
  seq->num_computed += k;
  const int bs = pool_.block_size();
  while (static_cast<int>(seq->block_hashes.size() + 1) * bs <= seq->num_computed) {
    const size_t i = seq->block_hashes.size();
    const uint64_t parent = i == 0 ? KvBlockPool::kRootHash : seq->block_hashes[i - 1];
    std::span<const int32_t> toks(seq->tokens.data() + i * bs, bs);
    const uint64_t h = KvBlockPool::chain_hash(parent, toks);
    pool_.register_full_block(seq->block_table[i], h, parent, toks);
    seq->block_hashes.push_back(h);
  }
}

bool Scheduler::reserve_position(Sequence* seq, int pos) {
  // No copy-on-write to consider: the step in flight already wrote into the block that holds
  // pos - 1, so a block shared then was copied when that step was scheduled.
  while (static_cast<int>(seq->block_table.size()) * pool_.block_size() <= pos) {
    std::optional<int32_t> b = pool_.allocate();
    if (!b) return false;
    seq->block_table.push_back(*b);
  }
  return true;
}

void Scheduler::remove(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) running_.erase(it);
  auto wt = std::find(waiting_.begin(), waiting_.end(), seq);
  if (wt != waiting_.end()) waiting_.erase(wt);
  release_blocks(seq);
}

}  // namespace rs
