#pragma once
// Weights on the device: dummy initialisation in place (the formula of kernels/common/dummy_init.h,
// so GPU dummy bytes equal Weights::dummy's), conversion of stored dtypes to the device formats
// (bf16 matrices, fp32 norms/router), FP8 block dequantisation and quantisation.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

enum class ElemType : uint8_t { BF16, F16, F32, E4M3 };

// Dummy values of one tensor written as `out_type` (BF16/F32: the value rounded to the tensor's
// checkpoint dtype `ckpt_type` first, as the host stores it; E4M3: value / scale_inv).
struct DummyFillParams {
  void* out = nullptr;
  ElemType out_type = ElemType::BF16;
  ElemType ckpt_type = ElemType::BF16;
  int64_t count = 0;
  uint64_t seed = 0, tensor_id = 0;
  uint8_t init = 0;
  int64_t fan_in = 1;
  float fp8_scale_inv = 1.0f;      // E4M3 only
};
void launch_dummy_fill(const DummyFillParams& p, cudaStream_t stream);

// Element-wise conversion to bf16 or fp32; E4M3 sources are dequantised with their block scales.
struct ConvertParams {
  const void* in = nullptr;
  ElemType in_type = ElemType::BF16;
  const float* scale_inv = nullptr;  // E4M3: [ceil(rows/br), ceil(cols/bc)]
  int block_rows = 128, block_cols = 128;
  int64_t rows = 1, cols = 1;
  void* out = nullptr;
  ElemType out_type = ElemType::BF16;  // BF16 or F32
};
void launch_convert(const ConvertParams& p, cudaStream_t stream);

// bf16 [rows, cols] -> e4m3 + fp32 scale_inv per 128x128 block (amax / 448), DeepSeek's recipe.
struct QuantizeFp8Params {
  const __nv_bfloat16* in = nullptr;
  int64_t rows = 0, cols = 0;
  uint8_t* out = nullptr;
  float* scale_inv = nullptr;
};
void launch_quantize_fp8(const QuantizeFp8Params& p, cudaStream_t stream);

void launch_fill_f32(float* out, int64_t count, float value, cudaStream_t stream);

}  // namespace rs::cuda
