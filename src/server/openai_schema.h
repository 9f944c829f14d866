#pragma once
// OpenAI's request and response shapes for /v1/chat/completions and /v1/completions.
// Parsing validates every field's type and range and throws ApiError(400, message, param) naming
// the parameter; the result is the engine's GenerationRequest plus what the response needs.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace rs {
class Tokenizer;
}

namespace rs::server {

// What parsing needs to know about the served model.
struct ModelContext {
  std::vector<std::string> served_names;  // first is the canonical one
  const Tokenizer* tokenizer = nullptr;
  int max_model_len = 0;
  int vocab_size = 0;
  int max_logprobs = 20;  // vLLM's default --max-logprobs
};

enum class ApiKind { Chat, Completion };

struct ParsedPrompt {
  std::vector<int32_t> ids;
  std::string text;  // the prompt as text (decoded when it came as token ids): for echo
};

struct ParsedRequest {
  ApiKind kind = ApiKind::Completion;
  std::string model;  // the served name, echoed in responses
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions only
  bool logprobs = false;       // return logprobs of sampled tokens
  int top_logprobs = 0;        // alternatives per token
  std::vector<ParsedPrompt> prompts;  // chat: exactly one; completions: one per prompt
  GenerationRequest gen;              // sampling and stops; prompt and max_tokens per prompt
  std::optional<int> max_tokens;      // as asked; default: what the context leaves
  bool parse_tool_calls = false;      // chat with tools and tool_choice "auto"
  bool parallel_tool_calls = true;    // false: only the first call is returned
};

// Body text -> JSON. 400 for invalid UTF-8 (with the byte offset), malformed JSON, non-object.
nlohmann::json parse_json_body(const std::string& body);

// 404 unless `model` is absent/null (then the canonical name) or one of the served names.
std::string resolve_model_name(const nlohmann::json& body, const ModelContext& ctx);

ParsedRequest parse_chat_request(const nlohmann::json& body, const ModelContext& ctx);
ParsedRequest parse_completion_request(const nlohmann::json& body, const ModelContext& ctx);

// The request for prompt `i`, with max_tokens resolved against the context; 400 with the
// numbers when the prompt (plus max_tokens) does not fit in max_model_len.
GenerationRequest make_generation_request(const ParsedRequest& r, size_t i, const ModelContext& ctx);

// vLLM's /tokenize and /detokenize.
nlohmann::json handle_tokenize(const nlohmann::json& body, const ModelContext& ctx);
nlohmann::json handle_detokenize(const nlohmann::json& body, const ModelContext& ctx);

// ---- responses ----

// One choice's accumulated result (non-streaming), or what a stream has seen so far.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // echo + logprobs
  FinishReason finish = FinishReason::None;
  std::string error;
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

nlohmann::json usage_json(const Usage& u);

// The token as text for logprobs: the token's bytes when they are valid UTF-8, else vLLM's
// "bytes:\xNN..." spelling, so partial characters stay representable in JSON.
std::string token_display(const Tokenizer& tok, int32_t id);

// Chat: {"content": [{"token","logprob","bytes","top_logprobs": [...]}, ...]}
nlohmann::json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                                  int top_n);
// Completions: {"tokens","token_logprobs","top_logprobs","text_offset"}; prompt entries first
// when echoing (prompt_ids with their logprobs; the first has none). `text_offset0` is the
// offset of the first token's text in the choice's text.
nlohmann::json completion_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& prompt_ids,
                                        const std::vector<std::optional<TokenLogprob>>& prompt_lps,
                                        const std::vector<TokenLogprob>& lps, int top_n,
                                        size_t text_offset0);

// Full non-streaming bodies. `choices` are in response order (prompt-major, then n).
nlohmann::json chat_response(const ParsedRequest& r, const std::string& id, int64_t created,
                             const std::vector<ChoiceResult>& choices, const Usage& usage,
                             const Tokenizer& tok);
nlohmann::json completion_response(const ParsedRequest& r, const std::string& id, int64_t created,
                                   const std::vector<ChoiceResult>& choices, const Usage& usage,
                                   const Tokenizer& tok);

// Streaming chunk envelopes; `choice` is the object inside "choices" (or omitted for usage).
nlohmann::json chunk_envelope(const ParsedRequest& r, const std::string& id, int64_t created,
                              nlohmann::json choices);

const char* finish_reason_json(FinishReason f);  // "stop" | "length" | "abort" | "error"

struct ToolCall;
// OpenAI's tool_calls array; `index` fields when streaming (deltas), ids drawn fresh.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

}  // namespace rs::server
