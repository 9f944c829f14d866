// The HTTP layer in-process: a real Server and Engine over the engine tests' FakeBackend and a
// byte-level tokenizer, so every expected text is computable here.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "unit/server_test_support.h"

using namespace rs;
using namespace rs::testing;
using nlohmann::json;

namespace {

std::vector<int32_t> expected_greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  SamplingParams greedy;
  greedy.temperature = 0;
  return fake_reference(prompt, greedy, max_tokens, ByteTokenizer::kVocab, {ByteTokenizer::kEos});
}

std::string text_of(const std::vector<int32_t>& ids) {
  return ByteTokenizer().decode(ids, /*skip_special=*/true);
}

// SSE body -> the JSON payloads of its data frames, and whether it ended with [DONE].
std::vector<json> sse_events(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string frame = body.substr(pos, end - pos);
    pos = end + 2;
    if (frame.rfind("data: ", 0) != 0) continue;
    std::string payload = frame.substr(6);
    if (payload == "[DONE]") *done = true;
    else out.push_back(json::parse(payload));
  }
  return out;
}

void expect_error(const httplib::Result& r, int status, const char* param = nullptr) {
  REQUIRE(r);
  CHECK(r->status == status);
  json j = json::parse(r->body);
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"]["type"].is_string());
  CHECK(j["error"]["code"] == status);
  if (param) CHECK(j["error"]["param"] == param);
}

// Opens a raw connection, sends `request`, waits, then drops the connection.
int send_raw(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::send(fd, request.data(), request.size(), 0) == ssize_t(request.size()));
  return fd;
}

std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

bool wait_until(const std::function<bool()>& pred, double seconds = 10) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace

