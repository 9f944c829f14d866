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
};

}  // namespace rs::kern
