// rackserve bench serve: an online serving benchmark against a running OpenAI-compatible server
// (ours or any other), in the manner of `vllm bench serve` with its random dataset: random
// token-id prompts of a set length (optionally behind a shared prefix), Poisson or burst
// arrivals, an optional concurrency cap, streamed responses timed on the client.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "bench/bench_commands.h"
#include "bench/serve_request.h"
#include "common/error.h"

namespace rs::bench {
namespace {

struct ServeBenchArgs {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;  // empty: the server's first model
  std::string api_key;
  int num_prompts = 200;
  int input_len = 1024, output_len = 128, prefix_len = 0;
  double range_ratio = 0;
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;
  int vocab_size = 0;  // 0: from the server's model card
  // Sampling sent with every request (vLLM bench serve's sampling options); greedy by default.
  double temperature = 0, frequency_penalty = 0, presence_penalty = 0, repetition_penalty = 1;
  uint64_t seed = 0;
  std::string json;
};

ServeTarget parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) throw Error("--base-url must start with http:// (got '" + url + "')");
  std::string rest = url.substr(scheme.size());
  if (auto slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  ServeTarget t;
  t.path = "/v1/completions";
  const auto colon = rest.rfind(':');
  t.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      t.port = std::stoi(rest.substr(colon + 1));
    } catch (...) {
      throw Error("--base-url: bad port in '" + url + "'");
    }
  }
  if (t.host.empty() || t.port <= 0 || t.port > 65535) throw Error("--base-url: bad host or port in '" + url + "'");
  return t;
}

// The model card the server lists first (or the named one): name, vocab size, context length.
nlohmann::json fetch_model_card(const ServeTarget& t, const std::string& want) {
  httplib::Client cli(t.host, t.port);
  cli.set_connection_timeout(10, 0);
  httplib::Headers h;
  if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
  auto res = cli.Get("/v1/models", h);
  if (!res) throw Error("GET /v1/models on " + t.host + ":" + std::to_string(t.port) + ": " + httplib::to_string(res.error()));
  if (res->status != 200) throw Error("GET /v1/models: HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200));
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
    throw Error("GET /v1/models: no models listed");
  for (const auto& m : j["data"])
    if (want.empty() || m.value("id", "") == want) return m;
  throw Error("--model '" + want + "' is not served here (GET /v1/models)");
}

struct Summary {
  double mean = 0, median = 0, p99 = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.p99 = v[std::min(v.size() - 1, size_t(std::ceil(0.99 * v.size())) - 1)];
  return s;
}

void run_serve_bench(const ServeBenchArgs& a) {
  if (a.num_prompts < 1) throw Error("--num-prompts must be >= 1");
  if (a.input_len < 1 || a.output_len < 1 || a.prefix_len < 0)
    throw Error("--input-len and --output-len must be >= 1, --prefix-len >= 0");
  if (a.range_ratio < 0 || a.range_ratio >= 1) throw Error("--range-ratio must be in [0, 1)");
  if (!(a.request_rate > 0)) throw Error("--request-rate must be > 0 (inf: all at once)");
  if (a.max_concurrency < 0) throw Error("--max-concurrency must be >= 0 (0: unlimited)");
  ServeTarget target = parse_base_url(a.base_url);
  target.api_key = a.api_key;
  const nlohmann::json card = fetch_model_card(target, a.model);
  const std::string model = card.value("id", "");
  const int vocab = a.vocab_size > 0 ? a.vocab_size : card.value("vocab_size", 0);
  if (vocab < 2) throw Error("the model card has no vocab_size: pass --vocab-size");
  const int max_len = card.value("max_model_len", 0);
  const int longest = a.prefix_len + int(a.input_len * (1 + a.range_ratio)) + int(a.output_len * (1 + a.range_ratio));
  if (max_len > 0 && longest > max_len)
    throw Error("prefix + input + output can reach " + std::to_string(longest) + " tokens, over the model's max_model_len " +
                std::to_string(max_len));

  // Prompts and arrival times are drawn up front from the seed, so runs are repeatable.
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  auto len_between = [&](int n) {
    const int lo = std::max(1, int(n * (1 - a.range_ratio))), hi = std::max(lo, int(n * (1 + a.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<int> prefix(a.prefix_len);
  for (int& t : prefix) t = tok(rng);
  struct Job {
    nlohmann::json body;
    double at = 0;
  };
  std::vector<Job> jobs(a.num_prompts);
  std::exponential_distribution<double> gap(std::isinf(a.request_rate) ? 1.0 : a.request_rate);
  double t = 0;
  for (auto& j : jobs) {
    std::vector<int> ids = prefix;
    const int n = len_between(a.input_len);
    for (int i = 0; i < n; ++i) ids.push_back(tok(rng));
    j.body = {{"model", model}, {"prompt", ids}, {"max_tokens", len_between(a.output_len)},
              {"temperature", a.temperature}, {"ignore_eos", true}};
    if (a.frequency_penalty != 0) j.body["frequency_penalty"] = a.frequency_penalty;
    if (a.presence_penalty != 0) j.body["presence_penalty"] = a.presence_penalty;
    if (a.repetition_penalty != 1) j.body["repetition_penalty"] = a.repetition_penalty;
    j.at = t;
    if (!std::isinf(a.request_rate)) t += gap(rng);
  }

  std::printf("bench serve: %s, model '%s', %d prompts of %d(+/-%.0f%%) tokens%s -> %d output tokens, rate %s/s, "
              "max concurrency %s\n",
              a.base_url.c_str(), model.c_str(), a.num_prompts, a.input_len, 100 * a.range_ratio,
              a.prefix_len ? (" behind a shared " + std::to_string(a.prefix_len) + "-token prefix").c_str() : "",
              a.output_len, std::isinf(a.request_rate) ? "inf" : std::to_string(a.request_rate).c_str(),
              a.max_concurrency ? std::to_string(a.max_concurrency).c_str() : "unlimited");
  // One request first checks the target end to end (like vLLM's test prompt); it is not timed.
  {
    nlohmann::json probe = jobs[0].body;
    probe["max_tokens"] = 2;
    RequestTiming r = send_streamed(target, probe);
    if (!r.ok) throw Error("test request failed: " + r.error);
  }

  // Workers take jobs in arrival order and wait for each job's arrival time, so at most
  // `workers` requests are in flight: the concurrency cap, or every request at once.
  const int workers = a.max_concurrency > 0 ? std::min(a.max_concurrency, a.num_prompts) : std::min(a.num_prompts, 4096);
  std::vector<RequestTiming> results(jobs.size());
  std::atomic<size_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(jobs[i].at));
        results[i] = send_streamed(target, jobs[i].body);
      }
    });
  for (auto& th : pool) th.join();
  const double duration = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int ok = 0;
  long in_tok = 0, out_tok = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::string first_error;
  for (const auto& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    in_tok += r.prompt_tokens;
    out_tok += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) * 1e3 / (r.output_tokens - 1));
    for (double g : r.itl) itl.push_back(g * 1e3);
  }
  const Summary s_ttft = summarize(ttft), s_tpot = summarize(tpot), s_itl = summarize(itl), s_e2e = summarize(e2e);
  std::printf("  successful requests      %d of %d%s%s\n", ok, a.num_prompts, first_error.empty() ? "" : "; first error: ",
              first_error.c_str());
  std::printf("  duration                 %.2f s\n", duration);
  std::printf("  input / output tokens    %ld / %ld\n", in_tok, out_tok);
  std::printf("  request throughput       %.2f req/s\n", ok / duration);
  std::printf("  output token throughput  %.1f tok/s\n", out_tok / duration);
  std::printf("  total token throughput   %.1f tok/s\n", (in_tok + out_tok) / duration);
  std::printf("  %-24s %10s %10s %10s\n", "(ms)", "mean", "median", "p99");
  for (auto [name, s] : {std::pair{"TTFT", s_ttft}, {"TPOT", s_tpot}, {"ITL", s_itl}, {"E2E latency", s_e2e}})
    std::printf("  %-24s %10.2f %10.2f %10.2f\n", name, s.mean, s.median, s.p99);
  if (!a.json.empty()) {
    auto js = [](const Summary& s) { return nlohmann::json{{"mean_ms", s.mean}, {"median_ms", s.median}, {"p99_ms", s.p99}}; };
    nlohmann::json j = {{"base_url", a.base_url}, {"model", model}, {"num_prompts", a.num_prompts},
                        {"input_len", a.input_len}, {"output_len", a.output_len}, {"prefix_len", a.prefix_len},
                        {"range_ratio", a.range_ratio},
                        {"request_rate", std::isinf(a.request_rate) ? nlohmann::json("inf") : nlohmann::json(a.request_rate)},
                        {"max_concurrency", a.max_concurrency}, {"completed", ok}, {"failed", a.num_prompts - ok},
                        {"duration_s", duration}, {"input_tokens", in_tok}, {"output_tokens", out_tok},
                        {"request_throughput", ok / duration}, {"output_throughput", out_tok / duration},
                        {"total_token_throughput", (in_tok + out_tok) / duration}, {"ttft", js(s_ttft)},
                        {"tpot", js(s_tpot)}, {"itl", js(s_itl)}, {"e2e", js(s_e2e)}};
    std::ofstream f(a.json);
    if (!f) throw Error("--json: cannot write '" + a.json + "'");
    f << j.dump(1) << "\n";
  }
  if (ok == 0) throw Error("every request failed; first error: " + first_error);
}

}  // namespace

