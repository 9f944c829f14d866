// `rackserve serve`: the OpenAI-compatible server. Flags follow vLLM's spelling.
#include <CLI/CLI.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "common/error.h"
#include "common/read_file.h"
#include "engine/engine.h"
#include "model/default_model.h"
#include "model/embedded_assets.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace rs::cli {

namespace {

struct ServeOptions {
  std::string model;  // empty: the embedded default
  std::vector<std::string> served_names;
  std::string load_format = "auto";
  std::string device = "auto";
  int threads = 0;
  EngineConfig engine;
  std::string kv_cache_memory;  // bytes, with an optional K/M/G/KiB/MiB/GiB suffix
  double shutdown_timeout_s = 30;
  double sse_keepalive_s = 5;
  server::ServerConfig http;
  int max_logprobs = 20;
  std::string chat_template;  // file path or literal Jinja text (vLLM's --chat-template)
  bool overlap_steps = true;  // --no-overlap-steps: EngineConfig::overlap_steps = 0
};

uint64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    throw Error("--kv-cache-memory: '" + s + "' is not a size (e.g. 2GiB, 512M, 1000000)");
  }
  std::string unit = s.substr(pos);
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB") mult = 1e3;
  else if (unit == "M" || unit == "MB") mult = 1e6;
  else if (unit == "G" || unit == "GB") mult = 1e9;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else throw Error("--kv-cache-memory: unknown unit '" + unit + "' (use B, K, M, G, KiB, MiB or GiB)");
  if (!(v > 0)) throw Error("--kv-cache-memory must be positive (got '" + s + "')");
  return uint64_t(v * mult);
}

// SIGINT/SIGTERM are blocked in every thread and taken synchronously by one watcher thread,
// so no handler runs async-signal-unsafe code and no httplib thread is interrupted.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // inherited by every thread started later
    std::thread([this] { run(); }).detach();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return fired_; });
  }
  bool fired() {
    std::lock_guard<std::mutex> lk(mu_);
    return fired_;
  }

 private:
  void run() {
    int sig = 0;
    while (sigwait(&set_, &sig) != 0) {}
    std::fprintf(stderr, "rackserve: %s: draining (a second signal exits at once)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    {
      std::lock_guard<std::mutex> lk(mu_);
      fired_ = true;
    }
    cv_.notify_all();
    while (sigwait(&set_, &sig) != 0) {}
    std::fprintf(stderr, "rackserve: second signal: exiting without draining\n");
    std::_Exit(1);
  }
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool fired_ = false;
};

struct LoadedModel {
  ModelSpec spec;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string default_name;
  std::string description;
  bool random_weights = false;
};

// --chat-template, like vLLM: a file path when such a file exists, else the template text itself;
// none when the flag is absent.
std::optional<std::string> chat_template_text(const std::string& template_arg) {
  if (template_arg.empty()) return std::nullopt;
  std::ifstream probe(template_arg);
  return probe.good() ? read_text_file(template_arg) : template_arg;
}

// The embedded tokenizer with tokenizer_config's chat_template replaced, so the override goes
// through the tokenizer's own template engine (model directories: Tokenizer::from_dir does it).
std::unique_ptr<Tokenizer> with_chat_template(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json,
                                              const std::string& template_arg) {
  const std::string tmpl = *chat_template_text(template_arg);
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(tokenizer_config_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tokenizer_config.json: ") + e.what());
  }
  cfg["chat_template"] = tmpl;
  return Tokenizer::from_json(tokenizer_json, cfg.dump());
}

