#include "server/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace rs::server {

namespace {

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), so dashboards line up.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,
                                         0.3,  0.4,   0.5,  0.75,  1.0,  2.5,  5.0,
                                         7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,
                                         10.0, 15.0, 20.0, 30.0, 40.0, 50.0,  60.0,  120.0,
                                         240.0, 480.0, 960.0, 1920.0, 7680.0};
// Token counts: 1, 2, 5 per decade (vLLM's build_1_2_5_buckets) up to 1M.
std::vector<double> one_two_five(double max) {
  std::vector<double> b;
  for (double m = 1; m <= max; m *= 10)
    for (double f : {1.0, 2.0, 5.0})
      if (m * f <= max) b.push_back(m * f);
  return b;
}

std::string fmt(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // counts: "10", never "1e+01"
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // Shortest text that reads back as the same double: "0.005", not "0.0050000000000000001".
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string r;
  for (char c : v) {
    if (c == '\\') r += "\\\\";
    else if (c == '"') r += "\\\"";
    else if (c == '\n') r += "\\n";
    else r += c;
  }
  return r;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  if (!std::isfinite(v)) return;
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lk(mu_);
  counts_[i]++;
  sum_ += v;
  count_++;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    std::string le = i < bounds_.size() ? fmt(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"," + labels + "} " + std::to_string(cum) + "\n";
  }
  out += name + "_sum{" + labels + "} " + fmt(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::Metrics(std::string model_name)
    : labels_("model_name=\"" + escape_label_value(model_name) + "\""),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kE2eBuckets),
      prompt_len_(one_two_five(1e6)),
      gen_len_(one_two_five(1e6)) {}

void Metrics::on_first_token(double s) { ttft_.observe(s); }
void Metrics::on_token_gap(double s) { itl_.observe(s); }
void Metrics::on_finished(double e2e, int prompt_tokens, int completion_tokens) {
  e2e_.observe(e2e);
  prompt_len_.observe(prompt_tokens);
  gen_len_.observe(completion_tokens);
}

void Metrics::count_finished(FinishReason reason) {
  std::lock_guard<std::mutex> lk(mu_);
  finished_[finish_reason_name(reason)]++;
}

void Metrics::count_http_error(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  http_errors_[status]++;
}

std::string Metrics::render(const EngineStats* st) const {
  std::string out;
  const std::string p = "rackserve:";
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, p + name, "gauge", help);
    out += p + name + "{" + labels_ + "} " + fmt(v) + "\n";
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(out, p + name, "counter", help);
    out += p + name + "{" + labels_ + "} " + fmt(v) + "\n";
  };
  EngineStats s = st ? *st : EngineStats{};
  gauge("num_requests_running", "Number of requests in model execution batches.", s.running);
  gauge("num_requests_waiting", "Number of requests waiting to be processed.", s.waiting);
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  gauge("kv_cache_blocks_total", "KV-cache blocks in the pool.", s.kv_blocks_total);
  gauge("kv_cache_blocks_used", "KV-cache blocks referenced by a live sequence.", s.kv_blocks_used);
  counter("prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.", double(s.prefix_queries_tokens));
  counter("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          double(s.prefix_hits_tokens));
  counter("prompt_tokens_total", "Number of prefill tokens processed.", double(s.prompt_tokens));
  counter("generation_tokens_total", "Number of generation tokens processed.",
          double(s.generation_tokens));
  counter("num_preemptions_total", "Cumulative number of preemptions from the engine.",
          double(s.preemptions));
  counter("overlapped_steps_total", "Steps launched before the step ahead of them was read (decode overlap).",
          double(s.overlapped_steps));
  {
    std::lock_guard<std::mutex> lk(mu_);
    header(out, p + "request_success_total", "counter",
           "Count of finished requests, by finished reason.");
    for (const auto& [reason, n] : finished_)
      out += p + "request_success_total{finished_reason=\"" + escape_label_value(reason) + "\"," +
             labels_ + "} " + std::to_string(n) + "\n";
    header(out, p + "http_request_errors_total", "counter",
           "Requests answered with an error status, by status.");
    for (const auto& [status, n] : http_errors_)
      out += p + "http_request_errors_total{status=\"" + std::to_string(status) + "\"," + labels_ +
             "} " + std::to_string(n) + "\n";
  }
  auto hist = [&](const Histogram& h, const char* name, const char* help) {
    header(out, p + name, "histogram", help);
    h.render(out, p + name, labels_);
  };
  hist(ttft_, "time_to_first_token_seconds", "Histogram of time to first token in seconds.");
  hist(itl_, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.");
  hist(e2e_, "e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.");
  hist(prompt_len_, "request_prompt_tokens", "Number of prefill tokens processed, per request.");
  hist(gen_len_, "request_generation_tokens", "Number of generation tokens processed, per request.");
  return out;
}

}  // namespace rs::server
