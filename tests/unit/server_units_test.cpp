// Pure pieces of the server: auth, metrics text, error mapping, SSE framing.
#include <doctest/doctest.h>

#include "common/error.h"
#include "engine/engine.h"
#include "server/auth.h"
#include "server/errors.h"
#include "server/metrics.h"
#include "server/sse.h"

using namespace rs::server;

TEST_SUITE("unit.server") {
TEST_CASE("auth: constant-time compare and the Bearer scheme") {
  CHECK(constant_time_equal("abc", "abc"));
  CHECK_FALSE(constant_time_equal("abd", "abc"));
  CHECK_FALSE(constant_time_equal("ab", "abc"));
  CHECK_FALSE(constant_time_equal("abcd", "abc"));
  CHECK(constant_time_equal("", ""));
  CHECK(authorized("", ""));  // no key configured
  CHECK(authorized("k1", "Bearer k1"));
  CHECK(authorized("k1", "bearer k1"));
  CHECK_FALSE(authorized("k1", "Bearer k2"));
  CHECK_FALSE(authorized("k1", "Bearer k1 "));
  CHECK_FALSE(authorized("k1", "k1"));
  CHECK_FALSE(authorized("k1", ""));
  CHECK_FALSE(authorized("k1", "Basic k1"));
}

TEST_CASE("errors: OpenAI's nested object with type, param and code") {
  auto j = error_body(400, "bad temperature", std::string("temperature"));
  CHECK(j["error"]["message"] == "bad temperature");
  CHECK(j["error"]["type"] == "invalid_request_error");
  CHECK(j["error"]["param"] == "temperature");
  CHECK(j["error"]["code"] == 400);
  CHECK(error_body(401, "x")["error"]["type"] == "authentication_error");
  CHECK(error_body(404, "x")["error"]["param"].is_null());
  // Invalid UTF-8 in a message (e.g. echoing client bytes) must not throw.
  CHECK_NOTHROW(error_json(400, std::string("bad \xff byte")));
}

TEST_CASE("errors: exceptions map to statuses; engine messages keep their param") {
  auto classify = [](auto&& thrower) {
    try {
      thrower();
    } catch (...) {
      return classify_current_exception();
    }
    return ApiError(0, "nothing thrown");
  };
  CHECK(classify([] { throw rs::QueueFullError("queue full"); }).status() == 429);
  auto e = classify([] { throw rs::Error("n: 300 exceeds max_num_seqs 256"); });
  CHECK(e.status() == 400);
  CHECK(e.param() == std::optional<std::string>("n"));
  CHECK(classify([] { throw rs::Error("This model's maximum context length is 5"); }).param() == std::nullopt);
  CHECK(classify([] { [[maybe_unused]] auto j = nlohmann::json::parse("{"); }).status() == 400);
  CHECK(classify([] { throw ApiError(413, "big"); }).status() == 413);
  CHECK(classify([] { throw std::runtime_error("bug"); }).status() == 500);
}

TEST_CASE("metrics: vLLM names under rackserve:, model_name label, cumulative buckets") {
  Metrics m("my \"model\"");
  m.on_first_token(0.003);
  m.on_first_token(0.3);
  m.on_token_gap(0.02);
  m.on_finished(1.2, 10, 5);
  m.count_finished(rs::FinishReason::Stop);
  rs::EngineStats st;
  st.running = 2;
  st.waiting = 1;
  st.kv_blocks_total = 100;
  st.kv_blocks_used = 25;
  st.prefix_queries_tokens = 64;
  st.prefix_hits_tokens = 32;
  st.prompt_tokens = 10;
  st.generation_tokens = 5;
  std::string t = m.render(&st);
  const std::string lbl = "model_name=\"my \\\"model\\\"\"";
  CHECK(t.find("rackserve:num_requests_running{" + lbl + "} 2\n") != std::string::npos);
  CHECK(t.find("rackserve:num_requests_waiting{" + lbl + "} 1\n") != std::string::npos);
  CHECK(t.find("rackserve:kv_cache_usage_perc{" + lbl + "} 0.25\n") != std::string::npos);
  CHECK(t.find("rackserve:prefix_cache_queries_total{" + lbl + "} 64\n") != std::string::npos);
  CHECK(t.find("rackserve:prefix_cache_hits_total{" + lbl + "} 32\n") != std::string::npos);
  CHECK(t.find("rackserve:prompt_tokens_total{" + lbl + "} 10\n") != std::string::npos);
  CHECK(t.find("rackserve:generation_tokens_total{" + lbl + "} 5\n") != std::string::npos);
  CHECK(t.find("# TYPE rackserve:time_to_first_token_seconds histogram") != std::string::npos);
  CHECK(t.find("rackserve:time_to_first_token_seconds_bucket{le=\"0.001\"," + lbl + "} 0\n") != std::string::npos);
  CHECK(t.find("rackserve:time_to_first_token_seconds_bucket{le=\"0.005\"," + lbl + "} 1\n") != std::string::npos);
  CHECK(t.find("rackserve:time_to_first_token_seconds_bucket{le=\"0.5\"," + lbl + "} 2\n") != std::string::npos);
  CHECK(t.find("rackserve:time_to_first_token_seconds_bucket{le=\"+Inf\"," + lbl + "} 2\n") != std::string::npos);
  CHECK(t.find("rackserve:time_to_first_token_seconds_count{" + lbl + "} 2\n") != std::string::npos);
  CHECK(t.find("rackserve:inter_token_latency_seconds_count{" + lbl + "} 1\n") != std::string::npos);
  CHECK(t.find("rackserve:e2e_request_latency_seconds_count{" + lbl + "} 1\n") != std::string::npos);
  CHECK(t.find("rackserve:request_success_total{finished_reason=\"stop\"," + lbl + "} 1\n") != std::string::npos);
  // Before the model is loaded the gauges read zero rather than failing the scrape.
  CHECK(m.render(nullptr).find("rackserve:num_requests_running{" + lbl + "} 0\n") != std::string::npos);
}

TEST_CASE("sse: data frames end with a blank line") {
  CHECK(sse_data("{\"a\":1}") == "data: {\"a\":1}\n\n");
  CHECK(std::string(kSseDone) == "data: [DONE]\n\n");
  CHECK(std::string(kSseKeepAlive).rfind(":", 0) == 0);  // a comment: clients ignore it
}
}
