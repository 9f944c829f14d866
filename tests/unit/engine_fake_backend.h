#pragma once
// A deterministic stand-in for a model, for engine unit tests. It really stores each token in
// the KV slot its block table names and reads the whole context back through the block table
// before "predicting", so a wrong block table, a missed copy-on-write or a bad prefix-cache hit
// changes the output. The next token is a hash of the context (and of seed + draw index when
// sampling), so the expected output of any request can be computed without the engine.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine_test_util.h"

namespace rs::testing {

inline uint64_t fake_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

// The "model": next token after `context` for a request with `params` on its `draw`-th sample.
inline int32_t fake_next(const std::vector<int32_t>& context, const SamplingParams& p, uint64_t draw, int vocab) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = fake_mix(h, static_cast<uint64_t>(t));
  if (p.temperature > 0) h = fake_mix(fake_mix(h, p.seed), draw);
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

inline float fake_logit(const std::vector<int32_t>& context_upto, int32_t v) {
  uint64_t h = 7;
  for (int32_t t : context_upto) h = fake_mix(h, static_cast<uint64_t>(t));
  h = fake_mix(h, static_cast<uint64_t>(v));
  return static_cast<float>(h % 1000) / 100.0f;
}

// Output of a request run alone, computed without any KV cache.
inline std::vector<int32_t> fake_reference(std::vector<int32_t> prompt, const SamplingParams& p, int max_tokens,
                                           int vocab, const std::vector<int32_t>& stop_ids = {}) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    int32_t t = fake_next(prompt, p, out.size(), vocab);
    out.push_back(t);
    prompt.push_back(t);
    bool stop = false;
    for (int32_t s : stop_ids) stop |= s == t;
    if (stop) break;
  }
  return out;
}

class FakeBackend : public Backend {
 public:
  explicit FakeBackend(int vocab = 101, int kv_blocks_budget = 64) : budget_blocks_(kv_blocks_budget) {
    spec_.vocab_size = vocab;
    spec_.max_position_embeddings = 4096;
    spec_.eos_token_ids = {vocab - 1};
  }
  std::string name() const override { return "fake"; }
  const ModelSpec& spec() const override { return spec_; }
  int max_kv_blocks(int, uint64_t) const override { return budget_blocks_; }
  void init_kv(const KvConfig& kv) override {
    kv_ = kv;
    slots_.assign(static_cast<size_t>(kv.num_blocks) * kv.block_size, -1);
  }
  uint64_t kv_bytes_per_token() const override { return 4; }

