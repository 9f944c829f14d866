#pragma once
#include "kernels/common/fixed_point.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/reduce.cuh"
#include "kernels/ops/lm_head_params.h"
#include "kernels/ops/moe_router_params.h"

namespace rs::cuda {

constexpr int kRouterMaxExperts = 512;
constexpr int kRouterMaxGroups = 64;
constexpr int kRouterWarps = 8;  // tokens selected in parallel by one block (a warp each)
constexpr int kRouterThreads = kRouterWarps * 32;

// Per-warp shared scratch of the selection, in floats: score and choice over the experts, group
// scores, kept-group flags and the selected ids (top_k <= kRouterMaxGroups, checked on the host).
__host__ __device__ inline int router_warp_scratch_floats(int experts) { return 2 * experts + 3 * kRouterMaxGroups; }

// Warp-wide argmax over v[0, n) with lowest index on ties (a stable, documented tie rule).
__device__ __forceinline__ int warp_argmax(const float* v, int n) {
  const int lane = threadIdx.x & 31;
  float best = -INFINITY;
  // 0, not past the end: a row of NaN or -inf (a broken checkpoint) still selects an index inside
  // the row, which the callers use to address shared memory.
  int idx = 0;
  for (int i = lane; i < n; i += 32)
    if (v[i] > best) { best = v[i]; idx = i; }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ob > best || (ob == best && oi < idx)) { best = ob; idx = oi; }
  }
  return idx;
}

// One pick of the selection: its id and weight at index i of topk_ids / topk_weights, and of the
// copies on each L2 side where they are set.
__device__ __forceinline__ void router_store_pick(const MoeRouterParams& p, int64_t i, int32_t id, float w) {
  p.topk_ids[i] = id;
  p.topk_weights[i] = w;
  if (p.topk_ids_side[0])
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      p.topk_ids_side[side][i] = id;
      p.topk_weights_side[side][i] = w;
    }
}

