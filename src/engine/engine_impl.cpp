// The engine loop: one thread that drains the submission queue, honours cancellations, asks the
// scheduler for a step, runs it on the backend and turns the results into channel events.
// Nothing throws across a step: a request that cannot continue ends with an error event.
#include <algorithm>
#include <cmath>
#include <climits>
#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/kv_blocks.h"
#include "engine/prompt_logprobs.h"
#include "engine/request.h"
#include "engine/request_channel.h"
#include "engine/request_validation.h"
#include "engine/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace rs {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Choice i > 0 of a seeded request gets its own stream; choice 0 keeps the request's seed, so
// n = 1 and choice 0 of n > 1 agree.
uint64_t choice_seed(uint64_t seed, int choice) {
  if (choice == 0) return seed;
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(choice);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The sampler's view of a sequence's next draw (JSON mode's mask is the caller's). With a token
// in flight (a chained step) that token is one more output, which output_tokens does not hold
// yet: the backend appends it (SeqStep::token_from_previous).
SamplingState sampling_state(const Sequence& s, bool token_in_flight) {
  const GenerationRequest& g = s.request->req;
  const size_t outputs = s.output_tokens.size() + (token_in_flight ? 1 : 0);
  SamplingState st;
  st.params = static_cast<int>(outputs) < g.min_tokens ? &s.sampling_min : &s.sampling;
  st.prompt_tokens = g.prompt;
  st.output_tokens = s.output_tokens;
  st.draw_index = outputs;
  return st;
}

// min_tokens: the sampler sees EOS (unless ignored) and the stop tokens at -inf, on top of any
// logit_bias the request has for them.
SamplingParams with_stop_tokens_banned(const SamplingParams& p, const GenerationRequest& g,
                                       const std::vector<int32_t>& eos_ids) {
  SamplingParams out = p;
  auto ban = [&](int32_t id) {
    for (auto& [t, b] : out.logit_bias)
      if (t == id) {
        b = -INFINITY;
        return;
      }
    out.logit_bias.emplace_back(id, -INFINITY);
  };
  if (!g.ignore_eos)
    for (int32_t e : eos_ids) ban(e);
  for (int32_t t : g.stop_token_ids) ban(t);
  return out;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<Backend> backend, const Tokenizer* tok, const EngineConfig& cfg);
  ~EngineImpl() override;

  std::shared_ptr<RequestHandle> submit(GenerationRequest req) override;
  EngineStats stats() const override;
  int max_model_len() const override { return max_model_len_; }
  void shutdown(std::chrono::milliseconds timeout) override;
  void set_observer(Observer* obs) override { observer_.store(obs, std::memory_order_release); }

 private:
  void run();
  void admit(std::unique_ptr<Request> r);
  void handle_cancellations(bool cancel_all);
  // A launched step whose results are not processed yet (overlapped stepping).
  struct InFlight {
    std::vector<ScheduledSeq> seqs;
    std::vector<char> return_logits;
  };
  void step();
  // The in-flight step's sequences all decode on and nothing else waits: the next step can be
  // launched before its results are read.
  bool chainable(const InFlight& f) const;
  std::optional<InFlight> launch_chained(const InFlight& f);
  void finish_step(const InFlight& f);
  void on_sampled(Sequence* seq, const SampledToken& tok, Clock::time_point now);
  void record_prompt_logprobs(Request* r, int start_pos, int num_tokens, const std::vector<float>& logits);
  void finish_seq(Sequence* seq, SeqState state, FinishReason reason, RequestEvent ev);
  void fail_request(Request* r, const std::string& message);
  void retire_finished();
  void publish_stats();
  RequestEvent event_for(Sequence* seq);

  std::unique_ptr<Backend> backend_;
  const Tokenizer* tok_;
  std::unique_ptr<JsonMasker> json_masker_;  // built at the first JSON-mode request
  EngineConfig cfg_;
  int vocab_ = 0;
  int max_model_len_ = 0;
  int num_blocks_ = 0;
  std::vector<int32_t> eos_ids_;

  std::unique_ptr<KvBlockPool> pool_;
  std::unique_ptr<Scheduler> sched_;
  std::map<uint64_t, std::unique_ptr<Request>> live_;  // engine thread only
  uint64_t next_seq_id_ = 1;
  bool overlap_ = false;
  std::optional<InFlight> inflight_;

  std::shared_ptr<EngineInbox> inbox_;
  std::deque<std::unique_ptr<Request>> submitted_;  // guarded by inbox_->mu
  bool stop_ = false, cancel_all_ = false;           // guarded by inbox_->mu
  std::atomic<bool> accepting_{true};
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<int> outstanding_{0};  // submitted and not yet retired
  std::atomic<Observer*> observer_{nullptr};
  std::thread thread_;
  std::mutex shutdown_mu_;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  uint64_t prompt_tokens_total_ = 0, generation_tokens_total_ = 0, finished_total_ = 0, overlapped_total_ = 0;
};

