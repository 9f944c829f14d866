#pragma once
#include "kernels/common/pdl.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/rmsnorm_params.h"

namespace rs::cuda {

constexpr int kAddRmsNormThreads = 256;
constexpr int kAddRmsNormMaxChunks = 8;  // float4 chunks per thread: hidden <= 8192 on this path

// One float4 chunk of the fp32 residual stream plus one bf16 delta chunk (4 values, 8 bytes).
// Callers add delta0, delta1, delta2 in that order: the reference's order.
__device__ __forceinline__ void add_bf16x4(float4& v, const uint2& d) {
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&d.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&d.y));
  v.x += a.x; v.y += a.y; v.z += b.x; v.w += b.y;
}

// The normed bf16 chunk v * inv * weight, each value rounded once. Every fused prologue that
// must match this kernel bit for bit (the grouped GEMV's) calls these two.
__device__ __forceinline__ uint2 rmsnorm_bf16x4(const float4& v, float inv, const float4& wt) {
  uint2 o;
  *reinterpret_cast<__nv_bfloat162*>(&o.x) = __floats2bfloat162_rn(v.x * inv * wt.x, v.y * inv * wt.y);
  *reinterpret_cast<__nv_bfloat162*>(&o.y) = __floats2bfloat162_rn(v.z * inv * wt.z, v.w * inv * wt.w);
  return o;
}

// Statistics in fp32 over the fp32 residual: the residual never passes through bf16, so the
// stream accumulates exactly as the fp32 reference does except for the bf16 sub-layer outputs.
// The row lives in registers between the two passes (one round of loads, all issued before the
// first use: the residual store cannot alias a later load), and the norm weight, constant during
// a step, is fetched before waiting for the kernel that produced the deltas.
__device__ __forceinline__ void add_rmsnorm_row(const AddRmsNormParams& p, int row) {
  __shared__ float scratch[32];
  const int64_t off = static_cast<int64_t>(row) * p.hidden;
  const int chunks = p.hidden / 4;
  float4 wt[kAddRmsNormMaxChunks];
#pragma unroll
  for (int k = 0; k < kAddRmsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < chunks) wt[k] = reinterpret_cast<const float4*>(p.weight)[c];
  }
  pdl::wait();
  pdl::launch_dependents();
  float4* res = reinterpret_cast<float4*>(p.residual + off);
  float4 v[kAddRmsNormMaxChunks];
  uint2 d0[kAddRmsNormMaxChunks], d1[kAddRmsNormMaxChunks], d2[kAddRmsNormMaxChunks];
#pragma unroll
  for (int k = 0; k < kAddRmsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < chunks) {
      v[k] = res[c];
      if (p.delta0) d0[k] = reinterpret_cast<const uint2*>(p.delta0 + off)[c];
      if (p.delta1) d1[k] = reinterpret_cast<const uint2*>(p.delta1 + off)[c];
      if (p.delta2) d2[k] = reinterpret_cast<const uint2*>(p.delta2 + off)[c];
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kAddRmsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < chunks) {
      if (p.delta0) add_bf16x4(v[k], d0[k]);
      if (p.delta1) add_bf16x4(v[k], d1[k]);
      if (p.delta2) add_bf16x4(v[k], d2[k]);
      res[c] = v[k];
      ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / p.hidden + p.eps);
  uint2* out = reinterpret_cast<uint2*>(p.out + off);
#pragma unroll
  for (int k = 0; k < kAddRmsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < chunks) out[c] = rmsnorm_bf16x4(v[k], inv, wt[k]);
  }
}

// Any width (rows not a multiple of 4 wide or wider than the register path holds).
__device__ __forceinline__ void add_rmsnorm_row_any(const AddRmsNormParams& p, int row) {
  __shared__ float scratch[32];
  pdl::wait();
  pdl::launch_dependents();
  float* res = p.residual + static_cast<int64_t>(row) * p.hidden;
  const int64_t off = static_cast<int64_t>(row) * p.hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float v = res[i];
    if (p.delta0) v += __bfloat162float(p.delta0[off + i]);
    if (p.delta1) v += __bfloat162float(p.delta1[off + i]);
    if (p.delta2) v += __bfloat162float(p.delta2[off + i]);
    res[i] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / p.hidden + p.eps);
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x)
    p.out[off + i] = __float2bfloat16(res[i] * inv * p.weight[i]);
}

__host__ __device__ inline bool add_rmsnorm_vectorized(int hidden) {
  return hidden % 4 == 0 && hidden / 4 <= kAddRmsNormThreads * kAddRmsNormMaxChunks;
}

// One bf16 row normalised by the whole block; `scratch` is block_sum's (32 floats). The same bits
// also into `copy` when given.
__device__ __forceinline__ void rmsnorm_bf16_row(const __nv_bfloat16* in, __nv_bfloat16* out,
                                                 const float* weight, int width, float eps,
                                                 float* scratch, __nv_bfloat16* copy = nullptr) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float v = __bfloat162float(in[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / width + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const __nv_bfloat16 y = __float2bfloat16(__bfloat162float(in[i]) * inv * weight[i]);
    out[i] = y;
    if (copy) copy[i] = y;
  }
}

__device__ __forceinline__ void rmsnorm_row(const RmsNormRowsParams& p, int row) {
  __shared__ float scratch[32];
  rmsnorm_bf16_row(p.in + static_cast<int64_t>(row) * p.in_stride,
                   p.out + static_cast<int64_t>(row) * p.out_stride, p.weight, p.width, p.eps, scratch);
}

}  // namespace rs::cuda
