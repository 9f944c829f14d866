// Seeded random mutation of request bodies through the whole request path in-process: JSON
// parsing, validation, chat-template rendering with the real DeepSeek-V3 tokenizer, context
// checks, and response building. Bounded by iterations and time; reproducible from the seed.
// A failure prints the body that caused it.
#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "common/error.h"
#include "model/embedded_assets.h"
#include "server/errors.h"
#include "server/openai_schema.h"
#include "tokenizer/tokenizer.h"
#include "unit/server_test_support.h"

using namespace rs;
using namespace rs::server;
using nlohmann::json;

namespace {

const std::vector<std::string> kSeeds = {
    R"({"model":"m","messages":[{"role":"user","content":"Hello there"}],"max_tokens":8})",
    R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":[{"type":"text","text":"again"}]}],"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":42,"stop":["\n","END"],"n":2,"logprobs":true,"top_logprobs":3,"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":5})",
    R"({"messages":[{"role":"user","content":"t"},{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"42"}],"presence_penalty":1.5,"frequency_penalty":-1,"repetition_penalty":1.1})",
    R"({"model":"m","prompt":"Once upon a time","max_tokens":16,"temperature":0,"echo":true,"logprobs":2})",
    R"({"prompt":[0,100,200,300],"max_tokens":4,"stop_token_ids":[1,2],"ignore_eos":true})",
    R"({"prompt":["a","b",[5,6,7]],"max_tokens":2,"n":3,"seed":-7,"stop":"x"})",
};

const std::vector<std::string> kNasty = {
    "", "{", "}", "[", "]", "\"", "\\", ":", ",", "null", "true", "-0", "1e309", "-1e309",
    "9223372036854775808", "-9223372036854775809", "18446744073709551616", "0.0000001",
    "\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\\ud800", "\\u0000",
    "{{ 1/0 }}", "{% for x in y %}", "{{ raise_exception('boom') }}", "<｜User｜>",
    "<｜end▁of▁sentence｜>", "{%- set ns.x = 1 %}", "\n\n\n", std::string(300, 'a'),
};

json random_value(std::mt19937_64& rng, int depth = 0) {
  std::uniform_int_distribution<int> kind(0, depth > 2 ? 5 : 7);
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return bool(rng() & 1);
    case 2: {
      static const int64_t ints[] = {0, 1, -1, 2, 5, 20, 21, 128, 129, 4096, 129279, 129280, INT32_MAX,
                                     INT64_MAX, INT64_MIN, -129280};
      return ints[rng() % (sizeof ints / sizeof ints[0])];
    }
    case 3: {
      static const double ds[] = {0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 2.0001, -2.0001, 1e-300, 1e308, -1e308, 3.14};
      return ds[rng() % (sizeof ds / sizeof ds[0])];
    }
    case 4: {
      std::string s = kNasty[rng() % kNasty.size()];
      // Keep JSON strings valid UTF-8 here; raw invalid bytes are the byte mutator's job.
      return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace));
    }
    case 5: return uint64_t(rng());
    case 6: {
      json a = json::array();
      int n = int(rng() % 4);
      for (int i = 0; i < n; ++i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      static const char* keys[] = {"role", "content", "type", "text", "include_usage", "function", "name"};
      int n = int(rng() % 3);
      for (int i = 0; i < n; ++i) o[keys[rng() % 7]] = random_value(rng, depth + 1);
      return o;
    }
  }
}

// Replace, delete or add one value somewhere in the tree.
void mutate_tree(json& j, std::mt19937_64& rng) {
  json* node = &j;
  for (int d = 0; d < 4; ++d) {
    if (node->is_object() && !node->empty() && (rng() % 3)) {
      auto it = node->begin();
      std::advance(it, rng() % node->size());
      node = &it.value();
    } else if (node->is_array() && !node->empty() && (rng() % 3)) {
      node = &(*node)[rng() % node->size()];
    } else {
      break;
    }
  }
  static const char* keys[] = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature",
                               "top_p", "top_k", "min_p", "n", "stop", "stop_token_ids", "seed", "logprobs",
                               "top_logprobs", "echo", "stream", "stream_options", "presence_penalty",
                               "frequency_penalty", "repetition_penalty", "ignore_eos", "best_of", "logit_bias",
                               "response_format", "tools", "chat_template_kwargs", "add_generation_prompt"};
  switch (rng() % 3) {
    case 0: *node = random_value(rng); break;
    case 1:
      if (node->is_object() && !node->empty()) {
        auto it = node->begin();
        std::advance(it, rng() % node->size());
        node->erase(it);
      } else if (node->is_array() && !node->empty()) {
        node->erase(node->begin() + long(rng() % node->size()));
      }
      break;
    default:
      if (node->is_object()) (*node)[keys[rng() % (sizeof keys / sizeof keys[0])]] = random_value(rng);
      else if (node->is_array()) node->push_back(random_value(rng));
      else *node = random_value(rng);
  }
}

