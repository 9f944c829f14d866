#pragma once
// Log-probabilities of given tokens under teacher-forced logits (completions echo + logprobs).
#include <cstdint>
#include <span>

#include "engine/engine.h"

namespace rs {

// log_softmax(logits)[token], plus the `top` most likely tokens (ties: lower id first).
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int top);

}  // namespace rs
