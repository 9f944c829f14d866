#pragma once
// The model `rackserve serve` and `rackserve chat` run when no --model is given: a small
// DeepSeek-V3-architecture network (MLA with q_lora, a dense layer then MoE layers with sigmoid
// scores and noaux_tc group routing) speaking the real DeepSeek-V3 tokenizer, with deterministic
// random weights generated at start. Its output is gibberish by construction; it exists so the
// whole serving path (tokenizer, engine, backend, HTTP) runs on any machine in seconds.
#include <memory>
#include <string>

#include "model/model_spec.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace rs {

struct DefaultModel {
  ModelSpec spec;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string name;         // the served model name: says "random" so nobody mistakes it
  std::string description;  // one line for banners and /v1/models
};

// The architecture alone (cheap; no weights).
ModelSpec default_model_spec();
// Seed of the dummy weights: fixed, so every start (and every machine) serves the same model.
inline constexpr uint64_t kDefaultModelSeed = 20241226;  // DeepSeek-V3's release date
DefaultModel load_default_model();

}  // namespace rs
