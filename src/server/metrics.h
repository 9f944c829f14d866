#pragma once
// /metrics: Prometheus text format (0.0.4) with vLLM's metric names under a "rackserve:" prefix
// and a model_name label, so existing vLLM dashboards work after a prefix rename.
// Latency histograms are fed by the engine's Observer (engine thread); gauges and token counters
// are read from Engine::stats() at scrape time; finish reasons are counted by the routes.
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace rs::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends the _bucket (cumulative, with +Inf), _sum and _count lines.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics : public Engine::Observer {
 public:
  explicit Metrics(std::string model_name);

  void on_first_token(double seconds_since_arrival) override;
  void on_token_gap(double seconds) override;
  void on_finished(double e2e_seconds, int prompt_tokens, int completion_tokens) override;

  // Counted by the routes when a request's last choice ends.
  void count_finished(FinishReason reason);
  void count_http_error(int status);

  std::string render(const EngineStats* stats) const;  // stats null: engine not loaded yet

 private:
  std::string labels_;  // model_name="..."
  Histogram ttft_, itl_, e2e_, prompt_len_, gen_len_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  std::map<int, uint64_t> http_errors_;       // by status
};

// Escapes a label value per the exposition format (backslash, quote, newline).
std::string escape_label_value(const std::string& v);

}  // namespace rs::server