// Compact selection: softmax scoring without groups or bias, at most 64 experts (V2-Lite and the
// V2-style routers). A lane holds experts lane and lane + 32 in registers; each of the top_k
// rounds (+ 1 for the margin, where margins are recorded) is two redux.sync (the largest score as
// an order-preserving integer, then the lowest expert index holding it), with no shared memory
// and no __syncwarp. Why: the general path below cost the batch-1 step ~4.5 us a layer on the
// H200 (V2-Lite, docs/perf/cuda.md, fourteenth session) for a few hundred instructions; this path
// took 3.7-4.0% off the bf16 and FP8 steps. Leaving the margin's round out (margins are a
// diagnostic) took 0.15% off bf16 and 0.2% off FP8 (thirty-first session).
// Replacing only the general path's argmax rounds by redux rounds was level, so what it saves is
// the general path's size and its shared-memory round trips, not the rounds' shuffles.
// Bits: the general path's expf, sums in its order, experts in its order (ties to the lower
// index), weights and margins, for every row without NaN (tested: tests/gpu/cuda_kernels_test.cpp).
__device__ __forceinline__ bool router_compact_ok(const MoeRouterParams& p) {
  return p.compact_select && p.scoring == RouterScoring::Softmax && p.method != RouterTopk::NoauxTc &&
         (p.method == RouterTopk::Greedy || p.n_group <= 1) && p.experts >= 1 && p.experts <= 64 && p.top_k >= 1 &&
         p.top_k <= 31 && p.top_k <= p.experts;
}
// Order-preserving integer of a float (NaN lowest, -0 as +0), and back.
__device__ __forceinline__ unsigned router_order_key(float c) {
  if (c != c) return 0u;
  const unsigned u = __float_as_uint(c + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float router_order_value(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
template <bool kSharedLogits>
__device__ __forceinline__ void router_select_compact(const MoeRouterParams& p, int t, const float* logits_row) {
  const int lane = threadIdx.x & 31;
  bool live0 = lane < p.experts, live1 = lane + 32 < p.experts;
  const float l0 = live0 ? (kSharedLogits ? logits_row[lane] : __ldcg(logits_row + lane)) : 0.f;
  const float l1 = live1 ? (kSharedLogits ? logits_row[lane + 32] : __ldcg(logits_row + lane + 32)) : 0.f;
  float mx = -INFINITY;
  if (live0) mx = fmaxf(mx, l0);
  if (live1) mx = fmaxf(mx, l1);
  mx = warp_max(mx);
  const float x0 = live0 ? expf(l0 - mx) : 0.f, x1 = live1 ? expf(l1 - mx) : 0.f;
  const float sum = warp_sum(x0 + x1);  // + 0.f for a dead slot: the same bits as skipping it
  unsigned k0 = live0 ? router_order_key(x0 / sum) : 0u;
  unsigned k1 = live1 ? router_order_key(x1 / sum) : 0u;
  // + 1: the margin's next expert, where margins are recorded.
  const int rounds = p.margins && p.top_k < p.experts ? p.top_k + 1 : p.top_k;
  float wsum = 0.f, last = 0.f, next = 0.f, mine = 0.f;
  int my_e = 0;
  for (int k = 0; k < rounds; ++k) {
    unsigned best = 0u;
    if (live0) best = k0;
    if (live1 && k1 > best) best = k1;
    const unsigned m = __reduce_max_sync(0xffffffffu, best);
    unsigned cand = 0xffffffffu;
    if (live1 && k1 == m) cand = lane + 32;
    if (live0 && k0 == m) cand = lane;
    const unsigned e = __reduce_min_sync(0xffffffffu, cand);
    if (e == static_cast<unsigned>(lane)) live0 = false;
    if (e == static_cast<unsigned>(lane + 32)) live1 = false;
    const float v = router_order_value(m);
    if (k < p.top_k) {
      wsum += v;
      last = v;
      if (lane == k) {
        my_e = static_cast<int>(e);
        mine = v;
      }
    } else {
      next = v;
    }
  }
  if (lane < p.top_k) {
    float w = mine;
    if (p.normalize) w /= wsum + 1e-20f;
    if (!p.normalize || p.scale_after_normalize) w *= p.routed_scaling;
    router_store_pick(p, static_cast<int64_t>(t) * p.top_k + lane, my_e, w);
  }
  if (lane == 0 && p.margins) p.margins[t] = p.top_k < p.experts ? last - next : INFINITY;
  __syncwarp();
}

// Selection of token t by one warp, from its fp32 logits row. The logits are read with __ldcg
// (L2, never a stale L1 line): in the fused kernel other blocks wrote them during this launch.
// kSharedLogits: the row is in shared memory (the cluster router's block 0).
template <bool kSharedLogits = false>
__device__ __forceinline__ void moe_router_select_warp(const MoeRouterParams& p, int t, const float* logits_row,
                                                       float* wscratch) {
  if (router_compact_ok(p)) {
    router_select_compact<kSharedLogits>(p, t, logits_row);
    return;
  }
  float* score = wscratch;                      // after softmax/sigmoid
  float* choice = score + p.experts;            // what selection ranks (score + bias, masked)
  float* gscore = choice + p.experts;           // [kRouterMaxGroups]
  int* gkeep = reinterpret_cast<int*>(gscore + kRouterMaxGroups);
  int* sel = gkeep + kRouterMaxGroups;
  const int lane = threadIdx.x & 31;
  float mx = -INFINITY;
  for (int e = lane; e < p.experts; e += 32) {
    const float v = kSharedLogits ? logits_row[e] : __ldcg(logits_row + e);
    score[e] = v;
    mx = fmaxf(mx, v);
  }
  if (p.scoring == RouterScoring::Softmax) {
    mx = warp_max(mx);
    float sum = 0.f;
    for (int e = lane; e < p.experts; e += 32) sum += expf(score[e] - mx);
    sum = warp_sum(sum);
    for (int e = lane; e < p.experts; e += 32) score[e] = expf(score[e] - mx) / sum;
  } else {
    for (int e = lane; e < p.experts; e += 32) score[e] = 1.f / (1.f + expf(-score[e]));
  }
  for (int e = lane; e < p.experts; e += 32)
    choice[e] = score[e] + (p.bias && p.method == RouterTopk::NoauxTc ? p.bias[e] : 0.f);
  __syncwarp();
  float group_margin = INFINITY;
  if (p.method != RouterTopk::Greedy && p.n_group > 1) {
    // Rank groups (V2: best score in the group; V3: sum of its two best biased scores), keep
    // topk_group of them, and mask the experts of the others out of the selection.
    const int per = p.experts / p.n_group;
    for (int g = lane; g < p.n_group; g += 32) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < per; ++i) {
        const float v = choice[g * per + i];
        if (v > b1) { b2 = b1; b1 = v; } else if (v > b2) { b2 = v; }
      }
      gscore[g] = p.method == RouterTopk::NoauxTc ? b1 + b2 : b1;
      gkeep[g] = 0;
    }
    __syncwarp();
    float last_kept = 0.f;
    for (int k = 0; k < p.topk_group; ++k) {
      const int g = warp_argmax(gscore, p.n_group);
      last_kept = gscore[g];
      __syncwarp();
      if (lane == 0) { gkeep[g] = 1; gscore[g] = -INFINITY; }
      __syncwarp();
    }
    if (p.margins && p.topk_group < p.n_group) group_margin = last_kept - gscore[warp_argmax(gscore, p.n_group)];
    __syncwarp();
    // HF masks the other groups with 0.0, not -inf (the CPU reference does the same).
    for (int e = lane; e < p.experts; e += 32)
      if (!gkeep[e / per]) choice[e] = 0.0f;
    __syncwarp();
  }
  float wsum = 0.f;
  float last_choice = 0.f;
  for (int k = 0; k < p.top_k; ++k) {
    const int e = warp_argmax(choice, p.experts);
    last_choice = choice[e];
    __syncwarp();
    if (lane == 0) { sel[k] = e; choice[e] = -INFINITY; }
    wsum += score[e];
    __syncwarp();
  }
  // The margins' extra argmax rounds only where margins are recorded (as in the compact path).
  const float expert_margin =
      p.margins && p.top_k < p.experts ? last_choice - choice[warp_argmax(choice, p.experts)] : INFINITY;
  for (int k = lane; k < p.top_k; k += 32) {
    float w = score[sel[k]];
    if (p.normalize) w /= wsum + 1e-20f;
    if (!p.normalize || p.scale_after_normalize) w *= p.routed_scaling;
    router_store_pick(p, static_cast<int64_t>(t) * p.top_k + k, sel[k], w);
  }
  if (lane == 0 && p.margins) p.margins[t] = fminf(group_margin, expert_margin);
  __syncwarp();
}

// The delta of 16-byte vector v as bf16: `delta`'s, or the fixed-point sums of delta_fixed
// (the cluster router only) each rounded to bf16, which is the value `delta` would hold; that
// vector also into delta_out when given.
__device__ __forceinline__ uint4 router_delta_bf16(const RouterNormIn& norm, int64_t row, int v,
                                                   __nv_bfloat16* delta_out) {
  if (!norm.delta_fixed) return reinterpret_cast<const uint4*>(norm.delta + row)[v];
  const ulonglong2* f = reinterpret_cast<const ulonglong2*>(norm.delta_fixed + row) + 4 * v;
  ulonglong2 q[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) q[i] = __ldcg(f + i);  // written by the previous grid's red's: from L2
  float d[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    d[2 * i] = kern::from_fixed(static_cast<long long>(q[i].x));
    d[2 * i + 1] = kern::from_fixed(static_cast<long long>(q[i].y));
  }
  const uint4 db = float_to_bf16x8(d);
  if (delta_out) reinterpret_cast<uint4*>(delta_out + row)[v] = db;
  return db;
}

// x = residual + delta of 16-byte vector v of the row at `row` (fp32, the reference's order),
// its squares added to ss one by one (both fused routers: the same bits). delta_out: see
// router_delta_bf16.
__device__ __forceinline__ void router_residual_add(const RouterNormIn& norm, int64_t row, int v, float (&x)[8],
                                                    float& ss, __nv_bfloat16* delta_out = nullptr) {
  const float4 r0 = reinterpret_cast<const float4*>(norm.residual + row)[2 * v];
  const float4 r1 = reinterpret_cast<const float4*>(norm.residual + row)[2 * v + 1];
  float d[8];
  bf16x8_to_float(router_delta_bf16(norm, row, v, delta_out), d);
  x[0] = r0.x + d[0]; x[1] = r0.y + d[1]; x[2] = r0.z + d[2]; x[3] = r0.w + d[3];
  x[4] = r1.x + d[4]; x[5] = r1.y + d[5]; x[6] = r1.z + d[6]; x[7] = r1.w + d[7];
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += x[j] * x[j];
}

// The norm weight of 16-byte vector v (8 floats).
__device__ __forceinline__ void router_norm_weight(const RouterNormIn& norm, int v, float (&g)[8]) {
  const float4 g0 = reinterpret_cast<const float4*>(norm.weight)[2 * v];
  const float4 g1 = reinterpret_cast<const float4*>(norm.weight)[2 * v + 1];
  g[0] = g0.x; g[1] = g0.y; g[2] = g0.z; g[3] = g0.w;
  g[4] = g1.x; g[5] = g1.y; g[6] = g1.z; g[7] = g1.w;
}

// y = bf16(x * inv * g), packed (what the experts read) and back as floats (what the logits
// dot: the rounded values, as the reference's router sees them).
__device__ __forceinline__ uint4 router_norm_round(const float (&x)[8], float inv, const float (&g)[8], float (&y)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) y[j] = x[j] * inv * g[j];
  const uint4 yb = float_to_bf16x8(y);
  bf16x8_to_float(yb, y);
  return yb;
}

