#pragma once
// One token's router (the post-attention add + RMSNorm, the logits, the selection) inside the
// streamed expert launch (expert_stream_op with kRoute, expert_stream_ffn.cuh), instead of a
// launch of its own between o_proj and the experts.
//
// Why: the router launch (the 8-block cluster of moe_router_cluster.cuh) advanced a batch-1 step
// by 7.2-7.9 us a layer on the H200 (V2-Lite, docs/perf/cuda.md) for 0.26 MB of weights: a chain
// of dependent trips (x, the norm, the logits, the selection) with HBM mostly idle. Inside the
// expert launch the shared experts' stages need no routing: their copies stream while the routing
// is found, and only the routed experts' copies wait for it.
// Measured (H200, V2-Lite, b1): FP8 1.857-1.874 ms a step against 1.894-1.903 with the router
// launch, so FP8 experts take it by default (moe_decode_kernels.cu); bf16's one-launch FFN was
// slower with it (2.13-2.15 against 2.06-2.08): its blocks, 216 KB of shared memory each, can only
// start once o_proj's leave, where behind the router launch they start during the router. The
// wait probe (bench forward --wait-probe) puts this chain's end, the routed copies' start, 12-15
// us after the launch's release: each dependent trip to L2 costs 1.5-2 us here.
//
// How: every block computes the token's add + RMSNorm itself (xn goes straight into its shared
// memory: the experts' x); block b the logits of experts b, b + G, ... (their rows copied into
// shared memory before griddepcontrol.wait); the logits meet in L2 behind one grid-wide count
// (kernels/common/grid_count.cuh; every block of the launch is resident, the host checks), and
// warp 0 of every block runs the same selection on them while the other warps start on the shared
// experts' stages. Block 0 stores xn, the logits' selection (ids, weights, margins) as the router
// kernels do, for the kernels after and the layer's record.
//
// Bits: the arithmetic is the fused routers' (moe_router.cuh, moe_router_cluster.cuh) in their
// order: 256 threads, thread t owns 16-byte vectors t, t + 256, ...; warp sums added 0..7. The
// FP8 experts' f16 staging of xn is xs_stage_x's (the same exponent, the same conversions).
#include "kernels/common/grid_count.cuh"
#include "kernels/ops/expert_route_params.h"
#include "kernels/ops/expert_stream.cuh"
#include "kernels/ops/moe_router.cuh"

namespace rs::kern {

constexpr int kXsRouteThreads = rs::cuda::kRouterThreads;  // the fused routers' 256 threads (warps 0..7)
constexpr int kXsRouteMaxRows = 4;                          // router rows a block: experts <= 4 * grid
constexpr int kXsRouteMaxVecs = rs::cuda::kRouterFusedMaxVecs;
static_assert(kXsRouteThreads <= kXsConsumerWarps * 32, "the router's threads are consumer threads");
static_assert(kMaxTopK <= 32, "warp 0 selects and builds the routing");

struct XsRouteSmem {
  float red[rs::cuda::kRouterWarps][kXsRouteMaxRows];  // warp partials of the block's logits
  float scratch[kXsConsumerWarps];                      // the norm's warp sums, the FP8 amax
  int ids[kMaxTopK];
  float weights[kMaxTopK];
};

// The act region (dynamic shared memory after the ring) with routing: x at 0 (hidden bf16/f16),
// then the block's router rows (rows x hidden bf16), then the selection's scratch.
__host__ __device__ inline int xs_route_rows(int experts, int grid) { return (experts + grid - 1) / grid; }
__host__ __device__ inline uint32_t xs_route_scratch_offset(int hidden, int rows) {
  return static_cast<uint32_t>(hidden) * 2u * (1u + static_cast<uint32_t>(rows));
}
__host__ __device__ inline uint32_t xs_route_act_bytes(int hidden, int rows, int experts) {
  return xs_route_scratch_offset(hidden, rows) + static_cast<uint32_t>(rs::cuda::router_warp_scratch_floats(experts)) * 4u;
}

// Before the wait (the router's threads): this block's router rows into shared memory.
__device__ __forceinline__ void xs_route_prewait(const ExpertRouteParams& rt, uint8_t* act) {
  if (threadIdx.x >= kXsRouteThreads) return;
  const int hidden = rt.lg.hidden, vecs = hidden / 8;
  uint4* rows = reinterpret_cast<uint4*>(act + static_cast<size_t>(hidden) * 2);
  for (int r = 0; r < kXsRouteMaxRows; ++r) {
    const int e = blockIdx.x + r * gridDim.x;
    if (e >= rt.r.experts) break;
    const uint4* w = reinterpret_cast<const uint4*>(rt.lg.w + static_cast<int64_t>(e) * hidden);
    for (int v = threadIdx.x; v < vecs; v += kXsRouteThreads) rows[r * vecs + v] = __ldg(w + v);
  }
}

// The router's 256 threads only: named barrier 2.
__device__ __forceinline__ void xs_route_sync() {
  asm volatile("bar.sync 2, %0;" ::"n"(kXsRouteThreads) : "memory");
}

// After the wait, every consumer thread: xn = bf16(RMSNorm(residual + delta)) into act (block 0
// also to norm.out), this block's logits' warp partials into rs.red; for FP8 experts xn is then
// staged as f16 in place. Returns the experts' x scale (xs_stage_x's).
template <bool kFp8>
__device__ __forceinline__ float xs_route_norm(const ExpertRouteParams& rt, uint8_t* act, XsRouteSmem& rs) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
  const int hidden = rt.lg.hidden, vecs = hidden / 8;
  const rs::cuda::RouterNormIn& norm = rt.norm;
  if (tid < kXsRouteThreads) {
    float xs[kXsRouteMaxVecs][8];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kXsRouteMaxVecs; ++k) {
      const int v = tid + k * kXsRouteThreads;
      if (v < vecs) rs::cuda::router_residual_add(norm, 0, v, xs[k], ss);
    }
    ss = rs::cuda::warp_sum(ss);  // block_sum over the 256 threads, warps added in order
    if (lane == 0) rs.scratch[warp] = ss;
    xs_route_sync();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < rs::cuda::kRouterWarps; ++w) total += rs.scratch[w];
    const float inv = rsqrtf(total / hidden + norm.eps);
    const uint4* rows = reinterpret_cast<const uint4*>(act + static_cast<size_t>(hidden) * 2);
    float acc[kXsRouteMaxRows];