EngineImpl::EngineImpl(std::unique_ptr<Backend> backend, const Tokenizer* tok, const EngineConfig& cfg)
    : backend_(std::move(backend)), tok_(tok), cfg_(cfg), inbox_(std::make_shared<EngineInbox>()) {
  if (!backend_) throw Error("engine: no backend");
  const ModelSpec& spec = backend_->spec();
  vocab_ = spec.vocab_size;
  if (cfg_.block_size <= 0) throw Error("block_size must be positive (got " + std::to_string(cfg_.block_size) + ")");
  if (cfg_.num_kv_blocks > 0) {
    num_blocks_ = cfg_.num_kv_blocks;
  } else {
    // Never more than the engine could use: max_num_seqs sequences of the longest length.
    const int64_t longest = cfg_.max_model_len > 0 ? cfg_.max_model_len : spec.max_position_embeddings;
    const int64_t useful = static_cast<int64_t>(std::max(cfg_.max_num_seqs, 1)) *
                           ((longest + cfg_.block_size - 1) / cfg_.block_size);
    num_blocks_ = static_cast<int>(std::min<int64_t>(backend_->max_kv_blocks(cfg_.block_size, cfg_.kv_budget_bytes),
                                                     std::min<int64_t>(useful, INT32_MAX)));
  }
  if (num_blocks_ <= 0)
    throw Error("KV cache: the backend has room for no blocks of " + std::to_string(cfg_.block_size) + " tokens");
  const int64_t kv_tokens = static_cast<int64_t>(num_blocks_) * cfg_.block_size;
  if (cfg_.max_model_len > 0) {
    max_model_len_ = cfg_.max_model_len;
    if (max_model_len_ > spec.max_position_embeddings)
      throw Error("--max-model-len " + std::to_string(max_model_len_) + " exceeds the model's max_position_embeddings " +
                  std::to_string(spec.max_position_embeddings));
    if (max_model_len_ > kv_tokens)
      throw Error("--max-model-len " + std::to_string(max_model_len_) + " is more than the KV cache holds (" +
                  std::to_string(num_blocks_) + " blocks of " + std::to_string(cfg_.block_size) + " = " +
                  std::to_string(kv_tokens) + " tokens); lower it or give the KV cache more memory");
  } else {
    // A sequence must fit in the cache on its own, or preemption could never make room for it.
    max_model_len_ = static_cast<int>(std::min<int64_t>(spec.max_position_embeddings, kv_tokens));
    if (max_model_len_ < spec.max_position_embeddings)
      std::fprintf(stderr, "rackserve: max model length %d (the KV cache holds %lld tokens; the model allows %d)\n",
                   max_model_len_, static_cast<long long>(kv_tokens), spec.max_position_embeddings);
  }
  backend_->init_kv(KvConfig{cfg_.block_size, num_blocks_});
  eos_ids_ = tok_ ? tok_->eos_ids() : std::vector<int32_t>{};
  if (eos_ids_.empty())
    for (int e : spec.eos_token_ids) eos_ids_.push_back(e);

  pool_ = std::make_unique<KvBlockPool>(num_blocks_, cfg_.block_size, cfg_.enable_prefix_caching);
  sched_ = std::make_unique<Scheduler>(SchedulerConfig{cfg_.max_num_seqs, cfg_.max_num_batched_tokens}, *pool_);
  overlap_ = cfg_.overlap_steps > 0 || (cfg_.overlap_steps < 0 && backend_->overlaps_steps());
  stats_.kv_blocks_total = num_blocks_;
  thread_ = std::thread([this] { run(); });
}