// Router logits and selection in one launch for small token counts (decode). Block (expert e,
// chunk of kRouterWarps tokens): its threads split the hidden dimension 8 elements at a time,
// the expert's weight row is fetched before waiting for the previous kernel (weights are
// constant), the logit goes to p.logits. The last block of a token chunk to finish (counted with
// an atomic after a __threadfence, so every other block's logits are visible to it) runs the
// selection for the chunk, a warp per token, and resets its counter for the next launch.
constexpr int kRouterFusedMaxVecs = 4;  // 16-byte weight vectors per thread: hidden <= 8192
constexpr int kRouterFusedMaxTokens = 256;

__host__ __device__ inline bool router_fused_supported(int hidden, int experts, int n_group, int top_k) {
  return hidden % 8 == 0 && hidden <= kRouterThreads * 8 * kRouterFusedMaxVecs && experts <= kRouterMaxExperts &&
         n_group <= kRouterMaxGroups && top_k <= kRouterMaxGroups;
}

__device__ __forceinline__ void moe_router_fused_block(const LmHeadParams& lg, const MoeRouterParams& p,
                                                       int* counters, const RouterNormIn& norm, int e, int chunk,
                                                       float* wscratch) {
  __shared__ float red[kRouterWarps][kRouterWarps];
  __shared__ float nscratch[32];
  __shared__ int is_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vecs = lg.hidden / 8;
  uint4 wv[kRouterFusedMaxVecs];
  const uint4* wrow = reinterpret_cast<const uint4*>(lg.w + static_cast<int64_t>(e) * lg.hidden);
#pragma unroll
  for (int k = 0; k < kRouterFusedMaxVecs; ++k) {
    const int v = threadIdx.x + k * kRouterThreads;
    if (v < vecs) wv[k] = wrow[v];
  }
  if (norm.residual)  // the norm weight (also constant) into L2 while the previous kernel drains
    for (int i = threadIdx.x * 32; i < lg.hidden; i += kRouterThreads * 32)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(norm.weight + i));
  pdl::wait();
  pdl::launch_dependents();
  const int n0 = chunk * kRouterWarps, nt = min(kRouterWarps, p.n - n0);
  float acc[kRouterWarps];
