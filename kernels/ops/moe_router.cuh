#pragma once
#include "kernels/common/reduce.cuh"
#include "kernels/ops/moe_router_params.h"

namespace rs::cuda {

constexpr int kRouterMaxExperts = 512;

// Warp-wide argmax over v[0, n) with lowest index on ties (a stable, documented tie rule).
__device__ __forceinline__ int warp_argmax(const float* v, int n) {
  const int lane = threadIdx.x & 31;
  float best = -INFINITY;
  int idx = 0x7fffffff;
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

// One token per block.
__device__ __forceinline__ void moe_router_token(const MoeRouterParams& p, int t) {
  __shared__ float score[kRouterMaxExperts];   // after softmax/sigmoid
  __shared__ float choice[kRouterMaxExperts];  // what selection ranks (score + bias, masked)
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) score[e] = p.logits[static_cast<int64_t>(t) * p.experts + e];
  __syncthreads();
  if (p.scoring == RouterScoring::Softmax) {
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < p.experts; e += blockDim.x) mx = fmaxf(mx, score[e]);
    mx = block_max(mx, scratch);
    float sum = 0.f;
    for (int e = threadIdx.x; e < p.experts; e += blockDim.x) sum += expf(score[e] - mx);
    sum = block_sum(sum, scratch);
    for (int e = threadIdx.x; e < p.experts; e += blockDim.x) score[e] = expf(score[e] - mx) / sum;
  } else {
    for (int e = threadIdx.x; e < p.experts; e += blockDim.x) score[e] = 1.f / (1.f + expf(-score[e]));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x)
    choice[e] = score[e] + (p.bias && p.method == RouterTopk::NoauxTc ? p.bias[e] : 0.f);
  __syncthreads();
  if (warp != 0) return;
  float group_margin = INFINITY;
  if (p.method != RouterTopk::Greedy && p.n_group > 1) {
    // Rank groups (V2: best score in the group; V3: sum of its two best biased scores), keep
    // topk_group of them, and mask the experts of the others out of the selection.
    const int per = p.experts / p.n_group;
    __shared__ float gscore[64];
    for (int g = lane; g < p.n_group; g += 32) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < per; ++i) {
        const float v = choice[g * per + i];
        if (v > b1) { b2 = b1; b1 = v; } else if (v > b2) { b2 = v; }
      }
      gscore[g] = p.method == RouterTopk::NoauxTc ? b1 + b2 : b1;
    }
    __syncwarp();
    __shared__ int gkeep[64];
    for (int g = lane; g < p.n_group; g += 32) gkeep[g] = 0;
    __syncwarp();
    float last_kept = 0.f;
    for (int k = 0; k < p.topk_group; ++k) {
      const int g = warp_argmax(gscore, p.n_group);
      last_kept = gscore[g];
      __syncwarp();
      if (lane == 0) { gkeep[g] = 1; gscore[g] = -INFINITY; }
      __syncwarp();
    }
    if (p.topk_group < p.n_group) group_margin = last_kept - gscore[warp_argmax(gscore, p.n_group)];
    __syncwarp();
    // HF masks the other groups with 0.0, not -inf (the CPU reference does the same).
    for (int e = lane; e < p.experts; e += 32)
      if (!gkeep[e / per]) choice[e] = 0.0f;
    __syncwarp();
  }
  __shared__ int sel[64];
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
  const float expert_margin = p.top_k < p.experts ? last_choice - choice[warp_argmax(choice, p.experts)] : INFINITY;
  if (lane == 0) {
    if (p.margins) p.margins[t] = fminf(group_margin, expert_margin);
    for (int k = 0; k < p.top_k; ++k) {
      float w = score[sel[k]];
      if (p.normalize) w /= wsum + 1e-20f;
      if (!p.normalize || p.scale_after_normalize) w *= p.routed_scaling;
      p.topk_ids[static_cast<int64_t>(t) * p.top_k + k] = sel[k];
      p.topk_weights[static_cast<int64_t>(t) * p.top_k + k] = w;
    }
  }
}

}  // namespace rs::cuda
