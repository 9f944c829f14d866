#pragma once
// Launch geometry of the streaming expert kernels (kernels/ops/expert_stream.cuh, gate_up, and
// expert_stream_ffn.cuh, gate_up + down), computed on the host (moe_decode_kernels.cu). Plain C++.
#include <cstdint>

namespace rs::kern {

constexpr int kXsConsumerWarps = 16;
constexpr int kXsThreads = (kXsConsumerWarps + 1) * 32;  // + one producer warp
constexpr int kXsStages = 4;

struct ExpertStreamGeom {
  int slots = 0;             // n_shared + top_k (one token)
  int rows_per_stage = 0;    // intermediate rows of one slot
  uint32_t stage_bytes = 0;  // one ring slot
  uint32_t act_offset = 0;   // dynamic shared memory: the ring at 0, the staged x here
  uint32_t smem_bytes = 0;   // the launch's dynamic shared memory
  int prewait_stages = 0;    // stages copied before griddepcontrol.wait, at most
  // The whole FFN in one launch (expert_stream_ffn.cuh): down rows of one slot a stage; the
  // shared memory at act_offset holds x, then every slot's h.
  int down_rows_per_stage = 0;
  // The router in the launch: the consumer warps other than warp 0 start on the shared stages
  // while warp 0 finds the routing (on unless RS_XS_ROUTE_OVERLAP=0; off, they wait for it).
  int route_overlap = 0;
  // Once the ring's first stages are out, at most this many stages in flight (BulkRing::acquire's
  // in_flight; 0: the whole ring), so the SM's own dependent loads (the grid-wide wait's counter,
  // h) queue behind fewer bytes.
  // The whole FFN takes 2 (H200, V2-Lite bf16, 2026-11-30: 2.035-2.055 against 2.063-2.066 ms a
  // step, its advance 37.5 against 38.1 us a layer; 1 starved the ring, 2.17-2.19 ms; the FP8
  // gate_up launch level with 2, so 0 there); RS_XS_INFLIGHT overrides.
  int inflight_stages = 0;
  // The last late_blocks blocks of the grid take late_quarters / 4 of a block's gate_up rows
  // (xs_rows); see kXsLateBlocks.
  int late_blocks = 0, late_quarters = 4;
  // The whole FFN's grid-wide wait on a counter copy homed on each L2 side (l2_sides.h), each
  // block polling its own side's (H200 wait probe: the far half passed the single counter's wait
  // ~0.8 us after the near half); null: the one counter.
  const uint8_t* sm_side = nullptr;
  unsigned* sided_sync[2] = {nullptr, nullptr};
  // One token's x and routing read from the copies on the block's own L2 side, written by the
  // cluster router (l2_sides.h); null: from p.x and p.topk_ids / p.topk_weights.
  const void* x_side[2] = {nullptr, nullptr};
  const int32_t* ids_side[2] = {nullptr, nullptr};
  const float* weights_side[2] = {nullptr, nullptr};
};

// The whole FFN behind the cluster router's launch: PDL launches its grid while the router's
// 8 blocks still hold 8 SMs, whose registers and shared memory leave no room for an FFN block.
// Blocks are dispatched in index order, so the grid's last 8 start on those SMs only as the router
// ends (H200 wait probe: ~3 us after the others, which by then have copied their first stages),
// and every block waits for their h at the grid-wide wait. They take half a share of the gate_up
// rows (H200, V2-Lite bf16 b1, two calls of three rounds each: 1.899-1.911 against 1.912-1.932 ms
// a step, and 1.899-1.901 against 1.908; no share at all or a quarter level with a half).
constexpr int kXsLateBlocks = 8;  // = kRouterClusterBlocks (moe_router_cluster.cuh)
constexpr int kXsLateQuarters = 2;

}  // namespace rs::kern