  // Counts the sequences of chained steps (their token taken from the step before), then runs the
  // default two-phase stepping, which resolves those tokens from the previous launch's results.
  void launch(const Batch& batch) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const SeqStep& s : batch.seqs) chained_ += s.token_from_previous ? 1 : 0;
    }
    Backend::launch(batch);
  }

  std::vector<SeqResult> execute(const Batch& batch) override {
    std::unique_lock<std::mutex> lk(mu_);
    ++blocked_;
    gate_cv_.wait(lk, [&] { return credits_ != 0; });
    --blocked_;
    if (credits_ > 0) --credits_;
    ++steps_;
    if (fail_on_step_ == steps_) throw Error("fake backend failure on purpose");
    max_batch_ = std::max<int>(max_batch_, static_cast<int>(batch.seqs.size()));
    int toks = 0;
    for (const auto& s : batch.seqs) toks += static_cast<int>(s.tokens.size());
    max_step_tokens_ = std::max(max_step_tokens_, toks);
    copies_ += batch.block_copies.size();
    for (auto [src, dst] : batch.block_copies)
      for (int i = 0; i < kv_.block_size; ++i) slot(dst, i) = slot(src, i);
    std::vector<SeqResult> out(batch.seqs.size());
    for (size_t k = 0; k < batch.seqs.size(); ++k) {
      const SeqStep& s = batch.seqs[k];
      const int end = s.start_pos + static_cast<int>(s.tokens.size());
      if (static_cast<int>(s.block_table.size()) * kv_.block_size < end) {
        violations_.push_back("block table too short for seq " + std::to_string(s.seq_id));
        continue;
      }
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        int p = s.start_pos + static_cast<int>(i);
        slot(s.block_table[p / kv_.block_size], p % kv_.block_size) = s.tokens[i];
      }
      std::vector<int32_t> ctx(end);
      for (int p = 0; p < end; ++p) {
        ctx[p] = slot(s.block_table[p / kv_.block_size], p % kv_.block_size);
        if (ctx[p] < 0) violations_.push_back("unwritten KV read at position " + std::to_string(p));
      }
      if (s.return_logits) {
        out[k].logits.resize(s.tokens.size() * spec_.vocab_size);
        for (size_t i = 0; i < s.tokens.size(); ++i) {
          std::vector<int32_t> upto(ctx.begin(), ctx.begin() + s.start_pos + i + 1);
          for (int v = 0; v < spec_.vocab_size; ++v) out[k].logits[i * spec_.vocab_size + v] = fake_logit(upto, v);
        }
      }
      if (s.sample) {
        // The penalties' view: the outputs so far are the context after the prompt (a chained
        // step's resolved token included, Backend's default launch appends it).
        const SamplingParams& sp = *s.sampling.params;
        if (sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
          const size_t P = s.sampling.prompt_tokens.size();
          if (P > ctx.size() || !std::equal(s.sampling.output_tokens.begin(), s.sampling.output_tokens.end(),
                                            ctx.begin() + std::min(P, ctx.size()), ctx.end()))
            violations_.push_back("seq " + std::to_string(s.seq_id) + ": penalty output tokens are not its outputs");
        }
        SampledToken t;
        t.id = script_.empty() ? fake_next(ctx, *s.sampling.params, s.sampling.draw_index, spec_.vocab_size)
                               : script_[s.sampling.draw_index % script_.size()];
        // A token the sampler could never pick (bias -inf, as min_tokens bans stop tokens) is
        // replaced by the next id up that it could.
        auto banned = [&](int32_t id) {
          for (auto [b, v] : s.sampling.params->logit_bias)
            if (b == id && v == -INFINITY) return true;
          return false;
        };
        // Guided decoding the same way: the next allowed id up.
        auto masked = [&](int32_t id) {
          const auto& m = s.sampling.allowed;
          return !m.empty() && !(m[size_t(id) / 32] >> (id % 32) & 1u);
        };
        for (int tries = 0; (banned(t.id) || masked(t.id)) && tries < spec_.vocab_size; ++tries)
          t.id = (t.id + 1) % spec_.vocab_size;
        t.logprob = -0.5f;
        for (int j = 0; j < s.sampling.params->logprobs; ++j) t.top.emplace_back(j, -1.0f - j);
        out[k].token = t;
      }
    }
    return out;
  }

  // Test controls and observations (thread-safe).
  // The gate: execute() waits while it has no credit (-1: unlimited).
  void close_gate() { std::lock_guard<std::mutex> lk(mu_); credits_ = 0; }
  void open_gate() { allow_steps(-1); }
  void allow_steps(int n) {
    { std::lock_guard<std::mutex> lk(mu_); credits_ = n; }
    gate_cv_.notify_all();
  }
  // True while the engine thread waits at the gate, i.e. between two steps for certain.
  bool blocked() const { std::lock_guard<std::mutex> lk(mu_); return blocked_ > 0; }
  // Every sequence then "generates" exactly these tokens, in order (for text-level tests).
  void set_script(std::vector<int32_t> ids) { std::lock_guard<std::mutex> lk(mu_); script_ = std::move(ids); }
  void fail_on_step(int step) { std::lock_guard<std::mutex> lk(mu_); fail_on_step_ = step; }
  int steps() const { std::lock_guard<std::mutex> lk(mu_); return steps_; }
  int chained() const { std::lock_guard<std::mutex> lk(mu_); return chained_; }
  int max_batch() const { std::lock_guard<std::mutex> lk(mu_); return max_batch_; }
  int max_step_tokens() const { std::lock_guard<std::mutex> lk(mu_); return max_step_tokens_; }
  size_t copies() const { std::lock_guard<std::mutex> lk(mu_); return copies_; }
  std::vector<std::string> violations() const { std::lock_guard<std::mutex> lk(mu_); return violations_; }

 private:
  int32_t& slot(int32_t block, int i) { return slots_.at(static_cast<size_t>(block) * kv_.block_size + i); }
  ModelSpec spec_;
  int budget_blocks_;
  KvConfig kv_;
  std::vector<int32_t> slots_;
  mutable std::mutex mu_;
  std::condition_variable gate_cv_;
  int credits_ = -1, blocked_ = 0;
  int steps_ = 0, chained_ = 0, max_batch_ = 0, max_step_tokens_ = 0, fail_on_step_ = -1;
  size_t copies_ = 0;
  std::vector<std::string> violations_;
  std::vector<int32_t> script_;
};

// A prompt that never holds the fake's eos id (vocab - 1).
inline std::vector<int32_t> make_prompt(int len, int salt, int vocab = 101) {
  std::vector<int32_t> p(len);
  for (int i = 0; i < len; ++i) p[i] = (i * 7 + salt * 13 + 3) % (vocab - 1);
  return p;
}

inline GenerationRequest greedy_request(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// An engine over a fake backend of 101 tokens, blocks of 4 tokens unless cfg says otherwise.
struct FakeEngine {
  FakeBackend* fake;
  std::unique_ptr<Engine> engine;
  explicit FakeEngine(EngineConfig cfg = {}, int kv_blocks = 64) {
    auto b = std::make_unique<FakeBackend>(101, kv_blocks);
    fake = b.get();
    if (cfg.block_size == 16) cfg.block_size = 4;
    engine = Engine::create(std::move(b), nullptr, cfg);
  }
};

// One greedy choice from a model that "wants" to write `script` (the fake backend puts its tokens
// first, in order), for guided-decoding tests: what the grammar lets through of it.
inline ChoiceResult run_scripted(const Tokenizer& tok, const std::string& script, GenerationRequest r) {
  auto b = std::make_unique<FakeBackend>(tok.vocab_size(), 64);
  b->set_script(tok.encode(script, false));
  EngineConfig cfg;
  cfg.max_model_len = 512;
  auto engine = Engine::create(std::move(b), &tok, cfg);
  r.prompt = tok.encode("Answer in JSON.", false);
  r.sampling.temperature = 0;
  auto c = collect(*engine->submit(r));
  engine->shutdown(std::chrono::milliseconds(0));
  return c.choices[0];
}

}  // namespace rs::testing