EngineImpl::~EngineImpl() { shutdown(std::chrono::milliseconds(0)); }

std::shared_ptr<RequestHandle> EngineImpl::submit(GenerationRequest req) {
  if (!accepting_.load()) throw Error("the engine is shutting down and accepts no new requests");
  RequestLimits lim;
  lim.vocab_size = vocab_;
  lim.max_model_len = max_model_len_;
  lim.max_num_seqs = cfg_.max_num_seqs;
  lim.block_size = cfg_.block_size;
  lim.num_kv_blocks = num_blocks_;
  lim.has_tokenizer = tok_ != nullptr;
  validate_request(req, lim);

  auto r = std::make_unique<Request>();
  r->id = next_request_id_.fetch_add(1);
  r->arrival = Clock::now();
  r->req = std::move(req);
  r->channel = std::make_shared<RequestChannel>(r->id, r->req.n, inbox_);
  std::shared_ptr<RequestHandle> handle = r->channel;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    if (stop_) throw Error("the engine is shutting down and accepts no new requests");
    int waiting;
    {
      std::lock_guard<std::mutex> sl(stats_mu_);
      waiting = stats_.waiting;
    }
    if (waiting + static_cast<int>(submitted_.size()) >= cfg_.max_queued_requests)
      throw QueueFullError("the waiting queue is full (" + std::to_string(cfg_.max_queued_requests) +
                           " requests); retry later");
    submitted_.push_back(std::move(r));
    outstanding_.fetch_add(1);
  }
  inbox_->cv.notify_all();
  return handle;
}

EngineStats EngineImpl::stats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return stats_;
}

void EngineImpl::shutdown(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  accepting_.store(false);
  if (!thread_.joinable()) return;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (outstanding_.load() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    cancel_all_ = true;
    stop_ = true;
  }
  inbox_->cv.notify_all();
  thread_.join();
}

void EngineImpl::run() {
  for (;;) {
    std::deque<std::unique_ptr<Request>> incoming;
    bool cancel_all = false, stop = false;
    {
      std::unique_lock<std::mutex> lk(inbox_->mu);
      inbox_->cv.wait(lk, [&] {
        return stop_ || cancel_all_ || !submitted_.empty() || inbox_->cancel_pending || sched_->has_work() ||
               inflight_.has_value();
      });
      incoming.swap(submitted_);
      if (!incoming.empty()) {
        // Until the next publish_stats they are in neither submitted_ nor the published count:
        // count them as waiting now, or submit() could admit past max_queued_requests while a
        // step runs.
        std::lock_guard<std::mutex> sl(stats_mu_);
        stats_.waiting += static_cast<int>(incoming.size());
      }
      inbox_->cancel_pending = false;
      cancel_all = cancel_all_;
      stop = stop_;
    }
    try {
      for (auto& r : incoming) admit(std::move(r));
      handle_cancellations(cancel_all);
      if (sched_->has_work() || inflight_) step();
      retire_finished();
    } catch (const std::exception& e) {
      // A bug in the engine itself: fail everything in flight rather than die or hang.
      std::fprintf(stderr, "rackserve engine: internal error: %s\n", e.what());
      if (inflight_) {
        inflight_.reset();
        try {
          backend_->collect();
        } catch (const std::exception&) {
        }
      }
      for (auto& [id, r] : live_) fail_request(r.get(), std::string("internal engine error: ") + e.what());
      retire_finished();
    }
    publish_stats();
    if (stop && live_.empty()) return;
  }
}

