#pragma once
// Host side of the GPU sampler (kernels/ops/sampling.cuh): packs each request's parameters and
// penalty tokens, launches one block per sequence, and reads the results after the step's sync.
#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/sampling.h"
#include "kernels/ops/sampling_params.h"

namespace rs::cuda {

class GpuSampler {
 public:
  struct Request {
    const SamplingState* state;
    int logits_row;
  };
  explicit GpuSampler(int vocab);
  ~GpuSampler();
  // Enqueues sampling of every request on `stream`; results are valid after the stream syncs.
  void enqueue(const float* logits, const std::vector<Request>& reqs, cudaStream_t stream);
  std::vector<SampledToken> collect() const;

 private:
  int vocab_;
  int cap_rows_ = 0;
  DeviceBuffer work_, flags_, counts_, rows_d_, results_d_, tokens_d_, stats_;
  SampleRow* rows_h_ = nullptr;
  SampleResult* results_h_ = nullptr;
  int32_t* tokens_h_ = nullptr;
  size_t tokens_cap_ = 0;
  std::vector<int> logprobs_wanted_;
};

}  // namespace rs::cuda
