#include "bench/serve_request.h"

#include <httplib.h>

#include <chrono>

namespace rs::bench {
namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t0) {
  return std::chrono::duration<double>(clock::now() - t0).count();
}

// True when a streamed chunk carries generated text (a chunk may only carry usage or a role).
bool has_text(const nlohmann::json& chunk) {
  const auto c = chunk.find("choices");
  if (c == chunk.end() || !c->is_array()) return false;
  for (const auto& ch : *c) {
    if (auto t = ch.find("text"); t != ch.end() && t->is_string() && !t->get_ref<const std::string&>().empty())
      return true;
    if (auto d = ch.find("delta"); d != ch.end() && d->is_object())
      if (auto t = d->find("content"); t != d->end() && t->is_string() && !t->get_ref<const std::string&>().empty())
        return true;
  }
  return false;
}

}  // namespace

RequestTiming send_streamed(const ServeTarget& target, nlohmann::json body) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  RequestTiming r;
  httplib::Client cli(target.host, target.port);
  cli.set_read_timeout(3600, 0);
  cli.set_write_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = target.path;
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!target.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + target.api_key);
  req.body = body.dump();

  std::string pending, raw;  // raw keeps a non-200 body for the error message
  int chunks_with_text = 0;
  double last = 0;
  bool done = false;
  const auto t0 = clock::now();
  // SSE events end with a blank line; a network read may hold several events or part of one.
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    nlohmann::json chunk = nlohmann::json::parse(data, nullptr, false);
    if (chunk.is_discarded()) return;
    if (auto e = chunk.find("error"); e != chunk.end()) {
      r.error = "stream error: " + e->dump();
      return;
    }
    if (has_text(chunk)) {
      const double now = seconds_since(t0);
      if (chunks_with_text == 0) r.ttft = now;
      else r.itl.push_back(now - last);
      last = now;
      ++chunks_with_text;
    }
    if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
      r.prompt_tokens = u->value("prompt_tokens", 0);
      r.output_tokens = u->value("completion_tokens", 0);
    }
  };
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      raw.append(data, len);
      return raw.size() < (1 << 16);
    }
    pending.append(data, len);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.e2e = seconds_since(t0);
  if (!sent) {
    r.error = "transport: " + httplib::to_string(err);
    return r;
  }
  if (status != 200) {
    nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
    std::string msg = raw.substr(0, 200);
    if (!j.is_discarded() && j.contains("error") && j["error"].is_object())
      msg = j["error"].value("message", msg);
    r.error = "HTTP " + std::to_string(status) + ": " + msg;
    return r;
  }
  if (!r.error.empty()) return r;
  if (!done) {
    r.error = "stream ended without [DONE]";
    return r;
  }
  if (r.output_tokens == 0) r.output_tokens = chunks_with_text;
  r.ok = chunks_with_text > 0 || r.output_tokens > 0;
  if (!r.ok) r.error = "no tokens in the stream";
  return r;
}

}  // namespace rs::bench
