// rackserve chat: an interactive terminal conversation at batch size 1, through the same Engine
// the server uses, streaming text as it is generated.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/commands.h"
#include "common/error.h"
#include "engine/engine.h"
#include "model/default_model.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace rs::cli {

namespace {

constexpr const char* kChatHelp =
    "Interactive chat at batch size 1 (answers stream as they are generated).\n"
    "Type a message and press Enter to send it. A line ending in a backslash (\\) continues the\n"
    "message on the next line. Commands: /reset forgets the conversation, /exit (or Ctrl-D) quits,\n"
    "Ctrl-C stops the answer being generated (at the prompt it quits). After each answer: time to\n"
    "first token and tokens/s (on stderr; the answers alone go to stdout).\n"
    "Without --model, chats with the embedded default model (random weights: gibberish by design).\n";

struct ChatArgs {
  std::string model, load_format = "auto", device = "auto", system;
  int max_tokens = 512, threads = 0, max_model_len = 4096;
  float temperature = 0.7f, top_p = 1.0f;
  int top_k = 0;
  int64_t seed = -1;
};

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

struct ChatModel {
  ModelSpec spec;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string description;
};

ChatModel load(const ChatArgs& a) {
  ChatModel m;
  if (a.load_format != "auto" && a.load_format != "safetensors" && a.load_format != "dummy")
    throw Error("--load-format must be auto, safetensors or dummy (got '" + a.load_format + "')");
  if (a.model.empty()) {
    if (a.load_format == "safetensors")
      throw Error("--load-format safetensors needs --model DIR (the embedded default has dummy weights only)");
    DefaultModel d = load_default_model();
    m.spec = std::move(d.spec);
    m.weights = std::move(d.weights);
    m.tokenizer = std::move(d.tokenizer);
    m.description = d.description;
    return m;
  }
  m.spec = load_model_spec(a.model);
  if (!Tokenizer::dir_has_tokenizer(a.model))
    throw Error(a.model + ": no tokenizer.json / tokenizer_config.json; chat needs the model's tokenizer");
  m.tokenizer = Tokenizer::from_dir(a.model);
  if (!m.tokenizer->has_chat_template())
    throw Error(a.model + "/tokenizer_config.json: no chat_template; chat needs one");
  const bool dummy = a.load_format == "dummy";
  // Dummy weights are created with the backend (on a GPU: in device memory only).
  if (!dummy) m.weights = Weights::load(a.model, m.spec);
  m.description = a.model + (dummy ? " with RANDOM (dummy) weights" : "");
  return m;
}

// Reads one message: lines ending in a backslash continue it. nullopt at end of input.
std::optional<std::string> read_message(bool interactive) {
  std::string msg, line;
  bool first = true;
  for (;;) {
    if (interactive) {
      std::fputs(first ? ">>> " : "... ", stderr);
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) {
      if (first) return std::nullopt;
      return msg;  // input ended inside a continued message: send what we have
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    first = false;
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      msg += line + "\n";
      continue;
    }
    msg += line;
    return msg;
  }
}

struct Turn {
  std::string text;
  int tokens = 0;
  double ttft = 0, decode_seconds = 0;
  FinishReason finish = FinishReason::None;
  std::string error;
};

Turn generate(Engine& engine, GenerationRequest req) {
  using clock = std::chrono::steady_clock;
  Turn t;
  const auto start = clock::now();
  auto first = start;
  auto last = start;
  // Ctrl-C stops this answer only; at the prompt it keeps its default meaning (quit).
  g_interrupted = 0;
  std::signal(SIGINT, on_sigint);
  struct RestoreSigint {
    ~RestoreSigint() { std::signal(SIGINT, SIG_DFL); }
  } restore;
  auto h = engine.submit(std::move(req));
  bool cancelled = false;
  while (!h->done()) {
    if (g_interrupted && !cancelled) {
      h->cancel();
      cancelled = true;
    }
    auto ev = h->next(std::chrono::milliseconds(50));
    if (!ev) continue;
    const auto now = clock::now();
    if (!ev->token_ids.empty()) {
      if (t.tokens == 0) first = now;
      last = now;
      t.tokens += static_cast<int>(ev->token_ids.size());
    }
    if (!ev->text.empty()) {
      std::fwrite(ev->text.data(), 1, ev->text.size(), stdout);
      std::fflush(stdout);
      t.text += ev->text;
    }
    if (ev->finish != FinishReason::None) {
      t.finish = ev->finish;
      t.error = ev->error;
    }
  }
  t.ttft = std::chrono::duration<double>(first - start).count();
  t.decode_seconds = std::chrono::duration<double>(last - first).count();
  return t;
}

void print_stats(const Turn& t) {
  // Decode rate over the tokens after the first: the first one's wait is the TTFT.
  char rate[32] = "n/a";
  if (t.tokens >= 2 && t.decode_seconds > 0) std::snprintf(rate, sizeof rate, "%.1f", (t.tokens - 1) / t.decode_seconds);
  std::fprintf(stderr, "[time to first token %.3f s, %s tokens/s, %d tokens, finish: %s]\n", t.ttft, rate,
               t.tokens, finish_reason_name(t.finish));
  if (t.finish == FinishReason::Error) std::fprintf(stderr, "error: %s\n", t.error.c_str());
}

int run_chat(const ChatArgs& a) {
  if (a.max_tokens < 1) throw Error("--max-tokens must be at least 1 (got " + std::to_string(a.max_tokens) + ")");
  if (a.max_model_len < 2) throw Error("--max-model-len must be at least 2 (got " + std::to_string(a.max_model_len) + ")");
  ChatModel m = load(a);
  BackendOptions bo;
  bo.device = a.device;
  bo.threads = a.threads;
  auto backend = m.weights ? make_backend(m.spec, *m.weights, bo) : make_dummy_backend(m.spec, 0, bo, m.weights);
  EngineConfig cfg;
  cfg.max_num_seqs = 1;
  cfg.max_model_len = std::min(a.max_model_len, m.spec.max_position_embeddings);
  // Exactly one conversation's worth of KV: batch size 1 needs no more.
  cfg.num_kv_blocks = (cfg.max_model_len + cfg.block_size - 1) / cfg.block_size;
  const int can = backend->max_kv_blocks(cfg.block_size, 0);
  if (can < cfg.num_kv_blocks)
    throw Error("the KV cache for --max-model-len " + std::to_string(cfg.max_model_len) + " needs " +
                std::to_string(cfg.num_kv_blocks) + " blocks; this backend has room for " + std::to_string(can));
  auto engine = Engine::create(std::move(backend), m.tokenizer.get(), cfg);

  const bool interactive = isatty(STDIN_FILENO);
  std::fprintf(stderr, "rackserve chat: %s\n", m.description.c_str());
  if (interactive) std::fprintf(stderr, "/reset forgets the conversation, /exit quits; end a line with \\ to continue it.\n");
  nlohmann::json messages = nlohmann::json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  const nlohmann::json initial = messages;
  while (auto msg = read_message(interactive)) {
    const std::string& text = *msg;
    if (text == "/exit" || text == "/quit") break;
    if (text == "/reset") {
      messages = initial;
      std::fprintf(stderr, "(conversation reset)\n");
      continue;
    }
    if (text.empty()) continue;
    if (!text.empty() && text[0] == '/' && text.find('\n') == std::string::npos && text.find(' ') == std::string::npos) {
      std::fprintf(stderr, "unknown command %s (commands: /reset, /exit)\n", text.c_str());
      continue;
    }
    nlohmann::json attempt = messages;
    attempt.push_back({{"role", "user"}, {"content", text}});
    std::vector<int32_t> ids;
    try {
      // The template writes the BOS token itself: encode without adding special tokens again.
      ids = m.tokenizer->encode(m.tokenizer->apply_chat_template(attempt, /*add_generation_prompt=*/true), false);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      continue;
    }
    const int room = engine->max_model_len() - static_cast<int>(ids.size());
    if (room < 1) {
      std::fprintf(stderr, "error: the conversation is %zu tokens, the context holds %d; use /reset\n", ids.size(),
                   engine->max_model_len());
      continue;
    }
    GenerationRequest req;
    req.prompt = std::move(ids);
    req.max_tokens = std::min(a.max_tokens, room);
    req.sampling.temperature = a.temperature;
    req.sampling.top_p = a.top_p;
    req.sampling.top_k = a.top_k;
    req.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed)
                                    : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    Turn t;
    try {
      t = generate(*engine, std::move(req));
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      continue;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    print_stats(t);
    if (t.finish == FinishReason::Error) continue;
    messages = std::move(attempt);
    messages.push_back({{"role", "assistant"}, {"content", t.text}});
  }
  engine->shutdown(std::chrono::milliseconds(0));
  return 0;
}

}  // namespace

void add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "Interactive terminal chat (batch size 1, streaming)");
  cmd->footer(kChatHelp);
  cmd->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer); default: the embedded tiny model");
  cmd->add_option("--load-format", a->load_format, "auto | safetensors | dummy (random weights of the model's shapes)");
  cmd->add_option("--device", a->device, "auto | cpu | cuda");
  cmd->add_option("--threads", a->threads, "CPU backend threads (0: all cores)");
  cmd->add_option("--max-tokens", a->max_tokens, "Most tokens per answer")->capture_default_str();
  cmd->add_option("--max-model-len", a->max_model_len, "Context length for the whole conversation")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling threshold")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for sampling (default: a fresh one per answer)");
  cmd->add_option("--system", a->system, "System message that starts the conversation");
  cmd->callback([a] {
    int rc = run_chat(*a);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace rs::cli
