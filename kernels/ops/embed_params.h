#pragma once
// Embedding gather: the residual stream (fp32) starts as the token's embedding row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

struct EmbedParams {
  const __nv_bfloat16* table = nullptr;  // [vocab, hidden]
  const int32_t* tokens = nullptr;       // [n], validated against vocab on the host
  // A chained decode step's rows hold -(k + 1): the token the sampler wrote to chained[k] in the
  // step before, read here on the device so that the step could be launched before it was known.
  const int32_t* chained = nullptr;
  // [n] (optional): each row's token as read, chained rows resolved. The sampler reads a chained
  // row's token here for the penalties (it is the sequence's newest output token, and `chained`
  // itself is rewritten by the sampler that reads it).
  int32_t* resolved = nullptr;
  float* residual = nullptr;             // [n, hidden]
  int n = 0, hidden = 0;
};
void launch_embed(const EmbedParams& p, cudaStream_t stream);

}  // namespace rs::cuda
