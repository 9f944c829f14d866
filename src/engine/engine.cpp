#include "engine/engine.h"

#include "engine/request.h"

namespace rs {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "unknown";
}

const char* seq_state_name(SeqState s) {
  switch (s) {
    case SeqState::Queued: return "queued";
    case SeqState::Prefilling: return "prefilling";
    case SeqState::Decoding: return "decoding";
    case SeqState::Finished: return "finished";
    case SeqState::Cancelled: return "cancelled";
    case SeqState::Failed: return "failed";
  }
  return "unknown";
}

bool Request::all_terminal() const {
  for (const auto& s : seqs)
    if (!is_terminal(s->state)) return false;
  return true;
}

int Request::live_choices() const {
  int n = 0;
  for (const auto& s : seqs) n += !is_terminal(s->state);
  return n;
}

}  // namespace rs
