#pragma once
// Host side of the GPU sampler (kernels/ops/sampling.cuh): packs each request's parameters and
// penalty tokens, launches one block per sequence, and reads the results after the step's sync.
#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/sampling.h"
#include "kernels/ops/sampling_params.h"

namespace rs::cuda {

// A request's sampling parameters as the kernel reads them (the caller fills the offsets into
// the token pool: penalties, mask, logit bias).
SampleRow sample_row_of(const SamplingParams& p, uint64_t draw_index, int logits_row);

class GpuSampler {
 public:
  struct Request {
    const SamplingState* state;
    int logits_row;
  };
  explicit GpuSampler(int vocab);
  ~GpuSampler();
  // Two halves, so the parameter upload is not on the step's critical path: prepare() packs the
  // requests and copies them on a side stream (call it once the forward pass is enqueued: the
  // copy then runs beside it); launch() makes `stream` wait for that copy and enqueues the
  // sampling kernels over the pass's logits. The kernels write their results straight into mapped
  // pinned host memory, so no copy follows them either; they are valid once the stream has
  // synchronised.
  void prepare(const std::vector<Request>& reqs, cudaStream_t stream);
  void launch(const float* logits, cudaStream_t stream);
  std::vector<SampledToken> collect() const;

 private:
  int vocab_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t uploaded_ = nullptr;
  int cap_rows_ = 0;
  DeviceBuffer work_, flags_, counts_, rows_d_, tokens_d_, stats_;
  SampleRow* rows_h_ = nullptr;
  SampleResult* results_h_ = nullptr;  // mapped: the kernel writes it through results_dev_
  SampleResult* results_dev_ = nullptr;
  int32_t* tokens_h_ = nullptr;
  size_t tokens_cap_ = 0;
  std::vector<int> logprobs_wanted_;
};

}  // namespace rs::cuda