LoadedModel load_model(const ServeOptions& o) {
  LoadedModel m;
  if (o.model.empty()) {
    if (o.load_format != "auto" && o.load_format != "dummy")
      throw Error("--load-format " + o.load_format + " needs --model DIR (the embedded default has dummy weights only)");
    DefaultModel d = load_default_model();
    m.spec = std::move(d.spec);
    m.weights = std::move(d.weights);
    m.tokenizer = std::move(d.tokenizer);
    m.default_name = d.name;
    m.description = d.description;
    m.random_weights = true;
    if (!o.chat_template.empty())
      m.tokenizer = with_chat_template(embedded_tokenizer_json(), embedded_tokenizer_config_json(), o.chat_template);
    return m;
  }
  if (o.load_format != "auto" && o.load_format != "safetensors" && o.load_format != "dummy")
    throw Error("--load-format must be auto, safetensors or dummy (got '" + o.load_format + "')");
  m.spec = load_model_spec(o.model);
  if (Tokenizer::dir_has_tokenizer(o.model)) {
    m.tokenizer = Tokenizer::from_dir(o.model, chat_template_text(o.chat_template));
  } else if (o.load_format == "dummy") {
    // A config alone (e.g. ../shared/model-shapes) is enough to benchmark with random weights:
    // the embedded DeepSeek-V3 tokenizer stands in; ids it makes beyond the model's vocabulary
    // are refused per request with a 400.
    std::fprintf(stderr, "rackserve: %s has no tokenizer; using the embedded DeepSeek-V3 tokenizer (dummy weights)\n",
                 o.model.c_str());
    m.tokenizer = o.chat_template.empty()
                      ? Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json())
                      : with_chat_template(embedded_tokenizer_json(), embedded_tokenizer_config_json(), o.chat_template);
  } else {
    throw Error(o.model + ": no tokenizer.json/tokenizer_config.json; the server needs the model's tokenizer");
  }
  m.random_weights = o.load_format == "dummy";
  // Dummy weights are created with the backend (on a GPU: in device memory only).
  if (!m.random_weights) m.weights = Weights::load(o.model, m.spec);
  m.default_name = o.model;  // vLLM serves the --model argument as the name by default
  m.description = o.model + (m.random_weights ? " with RANDOM (dummy) weights" : "");
  return m;
}

