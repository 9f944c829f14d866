#pragma once
// The MoE router (post-attention add + RMSNorm, logits, selection) inside the one-token
// streaming FFN (expert_stream_ffn.cuh, kRoute; bf16 experts).
//
// Why: as its own launch the router cost a kernel boundary on each side: on the H200 (V2-Lite,
// bf16, 2026-11-30) it ended 7.2 us after o_proj, and the FFN behind it could copy only ~96 KB an
// SM of shared-expert rows before its griddepcontrol.wait (more slowed the router down). Here the
// FFN's producer copies shared-expert rows into the whole ring while the consumer warps route:
// each block forms x = RMSNorm(residual + delta) itself (2048 values), computes the logits of
// its own experts (block b: experts b, b + G), and after one grid-wide wait on those logits every
// block runs the selection on its own copy; block 0 writes what the separate router wrote
// (x, logits, ids, weights, margins).
//
// The arithmetic is the fused routers' (moe_router.cuh): 256 threads (8 warps) hold 16-byte
// vectors v = tid + 256 k of the row, the squares and the logit products are summed per thread
// in that order, then warp sums, then the 8 warps in order; the selection is
// moe_router_select_warp itself. So the routing and x have the router kernels' bits.
//
// Grid-wide wait: the same scheme as the FFN's h (expert_stream_ffn.cuh), on sync words 2
// (arrivals: the blocks that own an expert) and 3 (departures; the last block zeroes both).
#include "kernels/ops/expert_stream.cuh"
#include "kernels/ops/moe_decode_launch.h"
#include "kernels/ops/moe_router.cuh"

namespace rs::kern {

constexpr int kXsRouteThreads = rs::cuda::kRouterThreads;  // 256: the routers' thread layout
constexpr int kXsRouteVecs = 4;                             // 16-byte vectors a thread: hidden <= 8192
constexpr int kXsRouteRows = 2;                             // experts a block: experts <= 2 * grid

// Named barrier 2: the 256 routing threads.
__device__ __forceinline__ void xs_route_sync() {
  asm volatile("bar.sync 2, %0;" ::"n"(kXsRouteThreads) : "memory");
}

// Before griddepcontrol.wait (routing threads): this block's router rows and the norm weight
// towards L2, so their loads after the wait do not go to HBM.
__device__ __forceinline__ void xs_route_prefetch(const XsRouteParams& rp) {
  const int hidden = rp.lg.hidden;
  const char* lines[kXsRouteRows + 1];
  int64_t bytes[kXsRouteRows + 1];
  int n = 0;
  for (int j = 0; j < kXsRouteRows; ++j) {
    const int e = blockIdx.x + j * gridDim.x;
    if (e >= rp.r.experts) break;
    lines[n] = reinterpret_cast<const char*>(rp.lg.w + static_cast<int64_t>(e) * hidden);
    bytes[n++] = static_cast<int64_t>(hidden) * 2;
  }
  lines[n] = reinterpret_cast<const char*>(rp.norm.weight);
  bytes[n++] = static_cast<int64_t>(hidden) * 4;
  for (int k = 0; k < n; ++k)
    for (int64_t off = static_cast<int64_t>(threadIdx.x) * 128; off < bytes[k]; off += kXsRouteThreads * 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(lines[k] + off));
}

// After griddepcontrol.wait, routing threads (threadIdx.x < 256): x into act (bf16), this block's
// logits to rp.lg.logits, then the arrival on sync[2]. red: [kXsRouteRows + 1][8] floats.
__device__ __forceinline__ void xs_route_logits(const XsRouteParams& rp, uint8_t* act, float (*red)[8],
                                                unsigned* sync) {
  using namespace rs::cuda;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
  const RouterNormIn& norm = rp.norm;
  const int hidden = rp.lg.hidden, vecs = hidden / 8;
  float y[kXsRouteVecs][8];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kXsRouteVecs; ++k) {
    const int v = tid + k * kXsRouteThreads;
    if (v < vecs) router_residual_add(norm, 0, v, y[k], ss);
  }
  ss = warp_sum(ss);
  if (lane == 0) red[0][warp] = ss;
  xs_route_sync();
  float total = 0.f;
  for (int w = 0; w < kXsRouteThreads / 32; ++w) total += red[0][w];  // block_sum's order
  const float inv = rsqrtf(total / hidden + norm.eps);
#pragma unroll
  for (int k = 0; k < kXsRouteVecs; ++k) {
    const int v = tid + k * kXsRouteThreads;
    if (v < vecs) {
      float g[8];
      router_norm_weight(norm, v, g);
      const uint4 yb = router_norm_round(y[k], inv, g, y[k]);
      reinterpret_cast<uint4*>(act)[v] = yb;
      if (blockIdx.x == 0) reinterpret_cast<uint4*>(norm.out)[v] = yb;
    }
  }
  bool owns = false;
#pragma unroll
  for (int j = 0; j < kXsRouteRows; ++j) {
    const int e = blockIdx.x + j * gridDim.x;
    if (e >= rp.r.experts) break;  // block-uniform
    owns = true;
    const uint4* wrow = reinterpret_cast<const uint4*>(rp.lg.w + static_cast<int64_t>(e) * hidden);
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < kXsRouteVecs; ++k) {
      const int v = tid + k * kXsRouteThreads;
      if (v < vecs) {
        float wf[8];
        bf16x8_to_float(wrow[v], wf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc += wf[i] * y[k][i];
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) red[1 + j][warp] = acc;
  }
  xs_route_sync();
  if (tid < kXsRouteRows) {
    const int e = blockIdx.x + tid * gridDim.x;
    if (e < rp.r.experts) {
      float s = 0.f;
      for (int w = 0; w < kXsRouteThreads / 32; ++w) s += red[1 + tid][w];  // the routers' order
      rp.lg.logits[e] = s;
    }
  }
  xs_route_sync();  // thread 0's release below covers the logits thread 1 stored
  if (tid == 0 && owns) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(sync + 2) : "memory");
}

// Thread 0: wait for every expert's logit (the blocks that own one), then count this block out;
// the last block out zeroes sync[2..3] for the next launch.
__device__ __forceinline__ void xs_route_wait(const XsRouteParams& rp, unsigned* sync) {
  const unsigned owners = min(static_cast<unsigned>(rp.r.experts), gridDim.x);
  xs_grid_wait(sync + 2, owners);
  if (atomicAdd(sync + 3, 1u) == gridDim.x - 1) {
    sync[2] = 0u;
    sync[3] = 0u;
  }
}

// Warp 0 after the wait: the selection into shared memory (ids, weights), and for block 0 also
// to the router's outputs.
__device__ __forceinline__ void xs_route_select(const XsRouteParams& rp, int32_t* ids, float* weights,
                                                float* wscratch) {
  rs::cuda::MoeRouterParams r = rp.r;
  r.n = 1;
  r.topk_ids = ids;
  r.topk_weights = weights;
  if (blockIdx.x != 0) r.margins = nullptr;
  rs::cuda::moe_router_select_warp(r, 0, rp.lg.logits, wscratch);
  if (blockIdx.x == 0)
    for (int k = threadIdx.x & 31; k < r.top_k; k += 32) {
      rp.r.topk_ids[k] = ids[k];
      rp.r.topk_weights[k] = weights[k];
    }
}

}  // namespace rs::kern
