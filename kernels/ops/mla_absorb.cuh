#pragma once
#include "kernels/common/pdl.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/kv_cache.cuh"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/rope.cuh"

namespace rs::cuda {

constexpr int kAbsorbWarps = 8;   // each warp takes 4 rows of W_UK per round, 32 rows per round a block
constexpr int kAbsorbThreads = kAbsorbWarps * 32;
constexpr int kAbsorbMaxRounds = 8;  // nope <= 256
constexpr int kAbsorbEarlyRounds = 4;
constexpr int kAbsorbPassTokens = 4;  // rounds fetched before the wait (nope <= 128: all of them)

// Block (head, 64 latent columns): lane (row r of its warp's 4, 8-column vector v) holds the
// 16-byte W_UK pieces of its rows in registers (every round when nope <= 128), fetched before
// waiting for the q projection (weights are constant during a step), so the block's weight
// traffic is one batch of independent loads that overlaps the previous kernel. The four row partials of a column meet by
// shuffles, the eight warps' in shared memory. q_nope sits in smem as fp32.
// Tokens [n_begin, n_end): the grid spreads token chunks over blocks too, so a batch of 64 is 8x
// more blocks rather than 8 serial passes in each.
// In two parts, mla_absorb_q_prefetch (before the PDL wait) and mla_absorb_q_compute, so that a
// kernel fusing more stages (a megakernel) can fetch the weights at its start and compute later.
struct AbsorbSmem {
  float (*qs)[256];                              // [kAbsorbTokens][256]: nope <= 256
  float (*red)[kAbsorbPassTokens][kAbsorbCols];  // [kAbsorbWarps][..][..]
};
constexpr size_t kAbsorbSmemBytes = sizeof(float) * (kAbsorbTokens * 256 + kAbsorbWarps * kAbsorbPassTokens * kAbsorbCols);

__device__ __forceinline__ void mla_absorb_q_prefetch(const MlaAbsorbQParams& p, int head, int chunk,
                                                      uint4 (&wv)[kAbsorbEarlyRounds]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vsub = lane & 7, rsub = lane >> 3;
  const int col = chunk * kAbsorbCols + vsub * 8;
  const __nv_bfloat16* w = p.kv_b + static_cast<int64_t>(head) * (p.nope + p.vdim) * p.kv_lora;
#pragma unroll
  for (int r = 0; r < kAbsorbEarlyRounds; ++r) {
    const int d = r * (kAbsorbWarps * 4) + warp * 4 + rsub;
    if (d < p.nope) wv[r] = *reinterpret_cast<const uint4*>(w + static_cast<int64_t>(d) * p.kv_lora + col);
  }
}

// A warp's partial of 8 latent columns (lane group vsub) after each lane summed its rows (rsub):
// the four rsub lanes' sums meet (xor 8, then 16) and lane rsub 0 stores the warp's 8 columns at
// red_warp[8 vsub ..]. Shared by the absorb kernel and the clustered q/kv launch (qkv_absorb.cuh),
// whose absorbed queries must have the same bits.
__device__ __forceinline__ void absorb_warp_columns(float (&acc)[8], float* red_warp, int vsub, int rsub) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 8);
    acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 16);
  }
  if (rsub == 0) {
    *reinterpret_cast<float4*>(red_warp + vsub * 8) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    *reinterpret_cast<float4*>(red_warp + vsub * 8 + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
}

__device__ __forceinline__ void mla_absorb_q_compute(const MlaAbsorbQParams& p, int head, int chunk, int n_begin,
                                                     int n_end, const uint4 (&wv)[kAbsorbEarlyRounds],
                                                     const AbsorbSmem& sm) {
  float (*qs)[256] = sm.qs;
  float (*red)[kAbsorbPassTokens][kAbsorbCols] = sm.red;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vsub = lane & 7, rsub = lane >> 3;
  const int col = chunk * kAbsorbCols + vsub * 8;
  const int qdim = p.nope + p.rope, odim = p.kv_lora + p.rope;
  const __nv_bfloat16* w = p.kv_b + static_cast<int64_t>(head) * (p.nope + p.vdim) * p.kv_lora;
  for (int n0 = n_begin; n0 < n_end; n0 += kAbsorbTokens) {
    const int nt = min(kAbsorbTokens, n_end - n0);
    for (int i = threadIdx.x; i < kAbsorbTokens * p.nope; i += blockDim.x) {
      const int t = i / p.nope, d = i % p.nope;
      qs[t][d] = t < nt ? __bfloat162float(p.q[(static_cast<int64_t>(n0 + t) * p.heads + head) * qdim + d]) : 0.f;
    }
    __syncthreads();
    // Tokens in passes of kAbsorbPassTokens: 32 accumulators a thread, so three blocks fit an SM.
    for (int tb = 0; tb < nt; tb += kAbsorbPassTokens) {
      const int pt = min(kAbsorbPassTokens, nt - tb);
      float acc[kAbsorbPassTokens][8];
#pragma unroll
      for (int t = 0; t < kAbsorbPassTokens; ++t)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[t][j] = 0.f;
#pragma unroll
      for (int r = 0; r < kAbsorbMaxRounds; ++r) {
        const int d = r * (kAbsorbWarps * 4) + warp * 4 + rsub;
        if (d < p.nope) {
          float wf[8];
          bf16x8_to_float(r < kAbsorbEarlyRounds ? wv[r]
                                                 : *reinterpret_cast<const uint4*>(w + static_cast<int64_t>(d) * p.kv_lora + col),
                          wf);
#pragma unroll
          for (int t = 0; t < kAbsorbPassTokens; ++t) {
            if (t < pt) {
              const float qv = qs[tb + t][d];
#pragma unroll
              for (int j = 0; j < 8; ++j) acc[t][j] += qv * wf[j];
            }
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kAbsorbPassTokens; ++t) {
        if (t < pt) absorb_warp_columns(acc[t], red[warp][t], vsub, rsub);  // block-uniform
      }
      __syncthreads();
      for (int i = threadIdx.x; i < pt * kAbsorbCols; i += blockDim.x) {
        const int t = i / kAbsorbCols, cc = i % kAbsorbCols;
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < kAbsorbWarps; ++k) sum += red[k][t][cc];
        p.out[(static_cast<int64_t>(n0 + tb + t) * p.heads + head) * odim + chunk * kAbsorbCols + cc] = __float2bfloat16(sum);
      }
      __syncthreads();
    }
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

__device__ __forceinline__ void mla_absorb_q_block(const MlaAbsorbQParams& p, int head, int chunk, int n_begin,
                                                   int n_end) {
  // Aligned: the compute writes 16-byte vectors into them (a kernel of its own happened to place
  // them aligned; inside the decode megakernel, beside other ops' arrays, they were not).
  __shared__ __align__(16) float qs[kAbsorbTokens][256];
  __shared__ __align__(16) float red[kAbsorbWarps][kAbsorbPassTokens][kAbsorbCols];
  uint4 wv[kAbsorbEarlyRounds];
  mla_absorb_q_prefetch(p, head, chunk, wv);
  pdl::wait();
  pdl::launch_dependents();
  mla_absorb_q_compute(p, head, chunk, n_begin, n_end, wv, AbsorbSmem{qs, red});
}

// W_UV (mla_v_up_block below). With p.part_o set the block first merges the decode attention's KV splits for its tokens
// (the flash-decoding combine): weights 2^(lse_s - max) / sum over the splits, in fp32, straight
// into shared memory, so the merged latent output never goes through bf16 or global memory.
// Empty splits are the trailing ones (lse = -inf, partial never written): only the first
// `active` splits are read. Each merged value is the sum of two halves of the split range added
// in a fixed order, so a token's result does not depend on how many tokens share the block.
struct VUpSmem {
  float (*os)[512];                   // [kAbsorbTokens][512]: kv_lora <= 512
  float (*half1)[512];                // [kAbsorbTokens / 2][512]
  float (*wts)[kMlaDecodeMaxSplits];  // [kAbsorbTokens][..]
  int* active;                        // [kAbsorbTokens]
};
constexpr size_t kVUpSmemBytes = sizeof(float) * (kAbsorbTokens * 512 + kAbsorbTokens / 2 * 512 +
                                                  kAbsorbTokens * kMlaDecodeMaxSplits) + sizeof(int) * kAbsorbTokens;

// The W_UV rows of warp `warp` into registers (fp32); apart from the rest, as for the absorb, so a
// fused kernel can fetch them at its start.
template <int kRows>
__device__ __forceinline__ void mla_v_up_prefetch(const MlaVUpParams& p, int head, int row_chunk, float (&w)[kRows][16]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j0 = (row_chunk * kVUpWarps + warp) * kRows;
  const int pairs = p.kv_lora / 64;  // float2 per lane and row (<= 8: kv_lora <= 512)
  // Loops run to constants with guards, so w[][] stays in registers (a runtime bound would index
  // it dynamically and put it in local memory).
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int j = j0 + r;
    if (j < p.vdim) {
      const __nv_bfloat16* wr = p.kv_b + (static_cast<int64_t>(head) * (p.nope + p.vdim) + p.nope + j) * p.kv_lora;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (k < pairs) {
          const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(wr + k * 64 + lane * 2));
          w[r][2 * k] = v.x;
          w[r][2 * k + 1] = v.y;
        }
      }
    }
  }
}

// The partials (part_o, part_lse) are read through L2 only (__ldcg): the previous kernel just
// wrote them there and each block reads them once.
template <int kRows>
__device__ __forceinline__ void mla_v_up_compute(const MlaVUpParams& p, int head, int row_chunk, int n_begin, int n_end,
                                                 const float (&w)[kRows][16], const VUpSmem& sm) {
  float (*os)[512] = sm.os;
  float (*half1)[512] = sm.half1;
  float (*wts)[kMlaDecodeMaxSplits] = sm.wts;
  int* active = sm.active;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j0 = (row_chunk * kVUpWarps + warp) * kRows;
  const int pairs = p.kv_lora / 64;
  const int c4 = p.kv_lora / 4;
  for (int n0 = n_begin; n0 < n_end; n0 += kAbsorbTokens) {
    const int nt = min(kAbsorbTokens, n_end - n0);
    if (p.part_o) {
      if (warp < nt) {  // split weights of token n0 + warp (splits <= 64: two per lane)
        const float* lse = p.part_lse + (static_cast<int64_t>(n0 + warp) * p.heads + head) * p.splits;
        const float l0 = lane < p.splits ? __ldcg(lse + lane) : -INFINITY;
        const float l1 = lane + 32 < p.splits ? __ldcg(lse + lane + 32) : -INFINITY;
        const float mx = warp_max(fmaxf(l0, l1));
        const float e0 = l0 == -INFINITY ? 0.f : exp2f(l0 - mx), e1 = l1 == -INFINITY ? 0.f : exp2f(l1 - mx);
        const float inv = 1.f / warp_sum(e0 + e1);
        wts[warp][lane] = e0 * inv;
        wts[warp][lane + 32] = e1 * inv;
        const int cnt = __popc(__ballot_sync(0xffffffffu, l0 != -INFINITY)) +
                        __popc(__ballot_sync(0xffffffffu, l1 != -INFINITY));
        if (lane == 0) active[warp] = cnt;
      }
      __syncthreads();
      // Work item (half, token, 4 columns); with few tokens both halves of a column run in
      // parallel on different threads, with many each thread does both, in the same order.
      const bool split_halves = nt <= kAbsorbTokens / 2;
      const int items = nt * c4 * (split_halves ? 2 : 1);
      for (int i = threadIdx.x; i < items; i += blockDim.x) {
        const int hsel = split_halves ? i / (nt * c4) : 0;
        const int rem = i - hsel * nt * c4;
        const int t = rem / c4, c = (rem - t * c4) * 4;
        const int S = active[t], mid = (S + 1) / 2;
        const float* src = p.part_o + (static_cast<int64_t>(n0 + t) * p.heads + head) * p.splits * p.kv_lora + c;
        float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (split_halves && h != hsel) continue;
          const int sb = h == 0 ? 0 : mid, se = h == 0 ? mid : S;
#pragma unroll 8
          for (int s = sb; s < se; ++s) {
            const float ws = wts[t][s];
            const float4 v = __ldcg(reinterpret_cast<const float4*>(src + static_cast<int64_t>(s) * p.kv_lora));
            acc[h].x += ws * v.x;
            acc[h].y += ws * v.y;
            acc[h].z += ws * v.z;
            acc[h].w += ws * v.w;
          }
        }
        if (split_halves && hsel == 1)
          *reinterpret_cast<float4*>(&half1[t][c]) = acc[1];
        else if (split_halves)
          *reinterpret_cast<float4*>(&os[t][c]) = acc[0];
        else
          *reinterpret_cast<float4*>(&os[t][c]) =
              make_float4(acc[0].x + acc[1].x, acc[0].y + acc[1].y, acc[0].z + acc[1].z, acc[0].w + acc[1].w);
      }
      __syncthreads();
      if (split_halves) {
        for (int i = threadIdx.x; i < nt * c4; i += blockDim.x) {
          const int t = i / c4, c = (i - t * c4) * 4;
          float4 a = *reinterpret_cast<const float4*>(&os[t][c]);
          const float4 b = *reinterpret_cast<const float4*>(&half1[t][c]);
          a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
          *reinterpret_cast<float4*>(&os[t][c]) = a;
        }
      }
    } else {
      const int vecs = p.kv_lora / 8;
      for (int i = threadIdx.x; i < nt * vecs; i += blockDim.x) {
        const int t = i / vecs, c = (i - t * vecs) * 8;
        float f[8];
        bf16x8_to_float(*reinterpret_cast<const uint4*>(
                            p.o_latent + (static_cast<int64_t>(n0 + t) * p.heads + head) * p.kv_lora + c), f);
#pragma unroll
        for (int k = 0; k < 8; ++k) os[t][c + k] = f[k];
      }
    }
    __syncthreads();
    for (int t = 0; t < nt; ++t) {
      float acc[kRows] = {};
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (k < pairs) {
          const float2 o = *reinterpret_cast<const float2*>(&os[t][k * 64 + lane * 2]);
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r] += w[r][2 * k] * o.x + w[r][2 * k + 1] * o.y;
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int j = j0 + r;
        if (j < p.vdim) {  // warp-uniform
          const float s = warp_sum(acc[r]);
          if (lane == 0) p.out[(static_cast<int64_t>(n0 + t) * p.heads + head) * p.vdim + j] = __float2bfloat16(s);
        }
      }
    }
    __syncthreads();
  }
}