#pragma unroll
    for (int r = 0; r < kXsRouteMaxRows; ++r) acc[r] = 0.f;
#pragma unroll
    for (int k = 0; k < kXsRouteMaxVecs; ++k) {
      const int v = tid + k * kXsRouteThreads;
      if (v >= vecs) break;
      float g[8], y[8];
      rs::cuda::router_norm_weight(norm, v, g);
      const uint4 yb = rs::cuda::router_norm_round(xs[k], inv, g, y);
      reinterpret_cast<uint4*>(act)[v] = yb;
      if (blockIdx.x == 0) reinterpret_cast<uint4*>(norm.out)[v] = yb;
#pragma unroll
      for (int r = 0; r < kXsRouteMaxRows; ++r) {
        if (blockIdx.x + r * gridDim.x >= rt.r.experts) break;
        float wf[8];
        rs::cuda::bf16x8_to_float(rows[r * vecs + v], wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] += wf[j] * y[j];
      }
    }
#pragma unroll
    for (int r = 0; r < kXsRouteMaxRows; ++r) {
      const float s = rs::cuda::warp_sum(acc[r]);
      if (lane == 0) rs.red[warp][r] = s;
    }
    pdl_probe_mark(kProbeStep1);
  }
  xs_consumer_sync();  // xn in act, the partials in rs.red; rs.scratch free again
  if constexpr (!kFp8) {
    return 1.f;
  } else {
    uint4* xv = reinterpret_cast<uint4*>(act);
    float m = 0.f;
    for (int v = tid; v < vecs; v += kXsConsumerWarps * 32) m = bf16x8_amax(xv[v], m);
    m = rs::cuda::warp_max(m);
    if (lane == 0) rs.scratch[warp] = m;
    xs_consumer_sync();
    float amax = 0.f;
#pragma unroll
    for (int w = 0; w < kXsConsumerWarps; ++w) amax = fmaxf(amax, rs.scratch[w]);
    const int e = f16_stage_exponent(amax);
    for (int v = tid; v < vecs; v += kXsConsumerWarps * 32) xv[v] = bf16x8_to_f16_scaled(xv[v], e);  // in place, each its own
    xs_consumer_sync();
    return ldexpf(1.f, e);
  }
}

// Warp 0, after xs_route_norm: this block's logits to L2, the grid-wide count, the selection
// (every block the same), the routing and the routed slots' matrices into shared memory. sync:
// two zeroed words, left zeroed (grid_count.cuh).
__device__ __forceinline__ void xs_route_select(const ExpertGemvParams& p, const ExpertRouteParams& rt, uint8_t* act,
                                                XsRouteSmem& rs, SmallRouting& sr, int parts,
                                                rs::cuda::DeviceMatrix (*mats)[3], unsigned* sync) {
  const int lane = threadIdx.x & 31;
  if (lane == 0) {
    for (int r = 0; r < kXsRouteMaxRows; ++r) {
      const int e = blockIdx.x + r * gridDim.x;
      if (e >= rt.r.experts) break;
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < rs::cuda::kRouterWarps; ++w) s += rs.red[w][r];
      rt.lg.logits[e] = s;
    }
    grid_count_arrive(sync);  // release: this thread's logits stores come first
    grid_count_wait(sync, gridDim.x, "expert launch's router, every block's logits", -1);
    // (the departure, a returning atomic, comes after the routing: xs_route_depart)
    pdl_probe_mark(kProbeStep2);
  }
  __syncwarp();  // the acquire above orders the warp's logits loads after every block's stores
  rs::cuda::MoeRouterParams r = rt.r;
  r.n = 1;
  r.topk_ids = rs.ids;
  r.topk_weights = rs.weights;
  r.margins = blockIdx.x == 0 ? rt.r.margins : nullptr;
  const int hidden = rt.lg.hidden;
  float* scratch = reinterpret_cast<float*>(
      act + xs_route_scratch_offset(hidden, xs_route_rows(rt.r.experts, gridDim.x)));
  rs::cuda::moe_router_select_warp<false>(r, 0, rt.lg.logits, scratch);
  pdl_probe_mark(kProbeStep3);
  if (blockIdx.x == 0 && lane < rt.r.top_k) {
    rt.r.topk_ids[lane] = rs.ids[lane];
    rt.r.topk_weights[lane] = rs.weights[lane];
  }
  small_routing<true>(p, sr, rs.ids, rs.weights);
  const int ns = p.experts.n_shared;
  xs_slot_matrices<true>(p, sr, ns, ns + sr.n_active, parts, mats);
}

// Warp 0's lane 0, once the routing is handed over: counts this block out of the logits' wait
// (the last resets the two words). Its round trip is off the routing's path.
__device__ __forceinline__ void xs_route_depart(unsigned* sync) {
  if ((threadIdx.x & 31) == 0) grid_count_depart(sync);
}

// Warp 0 and the producer warp: the routing is in shared memory (named barrier 3).
__device__ __forceinline__ void xs_route_handoff() { asm volatile("bar.sync 3, 64;" ::: "memory"); }

}  // namespace rs::kern
