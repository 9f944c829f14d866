#pragma once
// Routed-expert FFN for a few tokens (decode, m <= kExpertGemvMaxTokens), in two kernels:
//   gate_up: block (row group, active expert a): h[a, t, :] = silu(gate_e x_t) * up_e x_t
//   down:    block (row group):                  out[t, :] = sum_a w[t, a] * down_e h[a, t]
// Grids are fixed by m alone (graph capture); every block derives the routing itself from the
// <= m*top_k ids (a bitmask over experts, so active experts come out in ascending id order),
// and blocks whose active index exceeds the number of distinct experts exit at once. Each
// selected expert's rows are loaded once per call whatever m is: a warp holds its rows in
// registers and runs all tokens of that expert against them.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/ops/gemv.cuh"
#include "kernels/ops/swiglu.cuh"
#include "kernels/ops/matmul_launch.h"

namespace rs::kern {

constexpr int kMaxActiveSmall = kExpertGemvMaxTokens * kMaxTopK;

// Expert ids e < num_experts are routed experts (the device arrays); e = num_experts + k is
// shared expert k (MoeExperts::n_shared), a view of rows [k*inter, (k+1)*inter) of shared_gate /
// shared_up and of columns [k*inter, (k+1)*inter) of shared_down. Views keep the parent's row
// stride (cols) and move the FP8 scale pointer by whole scale blocks (the host checks that inter
// is a multiple of the block sizes), so every op that takes the row stride from w.cols reads them
// like any expert.
__device__ __forceinline__ rs::cuda::DeviceMatrix shared_rows_view(const rs::cuda::DeviceMatrix& w,
                                                                   int64_t row0, int64_t nrows) {
  rs::cuda::DeviceMatrix v = w;
  const bool fp8 = w.type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  v.data = static_cast<const uint8_t*>(w.data) + row0 * w.cols * (fp8 ? 1 : 2);
  if (fp8) v.scale_inv = w.scale_inv + (row0 / w.block_rows) * ((w.cols + w.block_cols - 1) / w.block_cols);
  v.rows = nrows;
  return v;
}

// Columns [col0, ...) of w; rows and the row stride (cols) stay the parent's.
__device__ __forceinline__ rs::cuda::DeviceMatrix shared_cols_view(const rs::cuda::DeviceMatrix& w,
                                                                   int64_t col0) {
  rs::cuda::DeviceMatrix v = w;
  const bool fp8 = w.type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  v.data = static_cast<const uint8_t*>(w.data) + col0 * (fp8 ? 1 : 2);
  if (fp8) v.scale_inv = w.scale_inv + col0 / w.block_cols;
  return v;
}

enum : int { kPartGate = 0, kPartUp = 1, kPartDown = 2 };

// The gate / up / down matrix of expert id e (routed, or a shared-expert view as above).
__device__ __forceinline__ rs::cuda::DeviceMatrix expert_matrix(const rs::cuda::MoeExperts& x, int e,
                                                                int part) {
  if (e < x.num_experts) {
    if (x.stride == 0) return part == kPartGate ? x.gate[e] : part == kPartUp ? x.up[e] : x.down[e];
    rs::cuda::DeviceMatrix v = x.first[part];
    const int64_t off = static_cast<int64_t>(e) * x.stride;
    v.data = static_cast<const uint8_t*>(v.data) + off;
    if (x.type == rs::cuda::WeightType::FP8_E4M3_BLOCK)
      v.scale_inv = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(v.scale_inv) + off);
    return v;
  }
  const int64_t off = static_cast<int64_t>(e - x.num_experts) * x.inter;
  if (part == kPartGate) return shared_rows_view(x.shared_gate, off, x.inter);
  if (part == kPartUp) return shared_rows_view(x.shared_up, off, x.inter);
  return shared_cols_view(x.shared_down, off);
}


// Routing of <= kExpertGemvMaxTokens tokens, in shared memory.
struct SmallRouting {
  uint32_t mask[kMaxExperts / 32];
  int n_active;
  int expert[kMaxActiveSmall];               // active index -> expert id, ascending
  uint32_t tokens[kMaxActiveSmall];          // bit t: token t selected this expert
  float weight[kExpertGemvMaxTokens][kMaxActiveSmall];
};

