#pragma once
// Drains a request's channel into per-choice results, for engine tests.
#include <chrono>
#include <map>
#include <thread>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace rs::testing {

struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::None;
  std::string error;
  int events = 0;
};

struct Collected {
  std::map<int, ChoiceResult> choices;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  int prompt_logprob_events = 0;
  int cached_prompt_tokens = 0;
  int completion_tokens = 0;
  bool timed_out = false;
};

inline Collected collect(RequestHandle& h, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  Collected c;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!h.done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      c.timed_out = true;
      break;
    }
    auto ev = h.next(std::chrono::milliseconds(50));
    if (!ev) continue;
    auto& ch = c.choices[ev->choice];
    ch.events++;
    ch.tokens.insert(ch.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    ch.text += ev->text;
    ch.logprobs.insert(ch.logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
    if (!ev->prompt_logprobs.empty()) {
      c.prompt_logprobs = ev->prompt_logprobs;
      c.prompt_logprob_events++;
    }
    if (ev->finish != FinishReason::None) {
      ch.finish = ev->finish;
      ch.error = ev->error;
    }
    c.cached_prompt_tokens = ev->cached_prompt_tokens;
    c.completion_tokens = ev->completion_tokens;
  }
  return c;
}

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace rs::testing
