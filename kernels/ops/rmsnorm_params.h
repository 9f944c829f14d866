#pragma once
// RMSNorm in two shapes: fused into the residual stream (residual += deltas; out = norm(residual)),
// and over bf16 rows that are not part of the residual (q_a_layernorm).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace rs::cuda {

struct AddRmsNormParams {
  float* residual = nullptr;                 // [n, hidden] fp32, updated in place
  const __nv_bfloat16* delta0 = nullptr;     // [n, hidden] added first (nullable)
  const __nv_bfloat16* delta1 = nullptr;     // [n, hidden] added second (nullable)
  const __nv_bfloat16* delta2 = nullptr;     // [n, hidden] added third (nullable)
  const float* weight = nullptr;             // [hidden]
  __nv_bfloat16* out = nullptr;              // [n, hidden]
  int n = 0, hidden = 0;
  float eps = 1e-6f;
};
void launch_add_rmsnorm(const AddRmsNormParams& p, cudaStream_t stream);

struct RmsNormRowsParams {
  const __nv_bfloat16* in = nullptr;  // row r starts at in + r * in_stride
  __nv_bfloat16* out = nullptr;       // row r starts at out + r * out_stride
  const float* weight = nullptr;      // [width]
  int n = 0, width = 0, in_stride = 0, out_stride = 0;
  float eps = 1e-6f;
};
void launch_rmsnorm_rows(const RmsNormRowsParams& p, cudaStream_t stream);

}  // namespace rs::cuda