// One token's routing in one warp's registers: lane < k holds id e and weight wt (ids outside
// [0, E) select nothing: e becomes -1); a lane leads its expert if no lower lane holds the same
// id; active slot a is the lead with a leads of lower ids before it; a slot's weight sums its
// id's weights in lane order. Returns the leads' mask, and in a / w this lane's slot (-1 for
// non-leads) and summed weight.
__device__ __forceinline__ unsigned one_token_leads(int& e, float wt, int k, int E, int& a, float& w) {
  const int lane = threadIdx.x & 31;
  if (lane >= k || e < 0 || e >= E) e = -1;
  w = 0.f;
  bool lead = e >= 0;
  for (int j = 0; j < k; ++j) {  // every lane the same trips: the shuffles stay converged
    const int ej = __shfl_sync(0xffffffffu, e, j);
    const float wj = __shfl_sync(0xffffffffu, wt, j);
    if (ej == e) {
      w += wj;
      if (j < lane) lead = false;
    }
  }
  const unsigned leads = __ballot_sync(0xffffffffu, lead);
  a = 0;
  for (int j = 0; j < k; ++j) {
    const int ej = __shfl_sync(0xffffffffu, e, j);
    if (((leads >> j) & 1u) && ej < e) ++a;
  }
  if (!lead) a = -1;
  return leads;
}

// One token, top_k <= 32: the same routing from warp 0's shuffles and ballots, with one barrier
// instead of three and no shared-memory atomics. Why: the one-token expert launches find the
// routing on their critical path, before the routed experts' copies can start (the fourteenth
// session's finding: code and shared-memory round trips there cost the step more than their
// instruction counts suggest). Duplicate ids merge into the lowest lane's entry, their weights
// added in lane order; the general path below adds them by shared-memory atomics in any order,
// the same bits for distinct ids.
template <bool kWarp>
__device__ __forceinline__ void small_routing_one(const ExpertGemvParams& p, SmallRouting& sr, const int* ids,
                                                  const float* weights) {
  const int lane = threadIdx.x & 31;
  if (kWarp || threadIdx.x < 32) {
    const int k = p.top_k;
    int e = lane < k ? ids[lane] : -1;  // plain loads, as below
    const float wt = lane < k ? weights[lane] : 0.f;
    for (int i = lane; i < kMaxActiveSmall; i += 32) {  // one token: readers see weight row 0 only
      sr.tokens[i] = 0u;
      sr.weight[0][i] = 0.f;
    }
    int a;
    float w;
    const unsigned leads = one_token_leads(e, wt, k, p.experts.num_experts, a, w);
    __syncwarp();  // the zeroing above before the entries below
    if (a >= 0) {
      sr.expert[a] = e;
      sr.tokens[a] = 1u;
      sr.weight[0][a] = w;
    }
    if (lane == 0) sr.n_active = __popc(leads);
  }
  if constexpr (kWarp) __syncwarp();
  else __syncthreads();
}

// Ids outside [0, num_experts) select nothing (the host validates the router's output range).
// ids/weights: p.topk_ids/p.topk_weights, or the in-launch router's shared copies
// (expert_stream_route.cuh). kWarp: one warp fills sr (the others go on meanwhile), else the block.
template <bool kWarp = false>
__device__ __forceinline__ void small_routing(const ExpertGemvParams& p, SmallRouting& sr, const int* ids,
                                              const float* weights) {
  if (p.compact_routing && p.m == 1 && p.top_k <= 32) {
    small_routing_one<kWarp>(p, sr, ids, weights);
    return;
  }
  const int n = p.m * p.top_k;
  const int E = p.experts.num_experts;
  const int tid = kWarp ? threadIdx.x & 31 : threadIdx.x, threads = kWarp ? 32 : blockDim.x;
  auto sync = [] {
    if constexpr (kWarp) __syncwarp();
    else __syncthreads();
  };
  for (int i = tid; i < kMaxExperts / 32; i += threads) sr.mask[i] = 0;
  for (int i = tid; i < kMaxActiveSmall; i += threads) {
    sr.tokens[i] = 0;
    for (int t = 0; t < kExpertGemvMaxTokens; ++t) sr.weight[t][i] = 0.f;
  }
  sync();
  int e = -1;
  float wt = 0.f;
  if (tid < n) {  // n <= threads: m * kMaxTopK <= the block's threads; one token's kMaxTopK <= 32
    // Plain loads: the decode megakernel's router wrote them in the same launch. The weight is
    // loaded with the id, in the same round trip to L2, not after the barrier below.
    e = ids[tid];
    wt = weights[tid];
    if (e >= 0 && e < E) atomicOr(&sr.mask[e >> 5], 1u << (e & 31));
    else e = -1;
  }
  sync();
  if (e >= 0) {
    int a = __popc(sr.mask[e >> 5] & ((1u << (e & 31)) - 1u));
    for (int wd = 0; wd < (e >> 5); ++wd) a += __popc(sr.mask[wd]);
    const int t = tid / p.top_k;
    sr.expert[a] = e;
    atomicOr(&sr.tokens[a], 1u << t);
    atomicAdd(&sr.weight[t][a], wt);
  }
  if (tid == 0) {
    int c = 0;
    for (int wd = 0; wd < (E + 31) / 32; ++wd) c += __popc(sr.mask[wd]);
    sr.n_active = c;
  }
  sync();
}
__device__ __forceinline__ void small_routing(const ExpertGemvParams& p, SmallRouting& sr) {
  small_routing(p, sr, p.topk_ids, p.topk_weights);
}

