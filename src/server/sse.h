#pragma once
// Server-sent events over httplib's chunked content provider: OpenAI's `data: {json}\n\n`
// frames, the final `data: [DONE]`, and `: keep-alive` comments while nothing else is due.
#include <chrono>
#include <string>

namespace httplib { struct DataSink; }

namespace rs::server {

std::string sse_data(const std::string& payload);  // "data: <payload>\n\n"
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
inline constexpr const char* kSseKeepAlive = ": keep-alive\n\n";

// One response's sink. Once a write fails (the client went away) every later write is refused,
// so the caller can cancel the request at its next check.
class SseWriter {
 public:
  SseWriter(httplib::DataSink& sink, std::chrono::milliseconds keepalive_interval);
  bool send(const std::string& frame);  // false: the client is gone
  bool send_data(const std::string& json_text) { return send(sse_data(json_text)); }
  // Sends a keep-alive comment if nothing was sent for the interval; false: the client is gone.
  bool keep_alive_if_idle();
  // Whether the peer still holds the connection open (a closed socket reads as EOF).
  bool client_alive();
  bool failed() const { return failed_; }

 private:
  httplib::DataSink& sink_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_send_;
  bool failed_ = false;
};

}  // namespace rs::server