TEST_SUITE("unit.server_http") {
TEST_CASE("/health is 503 until the model is ready; /metrics answers meanwhile") {
  ServerHarness h({}, {}, /*ready=*/false);
  auto c = h.client();
  expect_error(c.Get("/health"), 503);
  expect_error(c.Get("/v1/models"), 503);
  auto m = c.Get("/metrics");
  REQUIRE(m);
  CHECK(m->status == 200);
  h.make_ready();
  auto ok = c.Get("/health");
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("/v1/models lists every served name") {
  ServerHarness h;
  auto r = h.client().Get("/v1/models");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json j = json::parse(r->body);
  CHECK(j["object"] == "list");
  REQUIRE(j["data"].size() == 2);
  CHECK(j["data"][0]["id"] == "test-model");
  CHECK(j["data"][1]["id"] == "alias");
  CHECK(j["data"][0]["max_model_len"] == 512);
}

TEST_CASE("completions: greedy text, usage, echo, token-id prompts, batches of prompts") {
  ServerHarness h;
  auto c = h.client();
  auto r = c.Post("/v1/completions", R"({"model":"test-model","prompt":"hi","max_tokens":6,"temperature":0})",
                  "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json j = json::parse(r->body);
  ByteTokenizer tok;
  std::vector<int32_t> prompt = tok.encode("hi", true);
  auto ids = expected_greedy(prompt, 6);
  CHECK(j["object"] == "text_completion");
  CHECK(j["model"] == "test-model");
  CHECK(j["choices"][0]["text"] == text_of(ids));
  CHECK(j["usage"]["prompt_tokens"] == 3);
  CHECK(j["usage"]["completion_tokens"] == int(ids.size()));
  CHECK(j["usage"]["total_tokens"] == 3 + int(ids.size()));

  // The alias works, token ids work, echo prepends the prompt text.
  r = c.Post("/v1/completions", json{{"model", "alias"}, {"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"echo", true}}.dump(),
             "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  j = json::parse(r->body);
  CHECK(j["choices"][0]["text"] == "<bos>hi" + text_of(ids));

  // Two prompts, n = 2: four choices, prompt-major.
  r = c.Post("/v1/completions", R"({"prompt":["hi","yo"],"max_tokens":3,"temperature":0,"n":2})", "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  j = json::parse(r->body);
  REQUIRE(j["choices"].size() == 4);
  auto yo = expected_greedy(tok.encode("yo", true), 3);
  CHECK(j["choices"][0]["text"] == text_of(expected_greedy(prompt, 3)));
  CHECK(j["choices"][1]["text"] == text_of(expected_greedy(prompt, 3)));
  CHECK(j["choices"][2]["text"] == text_of(yo));
  CHECK(j["choices"][3]["index"] == 3);
}

TEST_CASE("chat: the template's prompt, streaming chunks, usage chunk and [DONE]") {
  ServerHarness h;
  auto c = h.client();
  const std::string body =
      R"({"model":"test-model","messages":[{"role":"user","content":"hey"}],"max_tokens":5,"temperature":0)";
  auto r = c.Post("/v1/chat/completions", body + "}", "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json j = json::parse(r->body);
  ByteTokenizer tok;
  auto prompt = tok.encode(tok.apply_chat_template(json::array({{{"role", "user"}, {"content", "hey"}}}), true, nullptr), false);
  auto ids = expected_greedy(prompt, 5);
  CHECK(j["object"] == "chat.completion");
  CHECK(j["choices"][0]["message"]["role"] == "assistant");
  CHECK(j["choices"][0]["message"]["content"] == text_of(ids));
  CHECK(j["usage"]["prompt_tokens"] == int(prompt.size()));

  r = c.Post("/v1/chat/completions", body + R"(,"stream":true,"stream_options":{"include_usage":true}})",
             "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  CHECK(r->get_header_value("Content-Type").find("text/event-stream") == 0);
  bool done = false;
  auto events = sse_events(r->body, &done);
  CHECK(done);
  REQUIRE(events.size() >= 3);
  CHECK(events[0]["choices"][0]["delta"]["role"] == "assistant");
  std::string text;
  std::string finish;
  for (auto& e : events) {
    CHECK(e["object"] == "chat.completion.chunk");
    if (e["choices"].empty()) continue;
    auto& d = e["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  CHECK(text == text_of(ids));
  CHECK((finish == "length" || finish == "stop"));
  CHECK(events.back()["choices"].empty());
  CHECK(events.back()["usage"]["completion_tokens"] == int(ids.size()));
}

TEST_CASE("logprobs: chat content entries and completions arrays") {
  ServerHarness h;
  auto c = h.client();
  auto r = c.Post("/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"a"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":2})",
                  "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json lp = json::parse(r->body)["choices"][0]["logprobs"]["content"];
  REQUIRE(lp.size() >= 1);
  CHECK(lp[0]["logprob"] == doctest::Approx(-0.5));  // FakeBackend reports -0.5 for the pick
  CHECK(lp[0]["top_logprobs"].size() == 2);
  CHECK(lp[0]["bytes"].is_array());

  r = c.Post("/v1/completions", R"({"prompt":"ab","max_tokens":3,"temperature":0,"logprobs":1})", "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json cl = json::parse(r->body)["choices"][0]["logprobs"];
  CHECK(cl["tokens"].size() == cl["token_logprobs"].size());
  CHECK(cl["top_logprobs"][0].size() == 1);
  CHECK(cl["text_offset"][0] == 0);
}

TEST_CASE("every client error gets its status and OpenAI error object; the server keeps serving") {
  server::ServerConfig cfg;
  cfg.max_body_bytes = 4096;
  ServerHarness h(cfg);
  auto c = h.client();
  expect_error(c.Post("/v1/completions", "{\"prompt\": ", "application/json"), 400);
  expect_error(c.Post("/v1/completions", std::string("{\"prompt\": \"\xff\xfe\"}"), "application/json"), 400);
  expect_error(c.Post("/v1/completions", "[1,2]", "application/json"), 400);
  expect_error(c.Post("/v1/completions", R"({"model":"nope","prompt":"x"})", "application/json"), 404, "model");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","temperature":"hot"})", "application/json"), 400, "temperature");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","temperature":7})", "application/json"), 400, "temperature");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","top_p":0})", "application/json"), 400, "top_p");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","max_tokens":0})", "application/json"), 400, "max_tokens");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","n":1.5})", "application/json"), 400, "n");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","stop":[1]})", "application/json"), 400, "stop");
  expect_error(c.Post("/v1/completions", R"({"prompt":[1,999999]})", "application/json"), 400, "prompt");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","stream_options":{"include_usage":true}})", "application/json"),
               400, "stream_options");
  expect_error(c.Post("/v1/completions", R"({"prompt":"x","logit_bias":{"5":100.5}})", "application/json"), 400, "logit_bias");
  expect_error(c.Post("/v1/chat/completions", R"({"messages":[]})", "application/json"), 400, "messages");
  expect_error(c.Post("/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})", "application/json"),
               400, "messages[0].role");
  expect_error(c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})",
                      "application/json"), 400, "top_logprobs");
  // Nesting deep enough to overflow any recursive walk (copy, dump, template) is refused up front.
  {
    std::string deep = R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":)";
    deep += std::string(1000, '[') + std::string(1000, ']') + "}}";
    expect_error(c.Post("/v1/chat/completions", deep, "application/json"), 400);
  }
  // Longer than the context (512): the message says the numbers.
  std::string long_prompt(600, 'a');
  auto r = c.Post("/v1/completions", json{{"prompt", long_prompt}}.dump(), "application/json");
  expect_error(r, 400, "prompt");
  CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("512") != std::string::npos);
  r = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":510})", "application/json");
  expect_error(r, 400, "max_tokens");
  CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("514") != std::string::npos);
  // Oversized body: 413 from httplib's limit, still an OpenAI error object.
  expect_error(c.Post("/v1/completions", json{{"prompt", std::string(8000, 'a')}}.dump(), "application/json"), 413);
  auto c2 = h.client();
  expect_error(c2.Get("/v1/nothing-here"), 404);
  auto ok = c2.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  auto m = c2.Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find("rackserve:http_request_errors_total{status=\"400\"") != std::string::npos);
}

