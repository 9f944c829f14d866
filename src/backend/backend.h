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
