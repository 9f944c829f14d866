#pragma once
// Routed-expert FFN for many tokens (batched decode, prefill) on tensor cores, grouped by
// expert so each selected expert's weights are read once per call:
//   1. group  (one block): count (token, slot) pairs per expert, lay the pairs out in expert
//      order, and cut each expert's pairs into tiles of BN tokens (the tile table);
//   2. gate_up (grid: 64-row slices of inter x max_tiles): h[p] = silu(gate_e x) * up_e x, the
//      block's 128 MMA rows being 64 gate rows and the same 64 up rows so SwiGLU fuses;
//   3. down   (grid: 128-row slices of hidden x max_tiles): y[p] = down_e h[p];
//   4. combine (grid: tokens): out[t] = sum_j weight[t,j] * y[pair(t,j)], in slot order, so the
//      result does not depend on the order atomics handed out pair slots.
// Grids depend only on m (graph capture); blocks beyond the tile count exit at once.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/ops/gemm_mma.cuh"
#include "kernels/ops/gemv_experts.cuh"

namespace rs::kern {

// Exclusive prefix sum over the block (blockDim.x a multiple of 32, <= 1024); *total = sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_tot, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  int inc = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += o;
  }
  if (lane == 31) warp_tot[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int wv = lane < nw ? warp_tot[lane] : 0;
    int winc = wv;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, winc, off);
      if (lane >= off) winc += o;
    }
    if (lane < nw) warp_tot[lane] = winc - wv;
    if (lane == 31) *total = winc;
  }
  __syncthreads();
  const int r = warp_tot[warp] + inc - v;
  __syncthreads();
  return r;
}

struct GroupSmem {
  int count[kMaxExperts];
  int offset[kMaxExperts];
  int warp_tot[32];
  int total_pairs, total_tiles;
};

// One block of 1024 threads. With p.experts.n_shared > 0 (expert_decode.cuh) the shared
// experts are ids E .. E + n_shared - 1, selected by every token: slot P + k*m + t is token t's
// pair for shared expert k, so they get tiles like any routed expert and combine adds them.
__device__ __forceinline__ void expert_group_op(const ExpertGemmParams& p, GroupSmem& s) {
  const int E = p.experts.num_experts, P = p.m * p.top_k, BN = p.tile_tokens;
  const int ns = p.experts.n_shared, PT = P + ns * p.m, ET = E + ns;
  for (int e = threadIdx.x; e < kMaxExperts; e += blockDim.x) s.count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < PT; i += blockDim.x) {
    const int e = i < P ? p.topk_ids[i] : E + (i - P) / p.m;
    const bool ok = i < P ? (e >= 0 && e < E) : true;
    p.pair_of[i] = ok ? atomicAdd(&s.count[e], 1) : -1;  // rank within expert
  }
  __syncthreads();
  const int e = threadIdx.x;  // kMaxExperts == max blockDim: one expert per thread
  const int cnt = e < ET ? s.count[e] : 0;
  const int off = block_exclusive_scan(cnt, s.warp_tot, &s.total_pairs);
  const int ntile = (cnt + BN - 1) / BN;
  const int toff = block_exclusive_scan(ntile, s.warp_tot, &s.total_tiles);
  if (e < ET) s.offset[e] = off;
  for (int i = 0; i < ntile && toff + i < p.max_tiles; ++i) {
    p.tile_expert[toff + i] = e;
    p.tile_p0[toff + i] = off + i * BN;
    p.tile_n[toff + i] = min(BN, cnt - i * BN);
  }
  if (threadIdx.x == 0) *p.n_tiles = min(s.total_tiles, p.max_tiles);
  __syncthreads();
  for (int i = threadIdx.x; i < PT; i += blockDim.x) {
    const int rank = p.pair_of[i];
    if (rank < 0) continue;
    const int q = s.offset[i < P ? p.topk_ids[i] : E + (i - P) / p.m] + rank;
    p.pair_of[i] = q;
    p.pair_token[q] = i < P ? i / p.top_k : (i - P) % p.m;
  }
}

template <bool kFp8, int BN>
__device__ __forceinline__ void expert_gemm_gate_up_op(const ExpertGemmParams& p, uint8_t* smem) {
  using Ops = mma::TileOperands<kFp8, BN>;
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int e = p.tile_expert[tile], p0 = p.tile_p0[tile], n = p.tile_n[tile];
  const rs::cuda::DeviceMatrix gate = expert_matrix(p.experts, e, kPartGate);
  const rs::cuda::DeviceMatrix up = expert_matrix(p.experts, e, kPartUp);
  const int inter = p.experts.inter, hidden = p.experts.hidden;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * (mma::BM / 2);
  const int64_t esize = kFp8 ? 1 : 2;
  Ops op;
  op.any_valid = gate.data;
#pragma unroll
  for (int i = 0; i < Ops::kWLoads; ++i) {
    // Select fields, not a reference to one of two local structs (that would go to local memory).
    const bool is_gate = Ops::w_row(i) < mma::BM / 2;
    const auto* base = static_cast<const uint8_t*>(is_gate ? gate.data : up.data);
    const int64_t r = r0 + (Ops::w_row(i) % (mma::BM / 2));
    op.w[i] = r < inter ? base + r * hidden * esize : nullptr;
    if (kFp8 && i == 0) {
      const int64_t scale_cols = (hidden + gate.block_cols - 1) / gate.block_cols;
      const float* sbase = is_gate ? gate.scale_inv : up.scale_inv;
      op.wscale = r < inter ? sbase + (r / gate.block_rows) * scale_cols : nullptr;
    }
  }
#pragma unroll
  for (int i = 0; i < Ops::kXLoads; ++i) {
    const int c = Ops::x_row(i);
    op.x[i] = c < n ? p.x + static_cast<int64_t>(p.pair_token[p0 + c]) * hidden : nullptr;
  }
  float acc[2][BN / 16][4];
  mma::mainloop<kFp8, BN>(op, 0, hidden, gate.block_cols, smem, acc);
  // Up rows (tile rows 64..127) hand their results to the warps holding the matching gate rows.
  constexpr int UP = BN + 1;  // padded pitch
  float* ubuf = reinterpret_cast<float*>(smem);
  mma::for_each_acc<BN>(acc, [&](int r, int c, float v) {
    if (r >= mma::BM / 2) ubuf[(r - mma::BM / 2) * UP + c] = v;
  });
  __syncthreads();
  mma::for_each_acc<BN>(acc, [&](int r, int c, float g) {
    if (r >= mma::BM / 2 || c >= n || r0 + r >= inter) return;
    const float u = ubuf[r * UP + c];
    p.h[static_cast<int64_t>(p0 + c) * inter + r0 + r] = __float2bfloat16_rn(silu(g) * u);
  });
}