void EngineImpl::admit(std::unique_ptr<Request> r) {
  const GenerationRequest& g = r->req;
  const int P = r->prompt_len();
  const bool share_prompt = g.n > 1 && P >= 2;
  for (int c = 0; c < g.n; ++c) {
    auto s = std::make_unique<Sequence>();
    s->seq_id = next_seq_id_++;
    s->choice = c;
    s->request = r.get();
    s->tokens = g.prompt;
    s->sampling = g.sampling;
    s->sampling.seed = choice_seed(g.sampling.seed, c);
    if (g.min_tokens > 0) s->sampling_min = with_stop_tokens_banned(s->sampling, g, eos_ids_);
    if (tok_) s->decoder.emplace(*tok_, g.skip_special_tokens);
    if (g.json_object)
      s->json.emplace(g.json_wrapped ? JsonState::with_wrapper(g.json_wrapped.get())
                                     : JsonState::with_schema(g.json_schema.get()));
    s->stop = StopChecker(g.stop, g.include_stop_str_in_output);
    s->awaiting_fork = share_prompt && c == 0;
    r->seqs.push_back(std::move(s));
  }
  if (g.prompt_logprobs) {
    r->prompt_logprobs.assign(P, std::nullopt);
    r->prompt_logprobs_done = P <= 1;
  }
  if (g.json_object && !json_masker_)  // validation guarantees a tokenizer
    json_masker_ = std::make_unique<JsonMasker>(*tok_, vocab_, eos_ids_);
  for (auto& s : r->seqs)
    if (!share_prompt || s->choice == 0) sched_->add(s.get());
  prompt_tokens_total_ += P;
  live_.emplace(r->id, std::move(r));
}

void EngineImpl::handle_cancellations(bool cancel_all) {
  for (auto& [id, r] : live_) {
    if (!cancel_all && !r->channel->cancel_requested()) continue;
    for (auto& s : r->seqs) {
      if (is_terminal(s->state)) continue;
      RequestEvent ev = event_for(s.get());
      finish_seq(s.get(), SeqState::Cancelled, FinishReason::Cancelled, std::move(ev));
    }
  }
}

RequestEvent EngineImpl::event_for(Sequence* seq) {
  Request* r = seq->request;
  RequestEvent ev;
  ev.choice = seq->choice;
  ev.prompt_tokens = r->prompt_len();
  ev.completion_tokens = r->completion_tokens;
  ev.cached_prompt_tokens = r->cached_prompt_tokens;
  if (r->req.prompt_logprobs && !r->prompt_logprobs_sent && r->prompt_logprobs_done) {
    ev.prompt_logprobs = r->prompt_logprobs;
    r->prompt_logprobs_sent = true;
  }
  return ev;
}

void EngineImpl::finish_seq(Sequence* seq, SeqState state, FinishReason reason, RequestEvent ev) {
  sched_->remove(seq);
  seq->state = state;
  seq->finish = reason;
  ev.finish = reason;
  seq->request->channel->push(std::move(ev));
}

void EngineImpl::fail_request(Request* r, const std::string& message) {
  for (auto& s : r->seqs) {
    if (is_terminal(s->state)) continue;
    RequestEvent ev = event_for(s.get());
    ev.error = message;
    finish_seq(s.get(), SeqState::Failed, FinishReason::Error, std::move(ev));
  }
}