#pragma unroll
  for (int t = 0; t < kRouterWarps; ++t) acc[t] = 0.f;
  if (norm.residual) {
    // Token by token: x = residual + delta (fp32, the reference's order), its sum of squares
    // over the block, then the bf16 normed row, dotted with the weight row in registers. Every
    // block computes the same bits in the same order; the expert-0 blocks store them.
#pragma unroll
    for (int t = 0; t < kRouterWarps; ++t) {
      if (t < nt) {  // block-uniform
        const int64_t row = static_cast<int64_t>(n0 + t) * lg.hidden;
        float xs[kRouterFusedMaxVecs][8];
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < kRouterFusedMaxVecs; ++k) {
          const int v = threadIdx.x + k * kRouterThreads;
          if (v < vecs) router_residual_add(norm, row, v, xs[k], ss);
        }
        const float inv = rsqrtf(block_sum(ss, nscratch) / lg.hidden + norm.eps);
#pragma unroll
        for (int k = 0; k < kRouterFusedMaxVecs; ++k) {
          const int v = threadIdx.x + k * kRouterThreads;
          if (v < vecs) {
            float g[8], y[8], wf[8];
            router_norm_weight(norm, v, g);
            const uint4 yb = router_norm_round(xs[k], inv, g, y);
            if (e == 0) reinterpret_cast<uint4*>(norm.out + row)[v] = yb;
            bf16x8_to_float(wv[k], wf);
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[t] += wf[j] * y[j];
          }
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kRouterFusedMaxVecs && !norm.residual; ++k) {
    const int v = threadIdx.x + k * kRouterThreads;
    if (v < vecs) {
      float wf[8];
      bf16x8_to_float(wv[k], wf);
#pragma unroll
      for (int t = 0; t < kRouterWarps; ++t) {
        if (t < nt) {
          float xf[8];
          bf16x8_to_float(reinterpret_cast<const uint4*>(lg.x + static_cast<int64_t>(n0 + t) * lg.hidden)[v], xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[t] += wf[j] * xf[j];
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRouterWarps; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) red[warp][t] = s;
  }
  __syncthreads();
  if (threadIdx.x < nt) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kRouterWarps; ++w) s += red[w][threadIdx.x];
    lg.logits[static_cast<int64_t>(n0 + threadIdx.x) * lg.vocab + e] = s;
  }
  __threadfence();  // this block's logits are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(counters + chunk, 1) == lg.vocab - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  if (threadIdx.x == 0) counters[chunk] = 0;  // every block of the chunk has counted: ready for the next launch
  if (warp < nt) {
    const int t = n0 + warp;
    moe_router_select_warp(p, t, lg.logits + static_cast<int64_t>(t) * lg.vocab,
                           wscratch + warp * router_warp_scratch_floats(p.experts));
  }
}

}  // namespace rs::cuda
