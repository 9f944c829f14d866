#pragma once
// Glue around the cuBLASLt routed-expert path (src/backend/cuda/linear.cpp): cuBLASLt cannot
// gather token rows or apply SwiGLU, so these two element-wise ops sit between its GEMMs.
//   gather:  xs[q] = x[pair_token[q]] for the pairs laid out in expert order by expert_group_op,
//            so each expert's tokens are one contiguous row block for its GEMM;
//   swiglu:  in place over a [gate | up] row block of width 2 * inter: gate[t, i] becomes
//            silu(gate[t, i]) * up[t, i]. Each element reads and writes only its own column of
//            its own row, so no thread reads what another writes; the down GEMM then reads the
//            gate half with a row stride of 2 * inter, and no separate h buffer is needed.
// Numerics match swiglu_op: fp32 silu, bf16 rounding of h (as the HF model in bf16).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/ops/swiglu.cuh"

namespace rs::kern {

// One block per pair row; 16-byte copies (hidden % 8 == 0 is checked on the host).
__device__ __forceinline__ void expert_gather_rows_op(const __nv_bfloat16* x, const int* pair_token, int hidden,
                                                      __nv_bfloat16* xs) {
  const int q = blockIdx.x;
  const int t = pair_token[q];
  const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(t) * hidden);
  uint4* dst = reinterpret_cast<uint4*>(xs + static_cast<int64_t>(q) * hidden);
  for (int c = threadIdx.x; c < hidden / 8; c += blockDim.x) dst[c] = src[c];
}

__device__ __forceinline__ void swiglu_inplace_op(__nv_bfloat16* gu, int rows, int inter) {
  const int64_t n = static_cast<int64_t>(rows) * inter;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / inter, c = i % inter;
    __nv_bfloat16* g = gu + t * 2 * inter + c;
    const float u = __bfloat162float(g[inter]);
    *g = __float2bfloat16_rn(silu_f32(__bfloat162float(*g)) * u);
  }
}

}  // namespace rs::kern
