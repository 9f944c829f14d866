#pragma once
// The engine: a submission queue in front of one scheduler thread that runs Backend steps.
// Requests come in as GenerationRequest; results flow back through each request's channel.
//
// Request life (one state machine, engine/request.h):
//   queued -> prefilling -> decoding -> finished | cancelled | failed
//   prefilling/decoding -> queued (preempted by recompute when KV runs out)
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/sampling.h"

namespace rs {

class Backend;
class Tokenizer;
struct JsonSchema;
struct JsonWrapped;

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;                     // new tokens per choice
  int min_tokens = 0;                      // EOS and stop tokens banned, stop strings unchecked, before this many
  bool json_object = false;                // JSON mode: the output is constrained to one JSON object
  std::shared_ptr<const JsonSchema> json_schema;  // with json_object: ... to a value this schema accepts
  std::shared_ptr<const JsonWrapped> json_wrapped;  // with json_object: ... to a prefix, a value, a suffix (forced tool call)
  int n = 1;                               // choices sharing the prompt's KV
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;           // stop strings (not included in the output)
  bool include_stop_str_in_output = false;
  bool prompt_logprobs = false;            // completions echo + logprobs
  bool skip_special_tokens = true;
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", ...

struct TokenLogprob {
  int32_t id;
  float logprob;
  std::vector<std::pair<int32_t, float>> top;
};

// One event on a request's channel: new tokens for one choice, or its end.
struct RequestEvent {
  int choice = 0;
  std::vector<int32_t> token_ids;
  std::string text;                       // detokenized delta, stop strings withheld
  std::vector<TokenLogprob> logprobs;     // one per token id, when asked
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // once, first event, when asked
  FinishReason finish = FinishReason::None;
  std::string error;                      // when finish == Error
  // Totals so far, for usage.
  int prompt_tokens = 0;
  int completion_tokens = 0;  // over all choices
  int cached_prompt_tokens = 0;
};

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  // Next event, waiting up to `timeout`; nullopt on timeout. After every choice has finished,
  // returns nullopt immediately.
  virtual std::optional<RequestEvent> next(std::chrono::milliseconds timeout) = 0;
  virtual bool done() const = 0;
  virtual void cancel() = 0;  // idempotent; KV blocks are freed by the next step
  virtual uint64_t id() const = 0;
};

struct EngineConfig {
  int block_size = 16;
  int num_kv_blocks = 0;            // 0: as many as the backend's budget allows
  uint64_t kv_budget_bytes = 0;     // 0: backend default
  int max_model_len = 0;            // 0: the model's max_position_embeddings
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_queued_requests = 1024;
  bool enable_prefix_caching = true;
  // Overlapped steps: while the backend runs a step whose every sequence decodes on, the next
  // step is launched with each sequence's token taken from the step in flight (on the device), and
  // the results of the first are processed while the second runs. -1: where the backend's launch
  // returns before its step has run (CUDA); 0: never; 1: always (tests drive it on the CPU).
  int overlap_steps = -1;
};

struct EngineStats {
  int running = 0, waiting = 0;
  int kv_blocks_total = 0, kv_blocks_used = 0;  // used = referenced by a live sequence
  uint64_t prefix_queries_tokens = 0, prefix_hits_tokens = 0;
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t requests_finished = 0;
  uint64_t overlapped_steps = 0;  // steps launched before the step ahead of them was read
};

// Thrown by submit when max_queued_requests are waiting (HTTP 429).
class QueueFullError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  static std::unique_ptr<Engine> create(std::unique_ptr<Backend> backend, const Tokenizer* tokenizer,
                                        const EngineConfig& cfg);
  virtual ~Engine() = default;
  // Validates (prompt length vs max_model_len, n, max_tokens) and throws rs::Error with the
  // numbers; throws QueueFullError when the queue is full.
  virtual std::shared_ptr<RequestHandle> submit(GenerationRequest req) = 0;
  virtual EngineStats stats() const = 0;
  virtual int max_model_len() const = 0;
  // Stops admitting; waits up to `timeout` for running requests, then cancels the rest.
  virtual void shutdown(std::chrono::milliseconds timeout) = 0;
  // Observers for latency histograms (called on the engine thread).
  struct Observer {
    virtual ~Observer() = default;
    virtual void on_first_token(double seconds_since_arrival) {}
    virtual void on_token_gap(double seconds) {}
    virtual void on_finished(double e2e_seconds, int prompt_tokens, int completion_tokens) {}
  };
  virtual void set_observer(Observer* obs) = 0;
};

}  // namespace rs
