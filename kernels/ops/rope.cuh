#pragma once
#include "kernels/ops/rope_params.h"

namespace rs::cuda {

// The angle is formed in fp32 as pos * inv_freq (as HF and the CPU reference do); cos/sin are the
// accurate versions: __cosf loses precision at the large angles of long contexts.
// In two halves, so a kernel can form the angle's cos and sin before its inputs arrive.
__device__ __forceinline__ void rope_cos_sin(const RopeSpec& r, int pos, int i, float* c, float* s) {
  const float angle = static_cast<float>(pos) * r.inv_freq[i];
  sincosf(angle, s, c);
  *c *= r.mscale;
  *s *= r.mscale;
}
__device__ __forceinline__ void rope_rotate(float c, float s, float xa, float xb, float* ya, float* yb) {
  *ya = xa * c - xb * s;
  *yb = xb * c + xa * s;
}
__device__ __forceinline__ void rope_pair(const RopeSpec& r, int pos, int i, float xa, float xb,
                                          float* ya, float* yb) {
  float c, s;
  rope_cos_sin(r, pos, i, &c, &s);
  rope_rotate(c, s, xa, xb, ya, yb);
}

// Element offsets of rotary pair i inside a rope_dim-wide vector.
__device__ __forceinline__ int rope_a(const RopeSpec& r, int i) { return r.interleave ? 2 * i : i; }
__device__ __forceinline__ int rope_b(const RopeSpec& r, int i) {
  return r.interleave ? 2 * i + 1 : i + r.rope_dim / 2;
}

// Rotates pair i of the rope part of x (bf16, in place) for position pos.
__device__ __forceinline__ void rope_apply_pair(const RopeSpec& r, int pos, int i, const __nv_bfloat16* in,
                                                __nv_bfloat16* out) {
  const int a = rope_a(r, i), b = rope_b(r, i);
  float ya, yb;
  rope_pair(r, pos, i, __bfloat162float(in[a]), __bfloat162float(in[b]), &ya, &yb);
  out[a] = __float2bfloat16(ya);
  out[b] = __float2bfloat16(yb);
}

__device__ __forceinline__ void rope_q_pair(const RopeQParams& p, int64_t idx) {
  const int half = p.rope.rope_dim / 2;
  const int i = static_cast<int>(idx % half);
  const int64_t th = idx / half;  // token * heads + head
  const int token = static_cast<int>(th / p.heads);
  __nv_bfloat16* x = p.q + th * p.head_dim + (p.head_dim - p.rope.rope_dim);
  rope_apply_pair(p.rope, p.positions[token], i, x, x);
}

}  // namespace rs::cuda
