#include "backend/cuda/op_profiler.h"

#include <algorithm>
#include <cstdio>

namespace rs::cuda {

OpProfiler::~OpProfiler() {
  print();
  for (auto& p : pending_) {
    cudaEventDestroy(p.a);
    cudaEventDestroy(p.b);
  }
  for (auto e : free_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e;
  cudaEventCreate(&e);
  return e;
}

void OpProfiler::begin(const char* name, cudaStream_t s) {
  Pending p{name, take(), take()};
  cudaEventRecord(p.a, s);
  pending_.push_back(p);
}

void OpProfiler::end(cudaStream_t s) { cudaEventRecord(pending_.back().b, s); }

void OpProfiler::collect() {
  if (pending_.empty()) return;
  for (auto& p : pending_) {
    float ms = 0;
    cudaEventElapsedTime(&ms, p.a, p.b);
    Total& t = totals_[p.name];
    t.ms += ms;
    ++t.count;
    free_.push_back(p.a);
    free_.push_back(p.b);
  }
  pending_.clear();
  ++steps_;
}

void OpProfiler::print() const {
  if (totals_.empty()) return;
  std::vector<std::pair<std::string, Total>> v(totals_.begin(), totals_.end());
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (auto& [n, t] : v) all += t.ms;
  std::fprintf(stderr, "op profile over %d steps (eager, per step):\n  %-22s %10s %8s %10s %6s\n", steps_, "op",
               "ms/step", "calls", "us/call", "%");
  for (auto& [n, t] : v)
    std::fprintf(stderr, "  %-22s %10.3f %8.1f %10.1f %6.1f\n", n.c_str(), t.ms / std::max(1, steps_),
                 double(t.count) / std::max(1, steps_), 1000.0 * t.ms / std::max<long>(1, t.count), 100.0 * t.ms / all);
}

}  // namespace rs::cuda
