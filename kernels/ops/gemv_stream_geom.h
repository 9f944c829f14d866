#pragma once
// The weight-streaming GEMV's geometry (gemv_stream.cuh) and its host-side plan, which its own
// launcher and the fused q/kv + absorb launch (qkv_absorb.cuh) share. Plain C++.
#include <cstddef>
#include <cstdint>

#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_launch.h"

namespace rs::kern {

constexpr int kStreamConsumerWarps = 8;
constexpr int kStreamConsumerThreads = kStreamConsumerWarps * 32;  // = the norm's 256 threads
constexpr int kStreamThreads = kStreamConsumerThreads + 32;        // + one producer warp
constexpr int kStreamStages = 4;
constexpr int kStreamPrewaitNormStages = 2;  // copied before the wait: the q/kv launch (norm prologue)
constexpr int kStreamPrewaitStages = 1;      // the others (o_proj, dense MLP, lm_head)

// Per-launch geometry, computed on the host (gemv_stream_plan).
struct GemvStreamGeom {
  int64_t total_rows = 0;      // rows of all jobs (DenseGemvParams::group_end holds cumulative rows)
  int rows_per_stage = 0;      // multiple of kStreamConsumerWarps
  int pieces = 1;              // column pieces a row is cut into (1: whole rows in a stage)
  uint32_t row_bytes = 0;      // bytes of one weight row (multiple of 16)
  uint32_t piece_bytes = 0;    // bytes of one row slot of a stage (multiple of 16; row_bytes if pieces == 1)
  uint32_t stage_bytes = 0;    // rows_per_stage * piece_bytes
  uint32_t xs_offset = 0;      // dynamic shared memory: ring at 0, x at xs_offset
  uint32_t prewait = kStreamStages;  // stages copied before griddepcontrol.wait (launcher)
};

// Largest dynamic shared memory a launch may ask for (ring + x); the attribute is set to it once
// per instantiation. An H200 SM has 228 KB, a block may take 227 KB.
constexpr int kStreamMaxSmem = 200 * 1024;

// Shape checks, the norm prologue's counter (p.norm_counter) and group_end, and the geometry and
// dynamic shared memory of the streaming GEMV for p: false where it does not apply
// (linear_kernels.cu).
bool gemv_stream_plan(DenseGemvParams& p, GemvStreamGeom& g, size_t& smem);

}  // namespace rs::kern