TEST_CASE("--api-key: 401 without or with a wrong key, 200 with it; /health and /metrics stay open") {
  server::ServerConfig cfg;
  cfg.api_key = "sekret";
  ServerHarness h(cfg);
  auto c = h.client();
  expect_error(c.Get("/v1/models"), 401);
  httplib::Headers wrong = {{"Authorization", "Bearer sekreT"}};
  expect_error(c.Get("/v1/models", wrong), 401);
  expect_error(c.Post("/v1/completions", wrong, R"({"prompt":"x"})", "application/json"), 401);
  httplib::Headers right = {{"Authorization", "Bearer sekret"}};
  auto r = c.Get("/v1/models", right);
  REQUIRE(r);
  CHECK(r->status == 200);
  r = c.Get("/health");
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("429 when the waiting queue is full") {
  EngineConfig ecfg;
  ecfg.max_num_seqs = 1;
  ecfg.max_queued_requests = 1;
  ServerHarness h({}, ecfg);
  h.backend->close_gate();  // the engine blocks inside its first step, holding request A
  const std::string body = R"({"prompt":"x","max_tokens":3})";
  int fd = send_raw(h.port, post_request("/v1/completions", body));
  REQUIRE(wait_until([&] { return h.backend->blocked(); }));  // A is inside a step
  // B and C race for the one queue slot: whichever comes second is refused at once.
  auto post = [&] {
    auto c = h.client();
    auto r = c.Post("/v1/completions", body, "application/json");
    return r ? r->status : -1;
  };
  auto b = std::async(std::launch::async, post);
  auto c = std::async(std::launch::async, post);
  REQUIRE(wait_until([&] {
    return b.wait_for(std::chrono::seconds(0)) == std::future_status::ready ||
           c.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }));
  h.backend->open_gate();
  int sb = b.get(), sc = c.get();
  CHECK(std::min(sb, sc) == 200);
  CHECK(std::max(sb, sc) == 429);
  ::close(fd);
  CHECK(wait_until([&] { auto s = h.engine->stats(); return s.running == 0 && s.waiting == 0; }));
}

TEST_CASE("a client that disconnects cancels its request and frees its KV blocks") {
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    ServerHarness h;
    h.backend->close_gate();  // hold the engine inside its first step
    json body = {{"prompt", "hello"}, {"max_tokens", 400}, {"stream", stream}};
    int fd = send_raw(h.port, post_request("/v1/completions", body.dump()));
    REQUIRE(wait_until([&] { return h.backend->blocked(); }));  // its first step is running
    ::close(fd);
    // One step at a time, so the request cannot outrun the server's hang-up check however
    // slow this machine is: it must be cancelled long before its 400 tokens.
    bool freed = false;
    for (int i = 0; i < 300 && !freed; ++i) {
      h.backend->allow_steps(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto s = h.engine->stats();
      freed = s.running == 0 && s.kv_blocks_used == 0;
    }
    h.backend->open_gate();
    CHECK(freed);
    CHECK(h.engine->stats().generation_tokens < 300);  // cancelled, not run to the end
    auto m = h.client().Get("/metrics");
    REQUIRE(m);
    CHECK(m->body.find("rackserve:kv_cache_usage_perc{model_name=\"test-model\"} 0\n") != std::string::npos);
  }
}

TEST_CASE("an engine failure after the stream started arrives as a final error chunk") {
  ServerHarness h;
  h.backend->fail_on_step(3);
  auto c = h.client();
  auto r = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":20,"stream":true,"ignore_eos":true})",
                  "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  bool done = false;
  auto events = sse_events(r->body, &done);
  REQUIRE(!events.empty());
  CHECK(events.back().contains("error"));
  CHECK(done);
  auto ok = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("an engine failure during a non-streaming request is a 500 with the OpenAI error object") {
  ServerHarness h;
  h.backend->fail_on_step(3);  // after the prefill and a first decode step
  auto c = h.client();
  auto r = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":20,"ignore_eos":true,"n":2})",
                  "application/json");
  expect_error(r, 500);
  CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("generation failed") != std::string::npos);
  CHECK(wait_until([&] { auto s = h.engine->stats(); return s.running == 0 && s.waiting == 0; }));
  auto ok = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("/tokenize and /detokenize in vLLM's shapes") {
  ServerHarness h;
  auto c = h.client();
  auto r = c.Post("/tokenize", R"({"prompt":"ab"})", "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  json j = json::parse(r->body);
  CHECK(j["tokens"] == json::array({256, 'a' - 32, 'b' - 32}));
  CHECK(j["count"] == 3);
  CHECK(j["max_model_len"] == 512);
  r = c.Post("/detokenize", R"({"tokens":[65,66]})", "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  CHECK(json::parse(r->body)["prompt"] == "ab");
  expect_error(c.Post("/detokenize", R"({"tokens":[-1]})", "application/json"), 400, "tokens");
}
}
