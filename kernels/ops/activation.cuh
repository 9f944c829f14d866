#pragma once
#include "kernels/ops/activation_params.h"

namespace rs::cuda {

__device__ __forceinline__ void silu_mul_elem(const SiluMulParams& p, int64_t i) {
  const float g = __bfloat162float(p.gate[i]), u = __bfloat162float(p.up[i]);
  p.out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
}

}  // namespace rs::cuda
