#pragma once
// The one interface between the engine (requests, scheduling, KV block bookkeeping) and the
// executors (CPU reference, CUDA). The engine owns block ids; a backend owns the KV bytes.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/sampling.h"
#include "model/model_spec.h"

namespace rs {

class Weights;

struct SeqStep {
  uint64_t seq_id = 0;
  std::span<const int32_t> tokens;       // new tokens this step: a prefill chunk or one decode token
  int32_t start_pos = 0;                 // position of tokens[0]; KV for [0, start_pos) is cached
  std::span<const int32_t> block_table;  // KV blocks covering [0, start_pos + tokens.size())
  bool sample = false;                   // sample the token after the last one (not for a mid-prompt chunk)
  bool return_logits = false;            // fp32 logits for every token of this step (teacher forcing)
  // Chained decode: tokens holds one placeholder, and the token is the one this sequence sampled
  // in the step launched just before this one (read where it was sampled: on a GPU, on the GPU).
  // That token is also the sequence's newest output, which the penalties count:
  // sampling.output_tokens holds the outputs before it.
  bool token_from_previous = false;
  SamplingState sampling;
};

struct Batch {
  std::vector<std::pair<int32_t, int32_t>> block_copies;  // (src, dst), done before the forward
  std::vector<SeqStep> seqs;
};

struct SeqResult {
  std::optional<SampledToken> token;
  std::vector<float> logits;  // [tokens.size(), vocab] when return_logits
};

struct KvConfig {
  int block_size = 16;  // tokens per block
  int num_blocks = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual const ModelSpec& spec() const = 0;
  // Blocks this backend could hold in `budget_bytes` (0: the backend's own default budget).
  virtual int max_kv_blocks(int block_size, uint64_t budget_bytes) const = 0;
  virtual void init_kv(const KvConfig& kv) = 0;
  virtual uint64_t kv_bytes_per_token() const = 0;
  // One forward step over a mixed batch. Never throws for a request's content; throws rs::Error
  // only when the backend itself is broken.
  virtual std::vector<SeqResult> execute(const Batch& batch) = 0;

  // The same step in two halves, so that the host can prepare and launch step N + 1 while the
  // device still runs step N: launch() enqueues a step, collect() waits for the oldest launched
  // one and returns its results. At most two launched steps are uncollected at a time. A step's
  // SeqSteps with token_from_previous take their token from the step launched just before.
  // The defaults run the whole step inside launch() (execute), so every backend takes chained
  // steps; overlaps_steps() says whether launch() returns before the step has run.
  virtual void launch(const Batch& batch);
  virtual std::vector<SeqResult> collect();
  virtual bool overlaps_steps() const { return false; }

 private:
  std::vector<std::vector<SeqResult>> uncollected_;         // the defaults' results, oldest first
  std::vector<std::pair<uint64_t, int32_t>> last_sampled_;  // (seq_id, token) of the last launch
};

struct BackendOptions {
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;              // CPU: 0 = all cores
};

// Picks CUDA when a GPU is present (or forced), else the CPU reference; says which on stderr.
std::unique_ptr<Backend> make_backend(const ModelSpec& spec, const Weights& weights,
                                      const BackendOptions& opt);

// The same choice for deterministic random weights of spec's shapes. On a GPU they are created in
// device memory only, so a 671B config never touches host memory; on the CPU they are built into
// host_weights, which must outlive the backend.
std::unique_ptr<Backend> make_dummy_backend(const ModelSpec& spec, uint64_t seed, const BackendOptions& opt,
                                            std::unique_ptr<Weights>& host_weights);

}  // namespace rs
