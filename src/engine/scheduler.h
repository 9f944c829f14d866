#pragma once
// Continuous batching: which sequences run in the next step, with how many tokens each, and
// which KV blocks they use. First come, first served:
//  - running sequences go first, in arrival order, one decode token each or their next prefill
//    chunk, until the step's token budget (max_num_batched_tokens) is spent;
//  - when a running sequence needs a block and none is left, the most recently arrived running
//    sequence is preempted (its blocks freed, its tokens recomputed later), possibly itself;
//  - then waiting sequences are admitted in order while the budget, max_num_seqs and KV blocks
//    allow. The head of the queue is never overtaken: a request that does not fit blocks those
//    behind it, so a long prompt cannot starve.
// The scheduler only moves sequences and block ids; the engine runs the step and commits.
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "engine/kv_blocks.h"
#include "engine/request.h"

namespace rs {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
};

struct ScheduledSeq {
  Sequence* seq;
  int num_tokens;  // tokens [seq->num_computed, seq->num_computed + num_tokens) this step
  bool sample;     // the chunk reaches the end of the sequence: sample the next token
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  std::vector<std::pair<int32_t, int32_t>> block_copies;  // copy-on-write, before the forward
  std::vector<Sequence*> preempted;                       // this step, for stats and logs
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvBlockPool& pool);

  // Enqueues choice 0 of a new request (the other choices appear at the fork).
  void add(Sequence* seq);
  StepPlan schedule();
  // After the step: the scheduled tokens' KV is now in the blocks; newly full blocks enter the
  // prefix cache.
  void commit(Sequence* seq, int num_tokens);
  // A chained decode step (the engine's overlapped stepping) writes `seq`'s KV at `pos` before
  // the step in flight has been committed: gives it the block for `pos` if it has none yet.
  // False (nothing preempted) when no block is free.
  bool reserve_position(Sequence* seq, int pos);
  // Removes a sequence from whichever queue holds it and releases its blocks (finish, cancel,
  // failure). The caller sets its terminal state.
  void remove(Sequence* seq);

  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  // Whether the next schedule() would admit nobody for lack of sequence slots: the queue head
  // needs more than max_num_seqs leaves free (a server running flat out with more clients than
  // max_num_seqs). Until a running sequence finishes, such waiting changes nothing.
  bool admission_blocked_by_max_seqs() const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  // Schedules up to `budget` tokens of `seq` (already in running_ at index `idx`). Returns the
  // number of tokens scheduled, or -1 when `seq` itself had to be preempted.
  int schedule_running(size_t idx, int budget, bool allow_preempt, StepPlan& plan);
  int tokens_wanted(const Sequence* seq) const;
  void fork(size_t idx);
  bool allocate_for(Sequence* seq, int num_tokens, StepPlan& plan);
  void preempt(Sequence* seq, StepPlan& plan);
  void release_blocks(Sequence* seq);
  void insert_waiting(Sequence* seq);
  int reserved_slots() const;

  SchedulerConfig cfg_;
  KvBlockPool& pool_;
  std::vector<Sequence*> running_;  // arrival order
  std::deque<Sequence*> waiting_;   // arrival order (preempted sequences go back in place)
  uint64_t preemptions_ = 0;
};

}  // namespace rs