template <bool kFp8, int BN>
__device__ __forceinline__ void expert_gemm_down_op(const ExpertGemmParams& p, uint8_t* smem) {
  using Ops = mma::TileOperands<kFp8, BN>;
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int e = p.tile_expert[tile], p0 = p.tile_p0[tile], n = p.tile_n[tile];
  const rs::cuda::DeviceMatrix down = expert_matrix(p.experts, e, kPartDown);  // row stride: down.cols
  const int inter = p.experts.inter, hidden = p.experts.hidden;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * mma::BM;
  const int64_t esize = kFp8 ? 1 : 2;
  Ops op;
  op.any_valid = down.data;
#pragma unroll
  for (int i = 0; i < Ops::kWLoads; ++i) {
    const int64_t r = row0 + Ops::w_row(i);
    op.w[i] = r < hidden ? static_cast<const uint8_t*>(down.data) + r * down.cols * esize : nullptr;
  }
  if constexpr (kFp8) {
    const int64_t r = row0 + Ops::w_row(0);
    const int64_t scale_cols = (down.cols + down.block_cols - 1) / down.block_cols;
    op.wscale = r < hidden ? down.scale_inv + (r / down.block_rows) * scale_cols : nullptr;
  }
#pragma unroll
  for (int i = 0; i < Ops::kXLoads; ++i) {
    const int c = Ops::x_row(i);
    op.x[i] = c < n ? p.h + static_cast<int64_t>(p0 + c) * inter : nullptr;
  }
  float acc[2][BN / 16][4];
  mma::mainloop<kFp8, BN>(op, 0, inter, down.block_cols, smem, acc);
  mma::for_each_acc<BN>(acc, [&](int r, int c, float v) {
    if (c >= n || row0 + r >= hidden) return;
    p.y[static_cast<int64_t>(p0 + c) * hidden + row0 + r] = __float2bfloat16_rn(v);
  });
}

// Block per token; hidden % 8 == 0.
__device__ __forceinline__ void expert_combine_op(const ExpertGemmParams& p) {
  const int t = blockIdx.x, hidden = p.experts.hidden;
  for (int c8 = threadIdx.x; c8 < hidden / 8; c8 += blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < p.top_k; ++j) {
      const int q = p.pair_of[t * p.top_k + j];
      if (q < 0) continue;
      const float w = p.topk_weights[t * p.top_k + j];
      const uint4 v = *reinterpret_cast<const uint4*>(p.y + static_cast<int64_t>(q) * hidden + c8 * 8);
      acc[0] = fmaf(w, bf16_lo(v.x), acc[0]);
      acc[1] = fmaf(w, bf16_hi(v.x), acc[1]);
      acc[2] = fmaf(w, bf16_lo(v.y), acc[2]);
      acc[3] = fmaf(w, bf16_hi(v.y), acc[3]);
      acc[4] = fmaf(w, bf16_lo(v.z), acc[4]);
      acc[5] = fmaf(w, bf16_hi(v.z), acc[5]);
      acc[6] = fmaf(w, bf16_lo(v.w), acc[6]);
      acc[7] = fmaf(w, bf16_hi(v.w), acc[7]);
    }
    for (int k = 0; k < p.experts.n_shared; ++k) {  // shared experts: weight 1, after the routed ones
      const int q = p.pair_of[p.m * p.top_k + k * p.m + t];
      const uint4 v = *reinterpret_cast<const uint4*>(p.y + static_cast<int64_t>(q) * hidden + c8 * 8);
      acc[0] += bf16_lo(v.x);
      acc[1] += bf16_hi(v.x);
      acc[2] += bf16_lo(v.y);
      acc[3] += bf16_hi(v.y);
      acc[4] += bf16_lo(v.z);
      acc[5] += bf16_hi(v.z);
      acc[6] += bf16_lo(v.w);
      acc[7] += bf16_hi(v.w);
    }
    uint4 o;
    o.x = pack_bf16x2(acc[0], acc[1]);
    o.y = pack_bf16x2(acc[2], acc[3]);
    o.z = pack_bf16x2(acc[4], acc[5]);
    o.w = pack_bf16x2(acc[6], acc[7]);
    *reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(t) * hidden + c8 * 8) = o;
  }
}

}  // namespace rs::kern