void EngineImpl::step() {
  if (inflight_) {
    // Launch the next step first (when it can be chained), then read the one in flight: the host
    // work of its results (detokenising, stop strings, events) runs while the device computes.
    std::optional<InFlight> next;
    if (overlap_ && chainable(*inflight_)) next = launch_chained(*inflight_);
    InFlight done = std::move(*inflight_);
    inflight_ = std::move(next);
    finish_step(done);
    return;
  }
  StepPlan plan = sched_->schedule();
  // The backend call can be long: what it runs counts as running, and what is left as waiting,
  // for submit()'s queue bound and /metrics while it does.
  publish_stats();
  if (plan.empty()) {
    // Nothing runs although work is queued: the queue head can never fit (submit checks this,
    // so this is a safety net against a livelock, not an expected path).
    if (!sched_->waiting().empty() && sched_->running().empty())
      fail_request(sched_->waiting().front()->request, "request does not fit in the KV cache");
    return;
  }
  Batch batch;
  batch.block_copies = plan.block_copies;
  batch.seqs.reserve(plan.seqs.size());
  InFlight f;
  f.seqs = plan.seqs;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& sc = plan.seqs[i];
    Sequence* s = sc.seq;
    Request* r = s->request;
    SeqStep st;
    st.seq_id = s->seq_id;
    st.tokens = std::span<const int32_t>(s->tokens.data() + s->num_computed, sc.num_tokens);
    st.start_pos = s->num_computed;
    st.block_table = s->block_table;
    st.sample = sc.sample;
    // Position p's logits score prompt token p + 1: only the prefill up to P - 1 matters.
    st.return_logits = r->req.prompt_logprobs && !r->prompt_logprobs_done && s->num_computed < r->prompt_len() - 1;
    st.sampling = sampling_state(*s, false);
    if (s->json && sc.sample) {
      json_masker_->allowed(*s->json, s->allowed);
      st.sampling.allowed = s->allowed;
    }
    f.return_logits.push_back(st.return_logits);
    batch.seqs.push_back(st);
  }
  try {
    backend_->launch(batch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rackserve engine: backend step failed: %s\n", e.what());
    for (const auto& sc : plan.seqs) fail_request(sc.seq->request, std::string("backend error: ") + e.what());
    return;
  }
  if (overlap_ && chainable(f)) {
    inflight_ = std::move(f);  // the next step() launches its successor before reading it
    return;
  }
  finish_step(f);
}

bool EngineImpl::chainable(const InFlight& f) const {
  // Exactly the running sequences, each decoding one token in f, and nobody waiting who could be
  // admitted (a waiting request is scheduled at the next sync, one step later at most). One kept
  // out by max_num_seqs can start only once a running sequence finishes, which ends the chain.
  if (!sched_->waiting().empty() && !sched_->admission_blocked_by_max_seqs()) return false;
  if (f.seqs.size() != sched_->running().size()) return false;
  for (const ScheduledSeq& sc : f.seqs) {
    const Sequence* s = sc.seq;
    const Request* r = s->request;
    const GenerationRequest& g = r->req;
    // A prefill is read first: its first token goes out at once (TTFT), and the step after it
    // could not replay the decode graph behind it anyway (the backend would wait for it).
    if (!sc.sample || sc.num_tokens != 1 || is_terminal(s->state) || s->awaiting_fork) return false;
    if (std::find(sched_->running().begin(), sched_->running().end(), s) == sched_->running().end()) return false;
    // What the host must see before the next sample: the token itself for JSON's grammar (the
    // penalties count the token in flight where it is sampled); a cancel is taken at the next sync.
    if (s->json || r->channel->cancel_requested()) return false;
    if (g.prompt_logprobs && !r->prompt_logprobs_done) return false;
    // After f's token the sequence must have room for one more, or chaining only wastes a step.
    const int outputs_after = static_cast<int>(s->output_tokens.size()) + 1;
    const int tokens_after = static_cast<int>(s->tokens.size()) + 1;
    if (outputs_after >= g.max_tokens || tokens_after >= max_model_len_) return false;
  }
  return true;
}

std::optional<EngineImpl::InFlight> EngineImpl::launch_chained(const InFlight& f) {
  static const int32_t kPlaceholder = 0;
  Batch batch;
  InFlight next;
  for (const ScheduledSeq& sc : f.seqs) {
    Sequence* s = sc.seq;
    // f computes up to position num_computed + num_tokens - 1 and samples the token for the next.
    const int pos = s->num_computed + sc.num_tokens;
    if (!sched_->reserve_position(s, pos)) return std::nullopt;  // blocks are tight: sync instead
    SeqStep st;
    st.seq_id = s->seq_id;
    st.tokens = std::span<const int32_t>(&kPlaceholder, 1);
    st.token_from_previous = true;
    st.start_pos = pos;
    st.block_table = s->block_table;
    st.sample = true;
    st.sampling = sampling_state(*s, true);  // f's token counted
    batch.seqs.push_back(st);
    next.seqs.push_back(ScheduledSeq{s, 1, true});
    next.return_logits.push_back(0);
  }
  try {
    backend_->launch(batch);
  } catch (const std::exception& e) {
    // Not the requests' fault, and f is still to be read: fall back to stepping in sync.
    std::fprintf(stderr, "rackserve engine: chained step not launched: %s\n", e.what());
    return std::nullopt;
  }
  ++overlapped_total_;
  return next;
}

