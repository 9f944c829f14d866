// Tool calling: DeepSeek-V3's call syntax parsed out of generated text (whole and streamed),
// tools validated and handed to the chat template, and the HTTP responses of a server whose
// fake model "generates" a scripted tool call through the real DeepSeek-V3 tokenizer.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "engine/json_schema.h"
#include "model/embedded_assets.h"
#include "server/errors.h"
#include "server/openai_schema.h"
#include "server/tool_calls.h"
#include "unit/server_test_support.h"

using namespace rs;
using namespace rs::server;
using nlohmann::json;

namespace {

const std::string kCall1 =
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>";
const std::string kCall2 =
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"CET\"}\n```<｜tool▁call▁end｜>";
const std::string kBegin = "<｜tool▁calls▁begin｜>", kEnd = "<｜tool▁calls▁end｜>";

json weather_tools() {
  return json::array({{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "weather by city"},
                         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
}

// A server over the real DeepSeek-V3 tokenizer whose model emits `script` and then eos.
struct ToolServer {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Server> server;
  int port = 0;
  explicit ToolServer(const std::string& script, const std::string& chat_template = "") {
    json cfg = json::parse(embedded_tokenizer_config_json());
    if (!chat_template.empty()) cfg["chat_template"] = chat_template;
    tok = Tokenizer::from_json(embedded_tokenizer_json(), cfg.dump());
    auto b = std::make_unique<testing::FakeBackend>(tok->vocab_size(), 64);
    std::vector<int32_t> ids = tok->encode(script, false);
    ids.push_back(tok->eos_ids().at(0));
    b->set_script(ids);
    EngineConfig ecfg;
    ecfg.max_model_len = 512;
    engine = Engine::create(std::move(b), tok.get(), ecfg);
    ServerConfig sc;
    sc.host = "127.0.0.1";
    sc.port = 0;
    server = std::make_unique<Server>(sc, "m");
    port = server->bind();
    server->start();
    ServedModel m;
    m.engine = engine.get();
    m.ctx.served_names = {"m"};
    m.ctx.tokenizer = tok.get();
    m.ctx.max_model_len = engine->max_model_len();
    m.ctx.vocab_size = tok->vocab_size();
    server->set_ready(std::move(m));
  }
  ~ToolServer() {
    server->begin_shutdown();
    engine->shutdown(std::chrono::milliseconds(0));
    server->wait();
  }
  httplib::Result post(const json& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(std::chrono::seconds(20));
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }
};

json chat_body(bool stream, json tools = weather_tools()) {
  json b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
            {"temperature", 0}, {"max_tokens", 200}, {"stream", stream}};
  if (!tools.is_null()) b["tools"] = tools;
  return b;
}

// The data frames of an SSE body, parsed.
std::vector<json> sse_chunks(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
    pos = end;
  }
  return out;
}

}  // namespace