void mutate_bytes(std::string& s, std::mt19937_64& rng) {
  int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0: if (!s.empty() && pos < s.size()) s[pos] = char(rng()); break;
      case 1: s.insert(pos, kNasty[rng() % kNasty.size()]); break;
      case 2: if (pos < s.size()) s.erase(pos, 1 + rng() % 8); break;
      case 3: s.resize(pos); break;
      default: if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 16)); break;
    }
  }
}

// One body through everything a request handler does before and after the engine.
// Returns an empty string, or a description of a failure that is not a clean client error.
std::string run_one(const std::string& body, const ModelContext& ctx) {
  try {
    json j = parse_json_body(body);
    bool chat = j.contains("messages");
    ParsedRequest r = chat ? parse_chat_request(j, ctx) : parse_completion_request(j, ctx);
    for (size_t i = 0; i < r.prompts.size(); ++i) {
      GenerationRequest g = make_generation_request(r, i, ctx);
      if (g.prompt.empty() || g.max_tokens < 1 || int(g.prompt.size()) + g.max_tokens > ctx.max_model_len)
        return "accepted a request that cannot run";
    }
    // Build the responses the request would get, from plausible results.
    std::vector<ChoiceResult> choices(r.prompts.size() * size_t(std::max(1, r.gen.n)));
    for (auto& c : choices) {
      c.text = "out";
      c.token_ids = {3, 4};
      c.logprobs = {{3, -0.1f, {{3, -0.1f}, {9, -2.f}}}, {4, -0.2f, {}}};
      c.finish = FinishReason::Length;
    }
    Usage u{3, 2, 0};
    std::string out = dump_json(chat ? chat_response(r, "id", 0, choices, u, *ctx.tokenizer)
                                     : completion_response(r, "id", 0, choices, u, *ctx.tokenizer));
    if (out.empty()) return "empty response";
  } catch (const ApiError& e) {
    if (e.status() != 400 && e.status() != 404) return "unexpected status " + std::to_string(e.status());
    if (std::string(e.what()).empty()) return "empty error message";
  } catch (const rs::Error& e) {
    // Tokenizer and template errors are user errors too (the route maps them to 400).
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
  return {};
}

void fuzz(const ModelContext& ctx, uint64_t seed, int iterations, double seconds) {
  std::mt19937_64 rng(seed);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int done = 0;
  for (; done < iterations && std::chrono::steady_clock::now() < until; ++done) {
    std::string body = kSeeds[rng() % kSeeds.size()];
    if (rng() % 2) {
      json j = json::parse(body);
      int n = 1 + int(rng() % 3);
      for (int k = 0; k < n; ++k) mutate_tree(j, rng);
      body = j.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    if (rng() % 3 == 0) mutate_bytes(body, rng);
    std::string failure = run_one(body, ctx);
    if (!failure.empty()) {
      FAIL_CHECK("seed " << seed << " iteration " << done << ": " << failure << "\nbody: " << body);
      return;
    }
  }
  MESSAGE("fuzzed " << done << " bodies (seed " << seed << ")");
  CHECK(done > 100);
}

}  // namespace

TEST_SUITE("unit.fuzz_request") {
TEST_CASE("mutated request bodies never crash the parser, validator, template or response builder") {
  auto tok = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  ModelContext ctx;
  ctx.served_names = {"m"};
  ctx.tokenizer = tok.get();
  ctx.max_model_len = 256;
  ctx.vocab_size = 129280;
  fuzz(ctx, 0x5eed0001, 6000, 8.0);

  rs::testing::ByteTokenizer bytes;
  ctx.tokenizer = &bytes;
  ctx.vocab_size = rs::testing::ByteTokenizer::kVocab;
  fuzz(ctx, 0x5eed0002, 6000, 4.0);
}
}
