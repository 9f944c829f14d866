#pragma once
// Per-op GPU time of forward steps, for finding where a step goes (RS_CUDA_PROFILE=1: steps run
// eagerly instead of as graphs, each op bracketed by events; the table prints at exit).
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

namespace rs::cuda {

class OpProfiler {
 public:
  ~OpProfiler();
  void begin(const char* name, cudaStream_t s);
  void end(cudaStream_t s);
  void collect();  // after the stream synchronised: fold this step's events into the totals
  void print() const;

 private:
  struct Pending {
    const char* name;
    cudaEvent_t a, b;
  };
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  struct Total {
    double ms = 0;
    long count = 0;
  };
  std::map<std::string, Total> totals_;
  int steps_ = 0;
  cudaEvent_t take();
};

}  // namespace rs::cuda
