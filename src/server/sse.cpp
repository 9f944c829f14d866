#include "server/sse.h"

#include <httplib.h>

namespace rs::server {

std::string sse_data(const std::string& payload) { return "data: " + payload + "\n\n"; }

SseWriter::SseWriter(httplib::DataSink& sink, std::chrono::milliseconds keepalive_interval)
    : sink_(sink), interval_(keepalive_interval), last_send_(std::chrono::steady_clock::now()) {}

bool SseWriter::send(const std::string& frame) {
  if (failed_) return false;
  // An empty write would tell httplib's chunked writer the content is over.
  if (frame.empty()) return true;
  if (!sink_.write(frame.data(), frame.size())) failed_ = true;
  last_send_ = std::chrono::steady_clock::now();
  return !failed_;
}

bool SseWriter::keep_alive_if_idle() {
  if (failed_) return false;
  if (interval_.count() <= 0) return client_alive();
  if (std::chrono::steady_clock::now() - last_send_ >= interval_) return send(kSseKeepAlive);
  return client_alive();
}

bool SseWriter::client_alive() {
  if (failed_) return false;
  if (sink_.is_writable && !sink_.is_writable()) failed_ = true;
  return !failed_;
}

}  // namespace rs::server
