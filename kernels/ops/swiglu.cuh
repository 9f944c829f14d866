#pragma once
// SwiGLU over a [gate | up] row pair, for the shared experts run as one dense linear() over
// concatenated weights. silu(g) = g * sigmoid(g), computed in fp32.
#include <cuda_bf16.h>

#include <cstdint>

namespace rs::kern {

__device__ __forceinline__ float silu_f32(float g) { return g / (1.f + __expf(-g)); }

// h[t, i] = silu(gu[t, i]) * gu[t, inter + i]
__device__ __forceinline__ void swiglu_op(const __nv_bfloat16* gu, int m, int inter,
                                          __nv_bfloat16* h) {
  const int64_t n = static_cast<int64_t>(m) * inter;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / inter, c = i % inter;
    const float g = __bfloat162float(gu[t * 2 * inter + c]);
    const float u = __bfloat162float(gu[t * 2 * inter + inter + c]);
    h[i] = __float2bfloat16_rn(silu_f32(g) * u);
  }
}

}  // namespace rs::kern