TEST_SUITE("unit.server") {

TEST_CASE("tool calls: DeepSeek-V3 syntax parsed into content and calls") {
  auto t = parse_tool_calls("Let me look." + kBegin + kCall1 + "\n" + kCall2 + kEnd);
  CHECK(t.content == "Let me look.");
  REQUIRE(t.calls.size() == 2);
  CHECK(t.calls[0].name == "get_weather");
  CHECK(t.calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(t.calls[1].name == "get_time");
  CHECK(t.calls[1].type == "function");
  // No call section: all content.
  t = parse_tool_calls("plain answer");
  CHECK(t.content == "plain answer");
  CHECK(t.calls.empty());
  // A call cut off by max_tokens keeps the complete ones before it.
  t = parse_tool_calls(kBegin + kCall1 + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_ti");
  REQUIRE(t.calls.size() == 1);
  CHECK(t.content.empty());
  // A malformed section is no call: the text comes back whole.
  const std::string bad = "x" + kBegin + "<｜tool▁call▁begin｜>function get_weather {}<｜tool▁call▁end｜>";
  t = parse_tool_calls(bad);
  CHECK(t.calls.empty());
  CHECK(t.content == bad);
}

TEST_CASE("tool calls: the stream holds back a possible marker and releases what is not one") {
  ToolCallStream s;
  std::string content;
  const std::string text = "Sure. " + kBegin + kCall1 + kEnd;
  // Feed a byte at a time: the marker arrives split across every possible boundary.
  for (char c : text) content += s.push(std::string(1, c));
  ToolCallOutput end = s.finish();
  CHECK(content + end.content == "Sure. ");
  REQUIRE(end.calls.size() == 1);
  CHECK(end.calls[0].name == "get_weather");
  // Text that only starts like the marker comes out in the end.
  ToolCallStream s2;
  std::string c2 = s2.push("a <｜tool");
  ToolCallOutput e2 = s2.finish();
  CHECK(c2 + e2.content == "a <｜tool");
  CHECK(e2.calls.empty());
}

TEST_CASE("tools: validated, passed to the chat template; required and named tool_choice force a call") {
  json cfg = json::parse(embedded_tokenizer_config_json());
  cfg["chat_template"] =
      "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{{ messages[0].content }}";
  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), cfg.dump());
  ModelContext ctx;
  ctx.served_names = {"m"};
  ctx.tokenizer = tok.get();
  ctx.max_model_len = 4096;
  ctx.vocab_size = tok->vocab_size();
  json body = chat_body(false);
  ParsedRequest r = parse_chat_request(body, ctx);
  CHECK(tok->decode(r.prompts[0].ids, false) == "[get_weather]Weather in Paris?");
  CHECK(r.parse_tool_calls);
  body["tool_choice"] = "none";
  CHECK_FALSE(parse_chat_request(body, ctx).parse_tool_calls);
  auto refused = [&](json b, const char* param) {
    try {
      parse_chat_request(b, ctx);
      FAIL("accepted: " << b.dump());
    } catch (const ApiError& e) {
      CHECK(e.param().value_or("") == param);
    }
  };
  body["tool_choice"] = "required";
  ParsedRequest forced = parse_chat_request(body, ctx);
  CHECK((forced.parse_tool_calls && forced.gen.json_object && forced.gen.json_wrapped));
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  forced = parse_chat_request(body, ctx);
  REQUIRE(forced.gen.json_wrapped);
  CHECK(forced.gen.json_wrapped->schemas.size() == 1);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  refused(body, "tool_choice");  // not among the tools
  body["tool_choice"] = {{"type", "function"}};
  refused(body, "tool_choice");
  body["tool_choice"] = "required";
  body["response_format"] = {{"type", "json_object"}};
  refused(body, "tool_choice");  // two grammars for one output
  body.erase("response_format");
  json strict = weather_tools();
  strict[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]";
  body["tools"] = strict;
  refused(body, "tools[0].function.parameters");  // a call forced to a schema it cannot be held to
  body["tool_choice"] = "auto";
  CHECK(parse_chat_request(body, ctx).parse_tool_calls);  // auto does not enforce the parameters
  body["tools"] = weather_tools();
  body.erase("tool_choice");
  json bad_name = weather_tools();
  bad_name[0]["function"]["name"] = "get weather!";
  body["tools"] = bad_name;
  refused(body, "tools[0].function.name");
  body["tools"] = json::array({{{"type", "retrieval"}}});
  refused(body, "tools[0]");
  body["tools"] = "get_weather";
  refused(body, "tools");
  json no_tools = chat_body(false, nullptr);
  no_tools["tool_choice"] = "auto";
  refused(no_tools, "tool_choice");
}

TEST_CASE("tools over HTTP: the scripted call comes back as tool_calls, whole and streamed") {
  ToolServer srv("Let me check." + kBegin + kCall1 + "\n" + kCall2 + kEnd);
  auto res = srv.post(chat_body(false));
  REQUIRE(res);
  REQUIRE(res->status == 200);
  json j = json::parse(res->body);
  const json& msg = j["choices"][0]["message"];
  CHECK(msg["content"] == "Let me check.");
  REQUIRE(msg["tool_calls"].size() == 2);
  CHECK(msg["tool_calls"][0]["type"] == "function");
  CHECK(msg["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"] == "Paris");
  CHECK(msg["tool_calls"][0]["id"] != msg["tool_calls"][1]["id"]);
  CHECK(j["choices"][0]["finish_reason"] == "tool_calls");

  json one = chat_body(false);
  one["parallel_tool_calls"] = false;
  j = json::parse(srv.post(one)->body);
  CHECK(j["choices"][0]["message"]["tool_calls"].size() == 1);

  res = srv.post(chat_body(true));
  REQUIRE(res);
  std::string content;
  json calls = json::array();
  std::string finish;
  for (const json& c : sse_chunks(res->body)) {
    const json& ch = c["choices"][0];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (ch["delta"].contains("tool_calls"))
      for (const json& t : ch["delta"]["tool_calls"]) calls.push_back(t);
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  CHECK(content == "Let me check.");
  REQUIRE(calls.size() == 2);
  CHECK(calls[0]["index"] == 0);
  CHECK(calls[1]["index"] == 1);
  CHECK(calls[1]["function"]["name"] == "get_time");
  CHECK(finish == "tool_calls");

  // Without tools (or with tool_choice none) the markers are plain text.
  j = json::parse(srv.post(chat_body(false, nullptr))->body);
  CHECK(j["choices"][0]["message"]["content"].get<std::string>().find(kBegin) != std::string::npos);
  CHECK_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  CHECK(j["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("tools over HTTP: tool_choice named or required turns a model that writes prose into a call") {
  ToolServer srv("I would rather just tell you: it is sunny.");
  json tools = json::array();
  for (const char* name : {"get_weather", "get_time"})
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", name},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"city", {{"enum", {"Paris", "Oslo"}}}}, {"utc", {{"type", "boolean"}}}}},
                         {"required", {"city"}},
                         {"additionalProperties", false}}}}}});
  for (const json& choice : {json{{"type", "function"}, {"function", {{"name", "get_time"}}}}, json("required")}) {
    for (bool stream : {false, true}) {
      json body = chat_body(stream, tools);
      body["tool_choice"] = choice;
      auto res = srv.post(body);
      REQUIRE(res);
      REQUIRE(res->status == 200);
      json call;
      std::string finish, content;
      if (!stream) {
        json j = json::parse(res->body);
        REQUIRE(j["choices"][0]["message"]["tool_calls"].size() == 1);
        call = j["choices"][0]["message"]["tool_calls"][0];
        finish = j["choices"][0]["finish_reason"];
        content = j["choices"][0]["message"]["content"].is_string() ? j["choices"][0]["message"]["content"] : "";
      } else {
        for (const json& c : sse_chunks(res->body)) {
          const json& ch = c["choices"][0];
          if (ch["delta"].contains("content") && ch["delta"]["content"].is_string())
            content += ch["delta"]["content"].get<std::string>();
          if (ch["delta"].contains("tool_calls")) call = ch["delta"]["tool_calls"][0];
          if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
        }
      }
      INFO(choice.dump() << " stream " << stream << " call " << call.dump());
      CHECK(content.empty());
      CHECK(finish == "tool_calls");
      if (choice.is_object()) CHECK(call["function"]["name"] == "get_time");
      else CHECK((call["function"]["name"] == "get_time" || call["function"]["name"] == "get_weather"));
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      CHECK((args["city"] == "Paris" || args["city"] == "Oslo"));
      for (auto& [k, v] : args.items()) CHECK((k == "city" || (k == "utc" && v.is_boolean())));
    }
  }
}

TEST_CASE("tools over HTTP: an answer without calls is plain content with finish stop") {
  ToolServer srv("It is sunny in Paris.");
  json j = json::parse(srv.post(chat_body(false))->body);
  CHECK(j["choices"][0]["message"]["content"] == "It is sunny in Paris.");
  CHECK_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  CHECK(j["choices"][0]["finish_reason"] == "stop");
}
}