int run_serve(ServeOptions o) {
  SignalWatcher signals;
  if (!o.kv_cache_memory.empty()) o.engine.kv_budget_bytes = parse_bytes(o.kv_cache_memory);
  if (!o.overlap_steps) o.engine.overlap_steps = 0;
  o.http.sse_keepalive = std::chrono::milliseconds(int64_t(o.sse_keepalive_s * 1000));
  // Each running or waiting request holds an HTTP worker (its response waits on the engine), so
  // by default the pool covers max_num_seqs + max_queued_requests plus room for quick calls:
  // otherwise excess clients would wait unread in httplib's queue and never see the 429.
  if (o.http.http_threads <= 0)
    o.http.http_threads = int(std::min<int64_t>(2048, int64_t(o.engine.max_num_seqs) + o.engine.max_queued_requests + 64));

  const std::string metrics_name =
      !o.served_names.empty() ? o.served_names[0] : o.model.empty() ? "deepseek-v3-tiny-random" : o.model;
  server::Server srv(o.http, metrics_name);
  const int port = srv.bind();
  srv.start();
  std::fprintf(stderr, "rackserve: listening on http://%s:%d (loading the model; /health is 503 until ready)\n",
               o.http.host.c_str(), port);

  auto t0 = std::chrono::steady_clock::now();
  LoadedModel m;
  std::unique_ptr<Engine> engine;
  try {
    m = load_model(o);
    BackendOptions bo;
    bo.device = o.device;
    bo.threads = o.threads;
    auto backend = m.weights ? make_backend(m.spec, *m.weights, bo) : make_dummy_backend(m.spec, 0, bo, m.weights);
    engine = Engine::create(std::move(backend), m.tokenizer.get(), o.engine);
  } catch (...) {
    srv.begin_shutdown();
    srv.wait();
    throw;
  }
  if (signals.fired()) {  // asked to stop while loading: nothing is running yet
    srv.begin_shutdown();
    srv.wait();
    engine->shutdown(std::chrono::milliseconds(0));
    return 0;
  }
  engine->set_observer(&srv.metrics());

  server::ServedModel served;
  served.engine = engine.get();
  served.ctx.served_names = o.served_names.empty() ? std::vector<std::string>{m.default_name} : o.served_names;
  served.ctx.tokenizer = m.tokenizer.get();
  served.ctx.max_model_len = engine->max_model_len();
  served.ctx.vocab_size = m.spec.vocab_size;
  served.ctx.max_logprobs = o.max_logprobs;
  served.description = m.description;
  served.random_weights = m.random_weights;
  served.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string name = served.ctx.served_names[0];
  const int max_len = served.ctx.max_model_len;
  srv.set_ready(std::move(served));
  const EngineStats st = engine->stats();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "rackserve: model '%s': %s\n", name.c_str(), m.description.c_str());
  if (m.random_weights)
    std::fprintf(stderr, "rackserve: WARNING: random weights: every answer is gibberish by design\n");
  std::fprintf(stderr,
               "rackserve: ready in %.1f s: max_model_len %d, %d KV blocks of %d tokens, prefix caching %s%s\n",
               secs, max_len, st.kv_blocks_total, o.engine.block_size,
               o.engine.enable_prefix_caching ? "on" : "off", o.http.api_key.empty() ? "" : ", API key required");

  signals.wait();
  srv.begin_shutdown();
  engine->shutdown(std::chrono::milliseconds(int64_t(o.shutdown_timeout_s * 1000)));
  srv.wait();
  std::fprintf(stderr, "rackserve: stopped\n");
  return 0;
}

}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  o->http.http_threads = 0;  // auto, from --max-num-seqs
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (embedded random-weight model without --model)");
  cmd->add_option("--model", o->model, "HF model directory (default: the embedded tiny random-weight DeepSeek-V3)");
  cmd->add_option("--host", o->http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->http.port, "port (0: any free port, printed in the banner)")->capture_default_str();
  cmd->add_option("--served-model-name", o->served_names, "name(s) clients use in 'model' (default: --model)");
  cmd->add_option("--api-key", o->http.api_key, "require 'Authorization: Bearer KEY' on /v1, /tokenize, /detokenize")
      ->envname("RACKSERVE_API_KEY");
  cmd->add_option("--max-model-len", o->engine.max_model_len, "context length (0: the model's)")->capture_default_str();
  cmd->add_option("--max-num-seqs", o->engine.max_num_seqs, "sequences per step")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o->engine.max_num_batched_tokens, "tokens per step (chunked prefill budget)")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", o->engine.max_queued_requests, "waiting requests before 429")->capture_default_str();
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o->engine.enable_prefix_caching,
                "reuse KV blocks of shared prompt prefixes (default on)");
  cmd->add_flag("!--no-overlap-steps", o->overlap_steps,
                "read each step's results before launching the next (default on a GPU: the next decode step is "
                "launched first, its tokens taken from the step in flight on the device)");
  cmd->add_option("--block-size", o->engine.block_size, "tokens per KV block")->capture_default_str();
  cmd->add_option("--num-kv-blocks", o->engine.num_kv_blocks, "KV blocks (0: from --kv-cache-memory or the backend)");
  cmd->add_option("--kv-cache-memory", o->kv_cache_memory, "KV cache budget, e.g. 2GiB");
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s, "seconds running requests may finish after SIGTERM")
      ->capture_default_str();
  cmd->add_option("--load-format", o->load_format, "auto | safetensors | dummy")->capture_default_str();
  cmd->add_option("--device", o->device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU backend threads (0: all cores)");
  cmd->add_option("--max-logprobs", o->max_logprobs, "largest logprobs/top_logprobs a request may ask")->capture_default_str();
  cmd->add_option("--max-request-body", o->http.max_body_bytes, "request body limit in bytes (413 above)")->capture_default_str();
  cmd->add_option("--http-threads", o->http.http_threads, "connections served at once (0: max-num-seqs + max-queued-requests + 64, at most 2048)");
  cmd->add_option("--chat-template", o->chat_template, "chat template override: a Jinja file, or the template text");
  cmd->add_option("--sse-keepalive", o->sse_keepalive_s, "seconds between ': keep-alive' comments while a stream waits")
      ->capture_default_str();
  cmd->callback([o] {
    int rc = run_serve(*o);
    std::fflush(stderr);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace rs::cli