void EngineImpl::finish_step(const InFlight& f) {
  std::vector<SeqResult> results;
  try {
    results = backend_->collect();
    if (results.size() != f.seqs.size())
      throw Error("backend returned " + std::to_string(results.size()) + " results for " +
                  std::to_string(f.seqs.size()) + " sequences");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rackserve engine: backend step failed: %s\n", e.what());
    for (const auto& sc : f.seqs)
      if (!is_terminal(sc.seq->state)) fail_request(sc.seq->request, std::string("backend error: ") + e.what());
    return;
  }

  const auto now = Clock::now();
  for (size_t i = 0; i < f.seqs.size(); ++i) {
    const ScheduledSeq& sc = f.seqs[i];
    Sequence* s = sc.seq;
    // Failed earlier in this loop, or finished / cancelled while the step ran (a chained step
    // past a stop: its token is dropped, its KV write lands in blocks already given back, which
    // every later user's step follows on the device).
    if (is_terminal(s->state)) continue;
    if (f.return_logits[i]) {
      const size_t expect = static_cast<size_t>(sc.num_tokens) * vocab_;
      if (results[i].logits.size() != expect) {
        fail_request(s->request, "backend returned " + std::to_string(results[i].logits.size()) +
                                     " logits, expected " + std::to_string(expect));
        continue;
      }
      record_prompt_logprobs(s->request, s->num_computed, sc.num_tokens, results[i].logits);
    }
    sched_->commit(s, sc.num_tokens);
    if (!sc.sample) continue;
    if (!results[i].token || results[i].token->id < 0 || results[i].token->id >= vocab_) {
      fail_request(s->request, "backend returned no valid token for sequence " + std::to_string(s->seq_id) +
                                   (results[i].token ? " (id " + std::to_string(results[i].token->id) + ", vocabulary " +
                                                           std::to_string(vocab_) + ")"
                                                     : std::string()));
      continue;
    }
    on_sampled(s, *results[i].token, now);
  }
}

void EngineImpl::record_prompt_logprobs(Request* r, int start_pos, int num_tokens, const std::vector<float>& logits) {
  const int P = r->prompt_len();
  const int top = std::max(0, r->req.sampling.logprobs);
  for (int i = 0; i < num_tokens; ++i) {
    const int target = start_pos + i + 1;
    if (target >= P) break;
    std::span<const float> row(logits.data() + static_cast<size_t>(i) * vocab_, vocab_);
    r->prompt_logprobs[target] = logprob_of(row, r->req.prompt[target], top);
    if (target == P - 1) r->prompt_logprobs_done = true;
  }
}

