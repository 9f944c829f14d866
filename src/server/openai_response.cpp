// Response side of openai_schema.h: engine results -> OpenAI JSON.
#include <cmath>
#include <cstdio>

#include "server/ids.h"
#include "server/openai_schema.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace rs::server {

using nlohmann::json;

namespace {

// JSON has no -inf; vLLM reports impossible tokens as -9999.0, and so do we.
double json_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

json bytes_array(const std::string& b) {
  json a = json::array();
  for (unsigned char c : b) a.push_back(int(c));
  return a;
}

bool valid_utf8(const std::string& s) {
  // Strict (RFC 3629): the token strings must be JSON-safe as they stand.
  size_t i = 0, n = s.size();
  auto cont = [&](size_t k) { return k < n && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80; };
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) { ++i; continue; }
    int len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (len == 0) return false;
    for (int k = 1; k < len; ++k)
      if (!cont(i + k)) return false;
    unsigned char c1 = s[i + 1];
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 > 0x8F))
      return false;
    i += len;
  }
  return true;
}

}  // namespace

const char* finish_reason_json(FinishReason f) {
  switch (f) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "abort";
    case FinishReason::Error: return "error";
    default: return nullptr;
  }
}

static json finish_json(FinishReason f) {
  const char* s = finish_reason_json(f);
  return s ? json(s) : json(nullptr);
}

std::string token_display(const Tokenizer& tok, int32_t id) {
  std::string b = tok.token_bytes(id);
  if (valid_utf8(b)) return b;
  std::string out = "bytes:";
  char buf[8];
  for (unsigned char c : b) {
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  }
  return out;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int top_n) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    json top = json::array();
    for (size_t k = 0; k < lp.top.size() && int(k) < top_n; ++k) {
      const auto& [id, v] = lp.top[k];
      top.push_back({{"token", token_display(tok, id)},
                     {"logprob", json_logprob(v)},
                     {"bytes", bytes_array(tok.token_bytes(id))}});
    }
    content.push_back({{"token", token_display(tok, lp.id)},
                       {"logprob", json_logprob(lp.logprob)},
                       {"bytes", bytes_array(tok.token_bytes(lp.id))},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json completion_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& prompt_ids,
                              const std::vector<std::optional<TokenLogprob>>& prompt_lps,
                              const std::vector<TokenLogprob>& lps, int top_n, size_t text_offset0) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = text_offset0;
  auto add = [&](int32_t id, const TokenLogprob* lp) {
    std::string shown = token_display(tok, id);
    tokens.push_back(shown);
    offsets.push_back(offset);
    offset += tok.token_bytes(id).size();
    if (!lp) {  // the first prompt token has nothing to be conditioned on
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    token_lps.push_back(json_logprob(lp->logprob));
    json top = json::object();
    for (size_t k = 0; k < lp->top.size() && int(k) < top_n; ++k)
      top[token_display(tok, lp->top[k].first)] = json_logprob(lp->top[k].second);
    tops.push_back(std::move(top));
  };
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const bool have = i < prompt_lps.size() && prompt_lps[i].has_value();
    add(prompt_ids[i], have ? &*prompt_lps[i] : nullptr);
  }
  for (const TokenLogprob& lp : lps) add(lp.id, &lp);
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json chat_response(const ParsedRequest& r, const std::string& id, int64_t created,
                   const std::vector<ChoiceResult>& choices, const Usage& usage, const Tokenizer& tok) {
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json message = {{"role", "assistant"}, {"content", c.text}};
    json finish = finish_json(c.finish);
    if (r.parse_tool_calls) {
      ToolCallOutput t = parse_tool_calls(c.text);
      if (!r.parallel_tool_calls && t.calls.size() > 1) t.calls.resize(1);
      if (!t.calls.empty()) {
        // OpenAI: content is null when the message is only tool calls.
        message["content"] = t.content.empty() ? json(nullptr) : json(t.content);
        message["tool_calls"] = tool_calls_json(t.calls, false);
        if (c.finish == FinishReason::Stop || c.finish == FinishReason::Length) finish = "tool_calls";
      }
    }
    cs.push_back({{"index", i},
                  {"message", std::move(message)},
                  {"logprobs", r.logprobs ? chat_logprobs_json(tok, c.logprobs, r.top_logprobs) : json(nullptr)},
                  {"finish_reason", std::move(finish)}});
  }
  return {{"id", id},         {"object", "chat.completion"}, {"created", created},
          {"model", r.model}, {"choices", std::move(cs)},    {"usage", usage_json(usage)}};
}

json completion_response(const ParsedRequest& r, const std::string& id, int64_t created,
                         const std::vector<ChoiceResult>& choices, const Usage& usage,
                         const Tokenizer& tok) {
  json cs = json::array();
  const size_t n = size_t(std::max(1, r.gen.n));
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    const std::string& prompt_text = r.prompts.at(i / n).text;
    std::string text = r.echo ? prompt_text + c.text : c.text;
    json lps = nullptr;
    if (r.logprobs) {
      // With echo the prompt's tokens come first; their offsets start at 0.
      lps = r.echo ? completion_logprobs_json(tok, r.prompts.at(i / n).ids, c.prompt_logprobs,
                                              c.logprobs, r.top_logprobs, 0)
                   : completion_logprobs_json(tok, {}, {}, c.logprobs, r.top_logprobs, 0);
    }
    cs.push_back({{"index", i}, {"text", std::move(text)}, {"logprobs", std::move(lps)},
                  {"finish_reason", finish_json(c.finish)}});
  }
  return {{"id", id},         {"object", "text_completion"}, {"created", created},
          {"model", r.model}, {"choices", std::move(cs)},    {"usage", usage_json(usage)}};
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json c = {{"id", random_id("chatcmpl-tool")},
              {"type", calls[k].type},
              {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) c["index"] = k;
    out.push_back(std::move(c));
  }
  return out;
}

json chunk_envelope(const ParsedRequest& r, const std::string& id, int64_t created, json choices) {
  return {{"id", id},
          {"object", r.kind == ApiKind::Chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", r.model},
          {"choices", std::move(choices)}};
}

}  // namespace rs::server
