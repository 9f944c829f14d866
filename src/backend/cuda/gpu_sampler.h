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
    // A chained step's forward row (else -1): its input token, which the host has not seen, is the
    // sequence's newest output token; the penalties read it on the device (launch's `resolved`).
    int pending_row = -1;
  };
  explicit GpuSampler(int vocab);
  ~GpuSampler();
  // Two halves, so the parameter upload is not on the step's critical path: prepare() packs the
  // requests and copies them on a side stream (call it once the forward pass is enqueued: the
  // copy then runs beside it); launch() makes `stream` wait for that copy and enqueues the
  // sampling kernels over the pass's logits. The kernels write their results straight into mapped
  // pinned host memory, so no copy follows them either; they are valid once the stream has
  // synchronised.
  //
  // Two steps may be in flight (the backend launches step N + 1 before reading step N), so every
  // per-step buffer comes twice: prepare() returns the slot it filled, launch() and collect()
  // take it. A slot is reused two prepares later, when its step has been collected.
  int prepare(const std::vector<Request>& reqs, cudaStream_t stream);
  // ids (optional): where the kernels also write the chosen ids, in device memory. resolved: the
  // forward pass's input token of each row (needed when a request has a pending_row).
  void launch(int slot, const float* logits, int32_t* ids, const int32_t* resolved, cudaStream_t stream);
  std::vector<SampledToken> collect(int slot) const;
  // Whether prepare() takes n requests without growing: a growth frees both slots' pinned
  // buffers, so the caller reads every step in flight first.
  bool holds(int n) const { return n <= cap_rows_; }

 private:
  struct Slot {
    cudaEvent_t uploaded = nullptr;
    DeviceBuffer rows_d, tokens_d;
    SampleRow* rows_h = nullptr;
    SampleResult* results_h = nullptr;  // mapped: the kernel writes it through results_dev
    SampleResult* results_dev = nullptr;
    int32_t* tokens_h = nullptr;
    size_t tokens_cap = 0;
    std::vector<int> logprobs_wanted;
  };
  void grow_rows(int n, cudaStream_t stream);
  int vocab_;
  cudaStream_t side_ = nullptr;
  int cap_rows_ = 0;
  int next_ = 0;
  DeviceBuffer work_, flags_, counts_, stats_;
  Slot slots_[2];
};

}  // namespace rs::cuda
