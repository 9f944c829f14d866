#pragma once
#include "kernels/common/pdl.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/rope.cuh"

namespace rs::cuda {

constexpr int kAbsorbTokens = 8;  // queries sharing one pass over a head's W_UK columns
constexpr int kAbsorbCols = 64;   // latent columns per block: two per lane
constexpr int kAbsorbWarps = 8;   // the nope rows are split between warps, partial sums reduced in smem
constexpr int kAbsorbThreads = kAbsorbWarps * 32;

// Block (head, 64 latent columns): each warp walks nope/8 rows of W_UK (coalesced 128-byte row
// segments, independent loads in flight) for 8 queries at a time; q_nope sits in smem as fp32.
// Tokens [n_begin, n_end): the grid spreads token chunks over blocks too, so a batch of 64 is 8x
// more blocks rather than 8 serial passes in each.
__device__ __forceinline__ void mla_absorb_q_block(const MlaAbsorbQParams& p, int head, int chunk, int n_begin,
                                                   int n_end) {
  __shared__ float qs[kAbsorbTokens][256];  // nope <= 256
  __shared__ float red[kAbsorbWarps][kAbsorbTokens][kAbsorbCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = chunk * kAbsorbCols + lane * 2;
  const int qdim = p.nope + p.rope, odim = p.kv_lora + p.rope;
  const int rows_per_warp = p.nope / kAbsorbWarps;
  const __nv_bfloat16* w = p.kv_b + static_cast<int64_t>(head) * (p.nope + p.vdim) * p.kv_lora;
  for (int n0 = n_begin; n0 < n_end; n0 += kAbsorbTokens) {
    const int nt = min(kAbsorbTokens, n_end - n0);
    for (int i = threadIdx.x; i < kAbsorbTokens * p.nope; i += blockDim.x) {
      const int t = i / p.nope, d = i % p.nope;
      qs[t][d] = t < nt ? __bfloat162float(p.q[(static_cast<int64_t>(n0 + t) * p.heads + head) * qdim + d]) : 0.f;
    }
    __syncthreads();
    float acc0[kAbsorbTokens] = {}, acc1[kAbsorbTokens] = {};
#pragma unroll 4
    for (int k = 0; k < rows_per_warp; ++k) {
      const int d = warp * rows_per_warp + k;
      const float2 wv = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(w + static_cast<int64_t>(d) * p.kv_lora + c));
#pragma unroll
      for (int t = 0; t < kAbsorbTokens; ++t) {
        acc0[t] += qs[t][d] * wv.x;
        acc1[t] += qs[t][d] * wv.y;
      }
    }
#pragma unroll
    for (int t = 0; t < kAbsorbTokens; ++t) {
      red[warp][t][lane * 2] = acc0[t];
      red[warp][t][lane * 2 + 1] = acc1[t];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * kAbsorbCols; i += blockDim.x) {
      const int t = i / kAbsorbCols, cc = i % kAbsorbCols;
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kAbsorbWarps; ++k) sum += red[k][t][cc];
      p.out[(static_cast<int64_t>(n0 + t) * p.heads + head) * odim + chunk * kAbsorbCols + cc] = __float2bfloat16(sum);
    }
    __syncthreads();
  }
  if (chunk == 0) {  // the rope part passes through (rotated here when positions are given)
    const int half = p.rope / 2;
    for (int i = threadIdx.x; i < (n_end - n_begin) * half; i += blockDim.x) {
      const int t = n_begin + i / half, j = i % half;
      const __nv_bfloat16* src = p.q + (static_cast<int64_t>(t) * p.heads + head) * qdim + p.nope;
      __nv_bfloat16* dst = p.out + (static_cast<int64_t>(t) * p.heads + head) * odim + p.kv_lora;
      if (p.positions) {
        rope_apply_pair(p.rotate, p.positions[t], j, src, dst);
      } else {
        dst[2 * j] = src[2 * j];
        dst[2 * j + 1] = src[2 * j + 1];
      }
    }
  }
}

constexpr int kVUpWarps = 8;  // one W_UV row per warp, held in registers for all tokens

__device__ __forceinline__ void mla_v_up_block(const MlaVUpParams& p, int head, int row_chunk, int n_begin,
                                               int n_end) {
  __shared__ float os[kAbsorbTokens][512];  // kv_lora <= 512
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j = row_chunk * kVUpWarps + warp;
  const int pairs = p.kv_lora / 64;  // bf16x2 loads per lane (<= 8: kv_lora <= 512)
  // Loops over k run to the constant 8 with a guard, so w[] stays in registers (a runtime bound
  // would index it dynamically and put it in local memory).
  float w[16];
  if (j < p.vdim) {
    const __nv_bfloat16* wr = p.kv_b + (static_cast<int64_t>(head) * (p.nope + p.vdim) + p.nope + j) * p.kv_lora;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (k >= pairs) break;
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(wr + k * 64 + lane * 2));
      w[2 * k] = v.x;
      w[2 * k + 1] = v.y;
    }
  }
  // The W_UV row is a weight, constant during the step: it is fetched before waiting for the
  // attention kernels (a no-op unless launched with programmatic stream serialization).
  pdl::wait();
  for (int n0 = n_begin; n0 < n_end; n0 += kAbsorbTokens) {
    const int nt = min(kAbsorbTokens, n_end - n0);
    const int vecs = p.kv_lora / 8;
    for (int i = threadIdx.x; i < nt * vecs; i += blockDim.x) {
      const int t = i / vecs, c = (i - t * vecs) * 8;
      float f[8];
      bf16x8_to_float(*reinterpret_cast<const uint4*>(
                          p.o_latent + (static_cast<int64_t>(n0 + t) * p.heads + head) * p.kv_lora + c), f);
#pragma unroll
      for (int k = 0; k < 8; ++k) os[t][c + k] = f[k];
    }
    __syncthreads();
    if (j < p.vdim) {
      for (int t = 0; t < nt; ++t) {
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (k < pairs) acc += w[2 * k] * os[t][k * 64 + lane * 2] + w[2 * k + 1] * os[t][k * 64 + lane * 2 + 1];
        acc = warp_sum(acc);
        if (lane == 0)
          p.out[(static_cast<int64_t>(n0 + t) * p.heads + head) * p.vdim + j] = __float2bfloat16(acc);
      }
    }
    __syncthreads();
  }
}

}  // namespace rs::cuda