void add_serve(CLI::App& bench) {
  auto a = std::make_shared<ServeBenchArgs>();
  auto* cmd = bench.add_subcommand("serve", "online serving benchmark against a running OpenAI-compatible server");
  cmd->add_option("--base-url", a->base_url, "server address")->capture_default_str();
  cmd->add_option("--model", a->model, "model name (default: the server's first)");
  cmd->add_option("--api-key", a->api_key, "bearer token")->envname("RACKSERVE_API_KEY");
  cmd->add_option("--num-prompts", a->num_prompts, "requests to send")->capture_default_str();
  cmd->add_option("--input-len", a->input_len, "random prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", a->output_len, "tokens to generate per request (ignore_eos)")->capture_default_str();
  cmd->add_option("--prefix-len", a->prefix_len, "random tokens shared by every prompt, before its own")->capture_default_str();
  cmd->add_option("--range-ratio", a->range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")->capture_default_str();
  cmd->add_option("--request-rate", a->request_rate, "Poisson arrivals per second (inf: all at once)");
  cmd->add_option("--max-concurrency", a->max_concurrency, "requests in flight at most (0: unlimited)")->capture_default_str();
  cmd->add_option("--vocab-size", a->vocab_size, "token ids drawn below this (default: the model card's vocab_size)");
  cmd->add_option("--seed", a->seed, "prompt and arrival seed")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "sampling temperature of every request")->capture_default_str();
  cmd->add_option("--frequency-penalty", a->frequency_penalty, "every request's frequency_penalty")->capture_default_str();
  cmd->add_option("--presence-penalty", a->presence_penalty, "every request's presence_penalty")->capture_default_str();
  cmd->add_option("--repetition-penalty", a->repetition_penalty, "every request's repetition_penalty")->capture_default_str();
  cmd->add_option("--json", a->json, "also write the figures to this file");
  cmd->callback([a] { run_serve_bench(*a); });
}

}  // namespace rs::bench