// Block (head, kVUpWarps * rows_per_warp rows of W_UV, up to 8 tokens). Each warp holds its rows
// in registers, fetched before waiting for the attention kernel (weights are constant during a
// step), and reuses every latent value it reads from shared memory for all of them.
template <int kRows>  // = p.rows_per_warp: one instantiation per value, registers sized to it
__device__ __forceinline__ void mla_v_up_block(const MlaVUpParams& p, int head, int row_chunk, int n_begin,
                                               int n_end) {
  __shared__ __align__(16) float os[kAbsorbTokens][512];
  __shared__ __align__(16) float half1[kAbsorbTokens / 2][512];
  __shared__ float wts[kAbsorbTokens][kMlaDecodeMaxSplits];
  __shared__ int active[kAbsorbTokens];
  float w[kRows][16];
  mla_v_up_prefetch<kRows>(p, head, row_chunk, w);
  pdl::wait();
  mla_v_up_compute<kRows>(p, head, row_chunk, n_begin, n_end, w, VUpSmem{os, half1, wts, active});
}

// Block b of the decode step's fused launch: blocks [0, kw.n) write one token's cache row each
// (first, so they overlap the absorb blocks instead of forming a last wave of their own), the
// rest are the absorb grid (heads x column chunks x token chunks, heads fastest).
// sm: the absorb's shared memory where the caller carves it (the decode megakernel, whose ops share
// one buffer); nullptr: mla_absorb_q_block's own arrays.
__device__ __forceinline__ void mla_absorb_q_kv_write_block(const MlaAbsorbQParams& p, const KvWriteParams& kw, int block,
                                                            const AbsorbSmem* sm = nullptr) {
  const int kv_blocks = kw.n > 0 ? kw.n : 0;
  if (block < kv_blocks) {
    pdl::wait();
    pdl::launch_dependents();
    kv_write_token(kw, block);
    return;
  }
  const int b = block - kv_blocks;
  const int chunks = p.kv_lora / kAbsorbCols;
  const int head = b % p.heads, chunk = (b / p.heads) % chunks, z = b / (p.heads * chunks);
  const int n0 = z * kAbsorbTokens;
  if (!sm) {
    mla_absorb_q_block(p, head, chunk, n0, min(p.n, n0 + kAbsorbTokens));
    return;
  }
  uint4 wv[kAbsorbEarlyRounds];
  mla_absorb_q_prefetch(p, head, chunk, wv);
  pdl::wait();
  mla_absorb_q_compute(p, head, chunk, n0, min(p.n, n0 + kAbsorbTokens), wv, *sm);
}

}  // namespace rs::cuda
