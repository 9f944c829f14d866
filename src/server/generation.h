#pragma once
// Drives submitted requests to completion for one HTTP response: the non-streaming body, or
// the SSE chunk sequence. Both poll the client's connection between engine events and cancel
// every request of the response when it is gone, so its KV blocks are freed at the next step.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai_schema.h"

namespace rs::server {

class Metrics;
class SseWriter;

struct GenerationJob {
  ParsedRequest req;
  std::vector<std::shared_ptr<RequestHandle>> handles;  // one per prompt, in prompt order
  std::string id;
  int64_t created = 0;
  const Tokenizer* tokenizer = nullptr;
  Metrics* metrics = nullptr;
  std::chrono::milliseconds poll{50};  // how often the client's connection is checked
};

void cancel_all(const GenerationJob& job);

// The complete JSON body, or nullopt when the client went away first (requests cancelled).
// A request that failed inside the engine throws ApiError(500) naming the engine's error.
std::optional<std::string> collect_response(GenerationJob& job,
                                            const std::function<bool()>& client_alive);

// Writes every chunk and the final [DONE]; returns false when the client went away (requests
// cancelled).
bool stream_response(GenerationJob& job, SseWriter& out);

}  // namespace rs::server
