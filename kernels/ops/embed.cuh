#pragma once
#include "kernels/common/reduce.cuh"
#include "kernels/ops/embed_params.h"

namespace rs::cuda {

// One row per call; threads of the block stride over the hidden dimension, 8 elements a step.
__device__ __forceinline__ void embed_row(const EmbedParams& p, int row) {
  const int32_t t = p.tokens[row];
  const int64_t tok = t >= 0 ? t : p.chained[-t - 1];
  if (p.resolved && threadIdx.x == 0) p.resolved[row] = static_cast<int32_t>(tok);
  const uint4* src = reinterpret_cast<const uint4*>(p.table + tok * p.hidden);
  float* dst = p.residual + static_cast<int64_t>(row) * p.hidden;
  for (int i = threadIdx.x; i < p.hidden / 8; i += blockDim.x) {
    float f[8];
    bf16x8_to_float(src[i], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[i * 8 + j] = f[j];
  }
}

}  // namespace rs::cuda
