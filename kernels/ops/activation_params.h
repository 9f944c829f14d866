#pragma once
// SwiGLU: out = silu(gate) * up, in fp32 from the bf16 projections.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

struct SiluMulParams {
  const __nv_bfloat16* gate = nullptr;  // [n, inter]
  const __nv_bfloat16* up = nullptr;    // [n, inter]
  __nv_bfloat16* out = nullptr;         // [n, inter]
  int64_t count = 0;                    // n * inter
};
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream);

}  // namespace rs::cuda
