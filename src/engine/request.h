#pragma once
// The life of a request inside the engine: one Request per submit(), one Sequence per choice.
//
// A Sequence is the unit the scheduler moves. Its state machine:
//
//   Queued ──admit──► Prefilling ──all tokens computed, first sample──► Decoding
//     ▲                   │                                               │
//     └──── preempt ──────┴───────────────── preempt ─────────────────────┘
//           (blocks freed; tokens so far are recomputed on re-admission)
//
//   Prefilling | Decoding ──stop token / stop string / max_tokens──► Finished
//   any live state ──cancel flag seen at the start of a step──► Cancelled
//   any live state ──backend error on its step / invalid state──► Failed
//
// Finished, Cancelled and Failed are terminal: a terminal sequence holds no KV blocks and
// sits in no scheduler queue. A Request is finished when all its sequences are terminal.
//
// "Prefilling" means the sequence still has more than one uncomputed token (prompt chunks, or
// prompt + outputs after a preemption); "Decoding" means exactly one (the last sampled token).
// The scheduler treats both uniformly: each step computes tokens [num_computed, num_computed+k)
// and samples when that reaches the end of the sequence.
//
// n > 1: only choice 0 is queued at first; it computes the prompt minus its last token without
// sampling, then forks into n sequences sharing those KV blocks (copy-on-write for a partially
// filled last block). Each choice then computes the last prompt token and samples from its own
// logits row with its own seed. (A one-token prompt has nothing to share: its n choices are
// queued as independent sequences.)
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/sampling.h"
#include "engine/engine.h"
#include "engine/json_grammar.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace rs {

enum class SeqState { Queued, Prefilling, Decoding, Finished, Cancelled, Failed };
const char* seq_state_name(SeqState s);
inline bool is_terminal(SeqState s) {
  return s == SeqState::Finished || s == SeqState::Cancelled || s == SeqState::Failed;
}

class RequestChannel;
struct Request;

struct Sequence {
  uint64_t seq_id = 0;  // unique for the engine's life; the backend's key
  int choice = 0;
  Request* request = nullptr;
  SeqState state = SeqState::Queued;

  std::vector<int32_t> tokens;          // prompt + outputs
  std::vector<int32_t> output_tokens;   // outputs only (penalties, draw index)
  int num_computed = 0;                 // tokens whose KV is in the blocks of block_table
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;   // prefix-chain hashes of the full blocks computed so far
  bool awaiting_fork = false;           // choice 0 of an n > 1 request, before the fork
  bool counted_prefix_query = false;    // prefix-cache query counted once per request choice

  SamplingParams sampling;              // per choice: the seed is derived from the choice index
  SamplingParams sampling_min;          // the same with EOS and stop tokens banned, until min_tokens
  std::optional<JsonState> json;        // JSON mode: the grammar's state after the output so far
  std::vector<uint32_t> allowed;        // JSON mode: this step's allowed-token mask
  std::optional<IncrementalDecoder> decoder;
  StopChecker stop;
  FinishReason finish = FinishReason::None;
  std::chrono::steady_clock::time_point last_token_time{};
  bool has_token = false;

  int prompt_len() const;
  int uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
};

struct Request {
  uint64_t id = 0;
  GenerationRequest req;
  std::shared_ptr<RequestChannel> channel;
  std::vector<std::unique_ptr<Sequence>> seqs;  // all choices once forked
  std::chrono::steady_clock::time_point arrival;
  bool first_token_seen = false;
  bool prompt_logprobs_sent = false;
  bool prompt_logprobs_done = false;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // filled during the prefill
  int cached_prompt_tokens = 0;
  int completion_tokens = 0;

  int prompt_len() const { return static_cast<int>(req.prompt.size()); }
  bool all_terminal() const;
  int live_choices() const;
};

inline int Sequence::prompt_len() const { return request->prompt_len(); }

}  // namespace rs
