// Request side of openai_schema.h: JSON body -> ParsedRequest -> GenerationRequest.
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "engine/json_schema.h"
#include "server/errors.h"
#include "server/openai_schema.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace rs::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

// A present, non-null field (OpenAI treats null as "use the default").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

double get_number(const json& body, const char* name, double def, double lo, double hi,
                  bool lo_open = false) {
  const json* f = field(body, name);
  if (!f) return def;
  if (!f->is_number())
    bad(name, std::string("'") + name + "' must be a number, got " + type_name(*f));
  double v = f->get<double>();
  bool below = lo_open ? !(v > lo) : !(v >= lo);
  if (below || !(v <= hi))
    bad(name, std::string("'") + name + "' must be in " + (lo_open ? "(" : "[") + fmt_num(lo) +
                  ", " + fmt_num(hi) + "], got " + fmt_num(v));
  return v;
}

int64_t as_integer(const json& f, const std::string& name) {
  if (f.is_number_unsigned() && f.get<uint64_t>() > uint64_t(INT64_MAX))
    bad(name, "'" + name + "' is too large");
  if (f.is_number_integer()) return f.get<int64_t>();
  bad(name, "'" + name + "' must be an integer, got " + type_name(f));
}

std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* f = field(body, name);
  if (!f) return std::nullopt;
  int64_t v = as_integer(*f, name);
  if (v < lo || v > hi)
    bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got " + std::to_string(v));
  return v;
}

bool get_bool(const json& body, const char* name, bool def) {
  const json* f = field(body, name);
  if (!f) return def;
  if (!f->is_boolean())
    bad(name, std::string("'") + name + "' must be a boolean, got " + type_name(*f));
  return f->get<bool>();
}

int32_t checked_token_id(const json& v, const std::string& param, const ModelContext& ctx) {
  if (!v.is_number_integer())
    bad(param, "'" + param + "' must hold integer token ids, got " + type_name(v));
  int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
  if (id < 0 || id >= ctx.vocab_size)
    bad(param, "token id " + std::to_string(id) + " in '" + param + "' is outside the vocabulary [0, " +
                   std::to_string(ctx.vocab_size) + ")");
  return static_cast<int32_t>(id);
}

// Fields that would change the output but are not implemented: refuse rather than ignore.
void reject_unsupported(const json& body) {
  if (const json* f = field(body, "functions"); f && !(f->is_array() && f->empty()))
    bad("functions", "'functions' is OpenAI's deprecated form: use 'tools'");
  if (const json* f = field(body, "suffix"); f && !(f->is_string() && f->get<std::string>().empty()))
    bad("suffix", "'suffix' is not supported");
}

void parse_stop(const json& body, GenerationRequest& g, const ModelContext& ctx) {
  if (const json* f = field(body, "stop")) {
    auto add = [&](const json& s, const std::string& param) {
      if (!s.is_string()) bad("stop", "'" + param + "' must be a string, got " + type_name(s));
      std::string v = s.get<std::string>();
      if (v.empty()) bad("stop", "'" + param + "' must not be empty");
      g.stop.push_back(std::move(v));
    };
    if (f->is_string()) {
      add(*f, "stop");
    } else if (f->is_array()) {
      if (f->size() > 64) bad("stop", "'stop' may hold at most 64 strings");
      for (size_t i = 0; i < f->size(); ++i) add((*f)[i], "stop[" + std::to_string(i) + "]");
    } else {
      bad("stop", std::string("'stop' must be a string or an array of strings, got ") + type_name(*f));
    }
  }
  if (const json* f = field(body, "stop_token_ids")) {
    if (!f->is_array()) bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    for (const json& v : *f) g.stop_token_ids.push_back(checked_token_id(v, "stop_token_ids", ctx));
  }
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}. Keys that name the same id ("5",
// "05") are refused rather than silently merged.
void parse_logit_bias(const json& body, SamplingParams& s, const ModelContext& ctx) {
  const json* f = field(body, "logit_bias");
  if (!f) return;
  if (!f->is_object()) bad("logit_bias", std::string("'logit_bias' must be an object, got ") + type_name(*f));
  std::vector<char> seen;
  for (const auto& [key, val] : f->items()) {
    const std::string param = "logit_bias[\"" + key.substr(0, 32) + "\"]";
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (!digits || id >= ctx.vocab_size)
      bad("logit_bias", "'" + param + "': keys must be token ids in [0, " + std::to_string(ctx.vocab_size) + ")");
    if (!val.is_number()) bad("logit_bias", "'" + param + "' must be a number, got " + type_name(val));
    const double b = val.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) bad("logit_bias", "'" + param + "' must be in [-100, 100]");
    if (seen.empty()) seen.assign(size_t(ctx.vocab_size), 0);
    if (seen[size_t(id)]) bad("logit_bias", "token id " + std::to_string(id) + " appears twice in 'logit_bias'");
    seen[size_t(id)] = 1;
    s.logit_bias.emplace_back(int32_t(id), float(b));
  }
}