__device__ __forceinline__ float silu(float g) { return silu_f32(g); }

// Block (blockIdx.x, blockIdx.y = active index): loops over groups of kGemvWarps*RPW
// intermediate rows with stride gridDim.x, so the routing prologue runs once per block and the
// grid can be sized to the resident capacity rather than to the rows.
template <bool kFp8, int RPW, int MT, int U>
__device__ __forceinline__ void expert_gemv_gate_up_op(const ExpertGemvParams& p, SmallRouting& sr) {
  pdl_launch_dependents();
  pdl_wait();  // the routing comes from the router kernel
  small_routing(p, sr);
  const int a = blockIdx.y;
  if (a >= sr.n_active) return;
  const int e = sr.expert[a];
  const uint32_t sel = sr.tokens[a];
  const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
  const rs::cuda::DeviceMatrix up = expert_matrix(p.experts, e, kPartUp);
  const int inter = p.experts.inter, hidden = p.experts.hidden;
  const int lane = threadIdx.x & 31;
  const __nv_bfloat16* xr[1][MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) xr[0][t] = (t < p.m && (sel >> t & 1u)) ? p.x + (int64_t)t * hidden : nullptr;
  for (int64_t rg = blockIdx.x; rg * kGemvWarps * RPW < inter; rg += gridDim.x) {
    const int64_t row0 = (rg * kGemvWarps + threadIdx.x / 32) * RPW;
    if (row0 >= inter) break;
    WeightRow rows[2 * RPW];  // RPW gate rows, then the same RPW up rows
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      rows[r] = weight_row(gate, row0 + r, kFp8);
      rows[RPW + r] = weight_row(up, row0 + r, kFp8);
    }
    float part[2 * RPW][MT];
    gemv_warp_partial<kFp8, 2 * RPW, MT, U>(rows, xr, 0, hidden / chunk_elems<kFp8>(), gate.block_cols, part);
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float g = warp_sum(part[r][t]);
        const float u = warp_sum(part[RPW + r][t]);
        if (lane == ((r * MT + t) & 31) && xr[0][t] && row0 + r < inter)
          p.h[((int64_t)a * p.m + t) * inter + row0 + r] = __float2bfloat16_rn(silu(g) * u);
      }
  }
}

// Block (blockIdx.x = group of kGemvWarps hidden rows, one per warp): loops over the active
// experts EPI at a time, so a warp has EPI experts' rows in flight instead of one.
template <bool kFp8, int EPI, int MT, int U>
__device__ __forceinline__ void expert_gemv_down_op(const ExpertGemvParams& p, SmallRouting& sr) {
  pdl_launch_dependents();
  pdl_wait();  // routing from the router, h from the gate_up kernel
  small_routing(p, sr);
  const int inter = p.experts.inter, hidden = p.experts.hidden;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (row >= hidden) return;
  float acc[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) acc[t] = 0.f;
  for (int a0 = 0; a0 < sr.n_active; a0 += EPI) {
    WeightRow rows[EPI];
    const __nv_bfloat16* hr[EPI][MT];
#pragma unroll
    for (int i = 0; i < EPI; ++i) {
      const int a = a0 + i;
      const uint32_t sel = a < sr.n_active ? sr.tokens[a] : 0u;
      if (a < sr.n_active) rows[i] = weight_row(expert_matrix(p.experts, sr.expert[a], kPartDown), row, kFp8);
#pragma unroll
      for (int t = 0; t < MT; ++t)
        hr[i][t] = (t < p.m && (sel >> t & 1u)) ? p.h + ((int64_t)a * p.m + t) * inter : nullptr;
    }
    float part[EPI][MT];
    gemv_warp_partial<kFp8, EPI, MT, U, true>(rows, hr, 0, inter / chunk_elems<kFp8>(),
                                              expert_matrix(p.experts, sr.expert[a0], kPartDown).block_cols, part);
    // The routing weight is linear in the dot product, so lanes apply it before the reduction.
#pragma unroll
    for (int i = 0; i < EPI; ++i)
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        const float wt = (a0 + i < sr.n_active && t < kExpertGemvMaxTokens) ? sr.weight[t][a0 + i] : 0.f;
        acc[t] = fmaf(wt, part[i][t], acc[t]);
      }
  }
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const float v = warp_sum(acc[t]);
    if (lane == (t & 31) && t < p.m) p.out[(int64_t)t * hidden + row] = __float2bfloat16_rn(v);
  }
}

}  // namespace rs::kern
