#pragma once
// Launch geometry of the streaming expert kernels (kernels/ops/expert_stream.cuh), computed on
// the host (moe_decode_kernels.cu). Plain C++.
#include <cstdint>

namespace rs::kern {

constexpr int kXsConsumerWarps = 16;
constexpr int kXsDownSlotWarps = 8;  // down: consumer warps of one row group (one slot each)
constexpr int kXsMaxBlockRows = 64;  // down: hidden rows a block owns, at most
constexpr int kXsThreads = (kXsConsumerWarps + 1) * 32;  // + one producer warp
// Ring stages: gate_up's stages are whole gate/up row pairs (8 KB each in bf16 at V2-Lite's
// 2048), down's one hidden row of every slot (22.5 KB in bf16 at 8 slots x 1408); eight smaller
// stages let down's ring fill the same shared memory.
constexpr int kXsGateUpStages = 4;
constexpr int kXsDownStages = 8;

struct ExpertStreamGeom {
  int slots = 0;             // n_shared + top_k (one token)
  int rows_per_stage = 0;    // gate_up: intermediate rows of one slot; down: hidden rows of every slot
  uint32_t stage_bytes = 0;  // one ring slot
  uint32_t act_offset = 0;   // dynamic shared memory: the ring at 0, the staged activations here
  uint32_t smem_bytes = 0;   // the launch's dynamic shared memory
};

}  // namespace rs::kern
