#pragma once
// fp32 arithmetic on weights as stored (bf16, fp16, fp32, FP8 e4m3 with block scales): each
// weight row is widened to fp32 once and then used for every token of the batch.
#include <cstdint>

#include "backend/cpu/thread_pool.h"
#include "model/tensor.h"

namespace rs::cpu {

// out[0, cols) = row `r` of W in fp32 (FP8: stored value * its block's scale_inv).
void dequant_row(const Tensor& w, int64_t r, float* out);

// Y[t, :] = W . X[t, :] for t < T: X is [T, in] (row stride ldx), Y is [T, out] (stride ldy).
// W is [out, in]. Rows of W are split across the pool.
void linear(ThreadPool& pool, const Tensor& w, const float* x, int64_t ldx, int T, float* y,
            int64_t ldy);
// The same over rows [r0, r1) of W only, in the calling thread.
void linear_rows(const Tensor& w, const float* x, int64_t ldx, int T, float* y, int64_t ldy,
                 int64_t r0, int64_t r1);

float dot(const float* a, const float* b, int64_t n);

}  // namespace rs::cpu
