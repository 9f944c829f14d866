#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/common/dummy_init.h"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/weight_init_params.h"

namespace rs::cuda {

__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<float>(v);
}
__device__ __forceinline__ uint8_t float_to_e4m3(float f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ void dummy_fill_elem(const DummyFillParams& p, int64_t i) {
  const float v = rs::dummy::value(p.seed, p.tensor_id, static_cast<uint64_t>(i), p.init, p.fan_in);
  switch (p.out_type) {
    case ElemType::E4M3: static_cast<uint8_t*>(p.out)[i] = float_to_e4m3(v / p.fp8_scale_inv); break;
    case ElemType::BF16: static_cast<__nv_bfloat16*>(p.out)[i] = __float2bfloat16_rn(v); break;
    case ElemType::F32: {
      float r = v;  // as stored in the checkpoint dtype, then widened
      if (p.ckpt_type == ElemType::BF16) r = __bfloat162float(__float2bfloat16_rn(v));
      else if (p.ckpt_type == ElemType::F16) r = __half2float(__float2half_rn(v));
      static_cast<float*>(p.out)[i] = r;
      break;
    }
    default: break;
  }
}

__device__ __forceinline__ void convert_elem(const ConvertParams& p, int64_t i) {
  float v = 0.f;
  switch (p.in_type) {
    case ElemType::BF16: v = __bfloat162float(static_cast<const __nv_bfloat16*>(p.in)[i]); break;
    case ElemType::F16: v = __half2float(static_cast<const __half*>(p.in)[i]); break;
    case ElemType::F32: v = static_cast<const float*>(p.in)[i]; break;
    case ElemType::E4M3: {
      const int64_t r = i / p.cols, c = i % p.cols;
      const int64_t sc = (p.cols + p.block_cols - 1) / p.block_cols;
      v = e4m3_to_float(static_cast<const uint8_t*>(p.in)[i]) * p.scale_inv[(r / p.block_rows) * sc + c / p.block_cols];
      break;
    }
  }
  if (p.out_type == ElemType::F32) static_cast<float*>(p.out)[i] = v;
  else static_cast<__nv_bfloat16*>(p.out)[i] = __float2bfloat16_rn(v);
}

// One 128x128 block per thread block: amax, then scale and store.
__device__ __forceinline__ void quantize_fp8_block(const QuantizeFp8Params& p, int br, int bc) {
  __shared__ float scratch[32];
  const int64_t r0 = int64_t(br) * 128, c0 = int64_t(bc) * 128;
  const int64_t r1 = min(p.rows, r0 + 128), c1 = min(p.cols, c0 + 128);
  float amax = 0.f;
  for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
    const int64_t r = r0 + i / 128, c = c0 + i % 128;
    if (r < r1 && c < c1) amax = fmaxf(amax, fabsf(__bfloat162float(p.in[r * p.cols + c])));
  }
  amax = fmaxf(block_max(amax, scratch), 1e-12f);
  const float scale = amax / 448.0f;
  for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
    const int64_t r = r0 + i / 128, c = c0 + i % 128;
    if (r < r1 && c < c1) p.out[r * p.cols + c] = float_to_e4m3(__bfloat162float(p.in[r * p.cols + c]) / scale);
  }
  if (threadIdx.x == 0) p.scale_inv[int64_t(br) * ((p.cols + 127) / 128) + bc] = scale;
}

}  // namespace rs::cuda