void EngineImpl::on_sampled(Sequence* s, const SampledToken& tok, Clock::time_point now) {
  Request* r = s->request;
  const GenerationRequest& g = r->req;
  const int32_t id = tok.id;
  s->tokens.push_back(id);
  s->output_tokens.push_back(id);
  s->state = SeqState::Decoding;
  ++r->completion_tokens;
  ++generation_tokens_total_;

  Observer* obs = observer_.load(std::memory_order_acquire);
  if (!r->first_token_seen) {
    r->first_token_seen = true;
    if (obs) obs->on_first_token(seconds_between(r->arrival, now));
  } else if (s->has_token && obs) {
    obs->on_token_gap(seconds_between(s->last_token_time, now));
  }
  s->has_token = true;
  s->last_token_time = now;

  RequestEvent ev = event_for(s);
  ev.token_ids.push_back(id);
  if (g.sampling.logprobs >= 0) ev.logprobs.push_back(TokenLogprob{id, tok.logprob, tok.top});

  // Before min_tokens (vLLM): EOS and stop tokens were banned from sampling, and stop strings
  // are looked for only from the min_tokens-th token on; earlier text passes straight through.
  const int produced = static_cast<int>(s->output_tokens.size());
  const bool may_stop = produced > g.min_tokens, check_strings = produced >= g.min_tokens;
  const bool is_eos = !g.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
  const bool is_stop_token = std::find(g.stop_token_ids.begin(), g.stop_token_ids.end(), id) != g.stop_token_ids.end();
  FinishReason finish = FinishReason::None;
  if (s->json && !is_eos && !s->json->feed(json_masker_->token_bytes(id))) {
    // Only a backend that ignored the mask gets here: end the choice rather than emit non-JSON.
    ev.error = "JSON mode: token " + std::to_string(id) + " does not continue a JSON object";
    finish_seq(s, SeqState::Failed, FinishReason::Error, std::move(ev));
    return;
  }
  if (may_stop && (is_eos || is_stop_token)) {
    // The stop token itself is not part of the text (vLLM), only of the token ids.
    finish = FinishReason::Stop;
  } else if (s->decoder && !check_strings) {
    ev.text = s->stop.flush() + s->decoder->push(id);
  } else if (s->decoder) {
    ev.text = s->stop.push(s->decoder->push(id));
    if (s->stop.matched()) finish = FinishReason::Stop;
  }
  if (finish == FinishReason::None && s->json && s->json->done) finish = FinishReason::Stop;  // the object is closed
  if (finish == FinishReason::None &&
      (static_cast<int>(s->output_tokens.size()) >= g.max_tokens || static_cast<int>(s->tokens.size()) >= max_model_len_))
    finish = FinishReason::Length;
  if (finish != FinishReason::None && !s->stop.matched() && s->decoder) {
    ev.text += s->stop.push(s->decoder->flush());
    if (!s->stop.matched()) ev.text += s->stop.flush();
  }
  if (finish == FinishReason::None) {
    r->channel->push(std::move(ev));
    return;
  }
  finish_seq(s, SeqState::Finished, finish, std::move(ev));
}

void EngineImpl::retire_finished() {
  const auto now = Clock::now();
  Observer* obs = observer_.load(std::memory_order_acquire);
  for (auto it = live_.begin(); it != live_.end();) {
    Request* r = it->second.get();
    // A step in flight still points at its sequences: they live until it has been read (looked
    // for only once a request is done, not for every live request on every loop).
    auto in_flight = [&] {
      return inflight_ && std::any_of(inflight_->seqs.begin(), inflight_->seqs.end(),
                                      [&](const ScheduledSeq& sc) { return sc.seq->request == r; });
    };
    if (!r->all_terminal() || in_flight()) {
      ++it;
      continue;
    }
    if (obs) obs->on_finished(seconds_between(r->arrival, now), r->prompt_len(), r->completion_tokens);
    ++finished_total_;
    it = live_.erase(it);
    outstanding_.fetch_sub(1);
  }
}

void EngineImpl::publish_stats() {
  int running = 0, waiting = 0;
  for (const auto& [id, r] : live_) {
    bool any_running = false;
    for (const auto& s : r->seqs)
      if (s->state == SeqState::Prefilling || s->state == SeqState::Decoding) any_running = true;
    (any_running ? running : waiting)++;
  }
  std::lock_guard<std::mutex> lk(stats_mu_);
  stats_.running = running;
  stats_.waiting = waiting;
  stats_.kv_blocks_total = num_blocks_;
  stats_.kv_blocks_used = pool_->num_referenced();
  stats_.prefix_queries_tokens = pool_->query_tokens();
  stats_.prefix_hits_tokens = pool_->hit_tokens();
  stats_.prompt_tokens = prompt_tokens_total_;
  stats_.generation_tokens = generation_tokens_total_;
  stats_.preemptions = sched_->preemptions();
  stats_.requests_finished = finished_total_;
  stats_.overlapped_steps = overlapped_total_;
}

}  // namespace

std::unique_ptr<Engine> Engine::create(std::unique_ptr<Backend> backend, const Tokenizer* tokenizer,
                                       const EngineConfig& cfg) {
  return std::make_unique<EngineImpl>(std::move(backend), tokenizer, cfg);
}

}  // namespace rs
