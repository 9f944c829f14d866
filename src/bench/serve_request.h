#pragma once
// One streamed OpenAI request of `rackserve bench serve`, timed on the client's clock.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace rs::bench {

struct ServeTarget {
  std::string host;
  int port = 8000;
  std::string path;     // /v1/completions or /v1/chat/completions
  std::string api_key;  // empty: no Authorization header
};

struct RequestTiming {
  bool ok = false;
  std::string error;          // why not ok: HTTP status and message, or the transport error
  double ttft = 0;            // seconds from sending to the first token
  double e2e = 0;             // seconds from sending to the end of the stream
  std::vector<double> itl;    // gaps between successive token-bearing chunks
  int prompt_tokens = 0;      // from the final usage chunk
  int output_tokens = 0;      // from the final usage chunk (else the chunks seen)
};

// Sends body (with "stream": true and usage requested) and reads the SSE stream to its end.
RequestTiming send_streamed(const ServeTarget& target, nlohmann::json body);

}  // namespace rs::bench
