#pragma once
#include "kernels/common/reduce.cuh"
#include "kernels/ops/lm_head_params.h"

namespace rs::cuda {

constexpr int kLmHeadWarps = 8;
constexpr int kLmHeadTokens = 8;        // tokens per pass over a weight row (register accumulators)
constexpr int kLmHeadTokensPerBlock = 32;  // token chunk of one block: many tokens spread over grid.y

// One vocab row per warp; each lane takes 8 contiguous elements per 256-wide step.
__device__ __forceinline__ void lm_head_row(const LmHeadParams& p, int v, int n_begin, int n_end) {
  const int lane = threadIdx.x & 31;
  const __nv_bfloat16* wr = p.w + static_cast<int64_t>(v) * p.hidden;
  for (int n0 = n_begin; n0 < n_end; n0 += kLmHeadTokens) {
    const int nt = min(kLmHeadTokens, n_end - n0);
    float acc[kLmHeadTokens] = {};
    for (int k = lane * 8; k < p.hidden; k += 256) {
      float wf[8];
      bf16x8_to_float(*reinterpret_cast<const uint4*>(wr + k), wf);
#pragma unroll
      for (int t = 0; t < kLmHeadTokens; ++t) {
        if (t < nt) {
          float xf[8];
          const int64_t row = p.rows ? p.rows[n0 + t] : n0 + t;
          bf16x8_to_float(*reinterpret_cast<const uint4*>(p.x + row * p.hidden + k), xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[t] += wf[j] * xf[j];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kLmHeadTokens; ++t) {
      const float s = warp_sum(acc[t]);
      if (lane == 0 && t < nt) p.logits[static_cast<int64_t>(n0 + t) * p.vocab + v] = s;
    }
  }
}

}  // namespace rs::cuda
