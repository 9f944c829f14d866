#pragma once
#include "kernels/common/reduce.cuh"
#include "kernels/ops/rmsnorm_params.h"

namespace rs::cuda {

// Statistics in fp32 over the fp32 residual: the residual never passes through bf16, so the
// stream accumulates exactly as the fp32 reference does except for the bf16 sub-layer outputs.
__device__ __forceinline__ void add_rmsnorm_row(const AddRmsNormParams& p, int row) {
  __shared__ float scratch[32];
  float* res = p.residual + static_cast<int64_t>(row) * p.hidden;
  const int64_t off = static_cast<int64_t>(row) * p.hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float v = res[i];
    if (p.delta0) v += __bfloat162float(p.delta0[off + i]);
    if (p.delta1) v += __bfloat162float(p.delta1[off + i]);
    res[i] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / p.hidden + p.eps);
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x)
    p.out[off + i] = __float2bfloat16(res[i] * inv * p.weight[i]);
}

__device__ __forceinline__ void rmsnorm_row(const RmsNormRowsParams& p, int row) {
  __shared__ float scratch[32];
  const __nv_bfloat16* in = p.in + static_cast<int64_t>(row) * p.in_stride;
  __nv_bfloat16* out = p.out + static_cast<int64_t>(row) * p.out_stride;
  float ss = 0.f;
  for (int i = threadIdx.x; i < p.width; i += blockDim.x) {
    float v = __bfloat162float(in[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / p.width + p.eps);
  for (int i = threadIdx.x; i < p.width; i += blockDim.x)
    out[i] = __float2bfloat16(__bfloat162float(in[i]) * inv * p.weight[i]);
}

}  // namespace rs::cuda
