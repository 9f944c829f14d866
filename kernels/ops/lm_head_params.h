#pragma once
// lm_head with fp32 logits. Greedy decisions and logprobs need the logits at fp32 precision:
// rounded to bf16, logits of magnitude ~10 carry steps of 0.06, wider than the argmax margins the
// fixtures guarantee (~0.007), so this GEMV keeps its fp32 accumulators as the output.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

struct LmHeadParams {
  const __nv_bfloat16* x = nullptr;  // final-normed hidden states, [*, hidden]
  const int32_t* rows = nullptr;     // [n] rows of x to score (nullptr: rows 0..n-1)
  const __nv_bfloat16* w = nullptr;  // [vocab, hidden]
  float* logits = nullptr;           // [n, vocab]
  int n = 0, hidden = 0, vocab = 0;
};
// Up to this many rows the logits come from the dense GEMV (weights streamed once, fp32
// outputs); above it a WMMA GEMM (or, for few vocab rows, a warp-per-row kernel).
constexpr int kLmHeadGemvMaxRows = 16;
void launch_lm_head(const LmHeadParams& p, cudaStream_t stream);

}  // namespace rs::cuda