// tool_choice "required" / named: the output is held to one call (of any tool / of that one) in
// the model's tool-call syntax, its arguments to the function's parameters schema.
void force_tool_call(const json& tools, const std::string& only, ParsedRequest& r) {
  if (r.gen.json_object)
    bad("tool_choice", "tool_choice \"required\" or a named function cannot be combined with response_format");
  std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>> alts;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const json params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"]
                                                                                  : json{{"type", "object"}};
    try {
      alts.emplace_back(forced_call_prefix(name), JsonSchema::compile(params));
    } catch (const Error& e) {
      const std::string p = "tools[" + std::to_string(i) + "].function.parameters";
      bad(p, "'" + p + "' cannot be enforced: " + e.what());
    }
  }
  if (alts.empty()) bad("tool_choice", "tool_choice names function '" + only + "', which is not among 'tools'");
  try {
    r.gen.json_wrapped = JsonWrapped::make(alts, forced_call_suffix());
  } catch (const Error& e) {
    bad("tools", std::string("'tools': ") + e.what());  // two tools of the same name
  }
  r.gen.json_object = true;
}

// OpenAI's tools and tool_choice. Returns the tools for the chat template (null: none).
json parse_tools(const json& body, ParsedRequest& r) {
  const json* f = field(body, "tools");
  if (f && !f->is_array()) bad("tools", std::string("'tools' must be an array, got ") + type_name(*f));
  const bool have = f && !f->empty();
  if (have) {
    for (size_t i = 0; i < f->size(); ++i) {
      const json& t = (*f)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        bad(p, "'" + p + "' must be an object with type \"function\"");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) bad(p + ".function", "'" + p + ".function' must be an object");
      auto name = fn->find("name");
      bool ok = name != fn->end() && name->is_string() && !name->get_ref<const std::string&>().empty() &&
                name->get_ref<const std::string&>().size() <= 64;
      if (ok)
        for (char c : name->get_ref<const std::string&>())
          ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
      if (!ok) bad(p + ".function.name", "'" + p + ".function.name' must match ^[a-zA-Z0-9_-]{1,64}$");
      if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
        bad(p + ".function.description", "'" + p + ".function.description' must be a string");
      if (auto pa = fn->find("parameters"); pa != fn->end() && !pa->is_null() && !pa->is_object())
        bad(p + ".function.parameters", "'" + p + ".function.parameters' must be a JSON Schema object");
    }
  }
  std::string choice = have ? "auto" : "none";
  if (const json* c = field(body, "tool_choice")) {
    if (c->is_string() && (*c == "none" || *c == "auto" || *c == "required")) {
      choice = c->get<std::string>();
    } else if (c->is_object()) {
      choice = "named";
    } else {
      bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
    }
    if (choice != "none" && !have) bad("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
    if (choice == "named") {
      auto fn = c->find("function");
      if (!c->contains("type") || (*c)["type"] != "function" || fn == c->end() || !fn->is_object() ||
          !fn->contains("name") || !(*fn)["name"].is_string())
        bad("tool_choice", "a named tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      force_tool_call(*f, (*fn)["name"].get<std::string>(), r);
    } else if (choice == "required") {
      force_tool_call(*f, "", r);
    }
  }
  r.parallel_tool_calls = get_bool(body, "parallel_tool_calls", true);
  r.parse_tool_calls = have && choice != "none";
  return have ? *f : json(nullptr);
}

// Everything the two endpoints share.
void parse_common(const json& body, const ModelContext& ctx, ParsedRequest& r) {
  reject_unsupported(body);
  r.model = resolve_model_name(body, ctx);
  GenerationRequest& g = r.gen;
  SamplingParams& s = g.sampling;
  s.temperature = float(get_number(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = float(get_number(body, "top_p", 1.0, 0.0, 1.0, /*lo_open=*/true));
  int64_t top_k = get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0);
  s.top_k = top_k < 0 ? 0 : int(std::min<int64_t>(top_k, ctx.vocab_size));
  s.min_p = float(get_number(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = float(get_number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = float(get_number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = float(get_number(body, "repetition_penalty", 1.0, 0.0, 10.0, true));
  parse_logit_bias(body, s, ctx);
  if (const json* f = field(body, "response_format")) {
    if (!f->is_object()) bad("response_format", "'response_format' must be an object");
    auto t = f->find("type");
    if (t == f->end() || !t->is_string() || (*t != "text" && *t != "json_object" && *t != "json_schema"))
      bad("response_format", "response_format type must be \"text\", \"json_object\" or \"json_schema\"");
    g.json_object = *t != "text";
    if (*t == "json_schema") {
      auto js = f->find("json_schema");
      if (js == f->end() || !js->is_object())
        bad("response_format", "response_format type \"json_schema\" needs a \"json_schema\" object");
      auto sc = js->find("schema");
      if (sc == js->end()) bad("response_format", "response_format.json_schema needs a \"schema\"");
      try {
        g.json_schema = JsonSchema::compile(*sc);
      } catch (const Error& e) {
        bad("response_format", std::string("response_format.json_schema.schema: ") + e.what());
      }
    }
  }
  g.min_tokens = int(get_int(body, "min_tokens", 0, std::numeric_limits<int32_t>::max()).value_or(0));
  if (auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  } else {
    // Unseeded requests must differ from each other: draw a fresh seed per request.
    static std::atomic<uint64_t> counter{0};
    uint64_t t = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    s.seed = t * 0x9e3779b97f4a7c15ULL + (++counter) * 0xbf58476d1ce4e5b9ULL;
  }
  g.n = int(get_int(body, "n", 1, 128).value_or(1));
  if (const json* f = field(body, "best_of")) {
    if (!f->is_number_integer() || f->get<int64_t>() != g.n)
      bad("best_of", "'best_of' other than n is not supported");
  }
  parse_stop(body, g, ctx);
  g.ignore_eos = get_bool(body, "ignore_eos", false);
  g.skip_special_tokens = get_bool(body, "skip_special_tokens", true);
  g.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output", false);

  r.stream = get_bool(body, "stream", false);
  if (const json* f = field(body, "stream_options")) {
    if (!f->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = get_bool(*f, "include_usage", false);
  }
}

void set_max_tokens(const json& body, const char* name, ParsedRequest& r) {
  if (auto v = get_int(body, name, 1, std::numeric_limits<int32_t>::max())) r.max_tokens = int(*v);
}

// Chat content: a string, null (assistant with tool calls), or an array of text parts.
json normalize_content(const json& content, const std::string& param, bool null_ok) {
  if (content.is_null()) {
    if (!null_ok) bad(param, "'" + param + "' must not be null");
    return nullptr;
  }
  if (content.is_string()) return content;
  if (!content.is_array())
    bad(param, "'" + param + "' must be a string or an array of content parts, got " + type_name(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad(pp, "'" + pp + "' must be an object");
    auto t = part.find("type");
    if (t == part.end() || !t->is_string()) bad(pp + ".type", "'" + pp + ".type' must be a string");
    if (*t != "text") bad(pp + ".type", "content part type '" + t->get<std::string>() + "' is not supported (text only)");
    auto tx = part.find("text");
    if (tx == part.end() || !tx->is_string()) bad(pp + ".text", "'" + pp + ".text' must be a string");
    if (!text.empty()) text += "\n";  // vLLM joins text parts with newlines
    text += tx->get<std::string>();
  }
  return text;
}

json normalize_messages(const json& msgs) {
  if (!msgs.is_array()) bad("messages", std::string("'messages' must be an array, got ") + type_name(msgs));
  if (msgs.empty()) bad("messages", "'messages' must not be empty");
  json out = json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(p, "'" + p + "' must be an object");
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) bad(p + ".role", "'" + p + ".role' must be a string");
    std::string role = role_it->get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(p + ".role", "'" + p + ".role' must be system, developer, user, assistant or tool, got '" + role + "'");
    json nm = {{"role", role}};
    bool has_tool_calls = false;
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (role != "assistant") bad(p + ".tool_calls", "only assistant messages carry tool_calls");
      if (!tc->is_array()) bad(p + ".tool_calls", "'" + p + ".tool_calls' must be an array");
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& c = (*tc)[k];
        std::string cp = p + ".tool_calls[" + std::to_string(k) + "]";
        auto fn = c.is_object() ? c.find("function") : c.end();
        if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") ||
            !(*fn)["name"].is_string() || !fn->contains("arguments") || !(*fn)["arguments"].is_string())
          bad(cp, "'" + cp + "' must be {type, function: {name: string, arguments: string}}");
      }
      json calls = *tc;
      for (json& c : calls)
        if (!c.contains("type") || !c["type"].is_string()) c["type"] = "function";
      nm["tool_calls"] = std::move(calls);
      has_tool_calls = !tc->empty();
    }
    auto content_it = m.find("content");
    json content = content_it == m.end() ? json(nullptr) : *content_it;
    content = normalize_content(content, p + ".content", role == "assistant" && has_tool_calls);
    if (content.is_null() && role == "assistant" && !has_tool_calls) content = "";
    nm["content"] = content;
    for (const char* extra : {"name", "tool_call_id"})
      if (auto e = m.find(extra); e != m.end() && e->is_string()) nm[extra] = *e;
    out.push_back(std::move(nm));
  }
  return out;
}

// Deepest nesting of arrays/objects, computed without recursion (the body is untrusted).
size_t nesting_depth(const json& root) {
  size_t deepest = 0;
  std::vector<std::pair<const json*, size_t>> todo = {{&root, 0}};
  while (!todo.empty()) {
    auto [j, d] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const json& child : *j) todo.push_back({&child, d + 1});
  }
  return deepest;
}

// Copying, dumping and template rendering all recurse over the JSON tree; a body nested a
// million levels deep would overflow the stack of whatever thread touched it first.
constexpr size_t kMaxJsonDepth = 64;

}  // namespace

json parse_json_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (what.find("UTF-8") != std::string::npos)
      throw ApiError(400, "request body is not valid UTF-8 (byte " + std::to_string(e.byte) + ")");
    throw ApiError(400, "request body is not valid JSON: " + what);
  } catch (const json::exception& e) {  // e.g. a number beyond double's range
    throw ApiError(400, std::string("request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object())
    throw ApiError(400, std::string("request body must be a JSON object, got ") + type_name(j));
  if (nesting_depth(j) > kMaxJsonDepth)
    throw ApiError(400, "request body nests arrays/objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  return j;
}

std::string resolve_model_name(const json& body, const ModelContext& ctx) {
  const json* f = field(body, "model");
  if (!f) return ctx.served_names.at(0);
  if (!f->is_string()) bad("model", std::string("'model' must be a string, got ") + type_name(*f));
  std::string name = f->get<std::string>();
  for (const auto& n : ctx.served_names)
    if (n == name) return n;
  throw ApiError(404, "The model '" + name + "' does not exist (this server serves '" +
                          ctx.served_names.at(0) + "')", std::string("model"));
}

ParsedRequest parse_chat_request(const json& body, const ModelContext& ctx) {
  ParsedRequest r;
  r.kind = ApiKind::Chat;
  parse_common(body, ctx, r);
  const json* msgs = field(body, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  json messages = normalize_messages(*msgs);
  if (get_bool(body, "echo", false)) bad("echo", "'echo' is not supported for chat completions");
  set_max_tokens(body, "max_tokens", r);
  set_max_tokens(body, "max_completion_tokens", r);  // the newer name wins
  r.logprobs = get_bool(body, "logprobs", false);
  r.top_logprobs = int(get_int(body, "top_logprobs", 0, ctx.max_logprobs).value_or(0));
  if (r.top_logprobs > 0 && !r.logprobs)
    bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  r.gen.sampling.logprobs = r.logprobs ? r.top_logprobs : -1;

  bool add_generation_prompt = get_bool(body, "add_generation_prompt", true);
  if (get_bool(body, "continue_final_message", false))
    bad("continue_final_message", "'continue_final_message' is not supported");
  json extra = json::object();
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    extra = *kw;
  }
  // The template renders the tool definitions (transformers passes them as `tools`).
  if (json tools = parse_tools(body, r); !tools.is_null() && !extra.contains("tools")) extra["tools"] = std::move(tools);
  const Tokenizer& tok = *ctx.tokenizer;
  if (!tok.has_chat_template())
    throw ApiError(400, "this model's tokenizer has no chat template; use /v1/completions");
  std::string rendered;
  try {
    rendered = tok.apply_chat_template(messages, add_generation_prompt, &extra);
  } catch (const Error& e) {
    throw ApiError(400, std::string("chat template: ") + e.what(), std::string("messages"));
  }
  ParsedPrompt p;
  // The template writes the BOS text itself; adding special tokens again would double it.
  p.ids = tok.encode(rendered, /*add_special_tokens=*/false);
  p.text = std::move(rendered);
  if (p.ids.empty()) bad("messages", "the rendered conversation is empty");
  r.prompts.push_back(std::move(p));
  return r;
}

ParsedRequest parse_completion_request(const json& body, const ModelContext& ctx) {
  ParsedRequest r;
  r.kind = ApiKind::Completion;
  parse_common(body, ctx, r);
  for (const char* chat_only : {"tools", "tool_choice"})
    if (field(body, chat_only))
      bad(chat_only, std::string("'") + chat_only + "' is for /v1/chat/completions");
  set_max_tokens(body, "max_tokens", r);
  if (const json* f = field(body, "logprobs")) {
    if (f->is_boolean()) bad("logprobs", "'logprobs' must be an integer for completions (0.." + std::to_string(ctx.max_logprobs) + ")");
    r.top_logprobs = int(get_int(body, "logprobs", 0, ctx.max_logprobs).value_or(0));
    r.logprobs = true;
  }
  r.gen.sampling.logprobs = r.logprobs ? r.top_logprobs : -1;
  r.echo = get_bool(body, "echo", false);
  r.gen.prompt_logprobs = r.echo && r.logprobs;
  bool add_special = get_bool(body, "add_special_tokens", true);

  const json* pf = field(body, "prompt");
  if (!pf) bad("prompt", "'prompt' is required");
  const Tokenizer& tok = *ctx.tokenizer;
  auto from_text = [&](const json& s) {
    ParsedPrompt p;
    p.text = s.get<std::string>();
    p.ids = tok.encode(p.text, add_special);
    if (p.ids.empty()) bad("prompt", "'prompt' is empty");
    return p;
  };
  auto from_ids = [&](const json& arr, const std::string& param) {
    ParsedPrompt p;
    if (arr.empty()) bad("prompt", "'" + param + "' is empty");
    for (const json& v : arr) p.ids.push_back(checked_token_id(v, param, ctx));
    p.text = tok.decode(p.ids, /*skip_special_tokens=*/false);
    return p;
  };
  constexpr size_t kMaxPrompts = 256;
  if (pf->is_string()) {
    r.prompts.push_back(from_text(*pf));
  } else if (pf->is_array()) {
    if (pf->empty()) bad("prompt", "'prompt' is empty");
    const json& first = (*pf)[0];
    if (first.is_number()) {
      r.prompts.push_back(from_ids(*pf, "prompt"));
    } else {
      if (pf->size() > kMaxPrompts) bad("prompt", "at most " + std::to_string(kMaxPrompts) + " prompts per request");
      for (size_t i = 0; i < pf->size(); ++i) {
        const json& e = (*pf)[i];
        std::string param = "prompt[" + std::to_string(i) + "]";
        if (e.is_string()) r.prompts.push_back(from_text(e));
        else if (e.is_array()) r.prompts.push_back(from_ids(e, param));
        else bad("prompt", "'" + param + "' must be a string or an array of token ids, got " + type_name(e));
      }
    }
  } else {
    bad("prompt", std::string("'prompt' must be a string, an array of strings, or token ids, got ") + type_name(*pf));
  }
  return r;
}

GenerationRequest make_generation_request(const ParsedRequest& r, size_t i, const ModelContext& ctx) {
  GenerationRequest g = r.gen;
  g.prompt = r.prompts.at(i).ids;
  const int p = int(g.prompt.size());
  const int m = ctx.max_model_len;
  const char* what = r.kind == ApiKind::Chat ? "messages" : "prompt";
  if (p >= m)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(m) +
                            " tokens. However, your request has " + std::to_string(p) +
                            " input tokens. Please reduce the length of the " + what + ".",
                   std::string(what));
  if (r.max_tokens) {
    if (int64_t(p) + *r.max_tokens > m)
      throw ApiError(400, "This model's maximum context length is " + std::to_string(m) +
                              " tokens. However, you requested " + std::to_string(int64_t(p) + *r.max_tokens) +
                              " tokens (" + std::to_string(p) + " in the " + what + ", " +
                              std::to_string(*r.max_tokens) + " in the completion). Please reduce the length of the " +
                              what + " or completion.",
                     std::string(r.kind == ApiKind::Chat ? "max_completion_tokens" : "max_tokens"));
    g.max_tokens = *r.max_tokens;
  } else {
    g.max_tokens = m - p;
  }
  if (g.min_tokens > g.max_tokens)
    throw ApiError(400, "min_tokens (" + std::to_string(g.min_tokens) + ") must be at most max_tokens (" +
                            std::to_string(g.max_tokens) + ")",
                   "min_tokens");
  return g;
}

json handle_tokenize(const json& body, const ModelContext& ctx) {
  resolve_model_name(body, ctx);
  const Tokenizer& tok = *ctx.tokenizer;
  std::vector<int32_t> ids;
  const json* prompt = field(body, "prompt");
  const json* messages = field(body, "messages");
  if ((prompt == nullptr) == (messages == nullptr)) bad("prompt", "give exactly one of 'prompt' or 'messages'");
  if (prompt) {
    if (!prompt->is_string()) bad("prompt", std::string("'prompt' must be a string, got ") + type_name(*prompt));
    ids = tok.encode(prompt->get<std::string>(), get_bool(body, "add_special_tokens", true));
  } else {
    json msgs = normalize_messages(*messages);
    std::string rendered;
    try {
      rendered = tok.apply_chat_template(msgs, get_bool(body, "add_generation_prompt", true));
    } catch (const Error& e) {
      throw ApiError(400, std::string("chat template: ") + e.what(), std::string("messages"));
    }
    ids = tok.encode(rendered, get_bool(body, "add_special_tokens", false));
  }
  json out = {{"count", ids.size()}, {"max_model_len", ctx.max_model_len}, {"tokens", ids}};
  if (get_bool(body, "return_token_strs", false)) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(token_display(tok, id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return out;
}

json handle_detokenize(const json& body, const ModelContext& ctx) {
  resolve_model_name(body, ctx);
  const json* t = field(body, "tokens");
  if (!t || !t->is_array()) bad("tokens", "'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (const json& v : *t) ids.push_back(checked_token_id(v, "tokens", ctx));
  return {{"prompt", ctx.tokenizer->decode(ids, /*skip_special_tokens=*/false)}};
}

}  // namespace rs::server
