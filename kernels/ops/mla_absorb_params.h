#pragma once
// MLA's weight absorption for decode. kv_b_proj is [heads * (nope + v), kv_lora] (HF layout); per
// head its first `nope` rows are W_UK and the next `v` rows W_UV. Decode attends over the latent
// cache directly, so the query is moved into latent space (q_nope . W_UK) and the latent output
// is moved back to value space through W_UV.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/rope_params.h"

namespace rs::cuda {

// Block geometry of the absorb and W_UV kernels, which their launchers and the decode
// megakernel's recorder (src/backend/cuda/mega_program.cpp) size their grids from.
constexpr int kAbsorbTokens = 8;  // queries sharing one pass over a head's W_UK columns
constexpr int kAbsorbCols = 64;   // latent columns per block: 8 lanes x 8 columns (16-byte loads)
constexpr int kVUpWarps = 8;

struct MlaAbsorbQParams {
  const __nv_bfloat16* q = nullptr;     // [n, heads, nope + rope]
  const __nv_bfloat16* kv_b = nullptr;  // bf16 [heads * (nope + v), kv_lora]
  __nv_bfloat16* out = nullptr;         // [n, heads, kv_lora + rope]
  int n = 0, heads = 0, nope = 0, rope = 0, vdim = 0, kv_lora = 0;
  // positions == nullptr: q's rope part is already rotated and passes through. Otherwise it is
  // rotated on the way (pure decode steps skip the separate rope_q kernel), with the same bf16
  // rounding as rope_q, so both paths give the same bits.
  const int32_t* positions = nullptr;  // [n]
  RopeSpec rotate;
};
void launch_mla_absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream);
// The absorb blocks and the cache write's per-token blocks in one launch (they are independent:
// both read only the q / kv_a projections); pure decode steps use it to save a kernel per layer.
void launch_mla_absorb_q_kv_write(const MlaAbsorbQParams& a, const KvWriteParams& kw, cudaStream_t stream);

struct MlaVUpParams {
  const __nv_bfloat16* o_latent = nullptr;  // [n, heads, kv_lora] (read when part_o is null)
  const __nv_bfloat16* kv_b = nullptr;      // bf16 [heads * (nope + v), kv_lora]
  __nv_bfloat16* out = nullptr;             // [n, heads * v]
  int n = 0, heads = 0, nope = 0, vdim = 0, kv_lora = 0;
  // Decode attention's split partials (MlaDecodeParams::part_o / part_lse, launched with
  // out == nullptr): merged here on the way in, in fp32, instead of by a combine kernel.
  const float* part_o = nullptr;    // [n, heads, splits, kv_lora]
  const float* part_lse = nullptr;  // [n, heads, splits], log2 units
  int splits = 0;
  int rows_per_warp = 1;            // set by launch_mla_v_up from the grid size
};
void launch_mla_v_up(const MlaVUpParams& p, cudaStream_t stream);
// Whether the decode step lets launch_mla_v_up merge the attention splits (part_o) for n decode
// rows: only while they fit one token chunk. With more, every block re-reads the partials of its
// 8 tokens for its slice of W_UV rows, and the separate combine kernel's single pass was faster
// (H200, batch 64: 13.5 vs 14.8 ms a step).
inline bool mla_v_up_merges_splits(int n) { return n <= 8; }

// Blocks of the decode step's fused absorb + KV-write launch: one per token's cache row, then
// heads x latent column chunks x token chunks.
inline int mla_absorb_q_kv_write_blocks(const MlaAbsorbQParams& a, const KvWriteParams& kw) {
  const int absorb = a.n > 0 ? a.heads * (a.kv_lora / kAbsorbCols) * ((a.n + kAbsorbTokens - 1) / kAbsorbTokens) : 0;
  return absorb + std::max(kw.n, 0);
}
// W_UV rows per warp on a GPU running `blocks_per_wave` blocks at once: merging the splits, two
// when one row per warp would need more than about one wave (batch 1: 128 blocks instead of 256),
// so each head's partials (up to 64 KB at batch 1) are read by half as many blocks; otherwise
// one (more, smaller blocks in flight).
inline int mla_v_up_rows_per_warp(const MlaVUpParams& p, int blocks_per_wave) {
  const int chunks = (p.n + kAbsorbTokens - 1) / kAbsorbTokens;
  const int64_t blocks1 = int64_t(p.heads) * ((p.vdim + kVUpWarps - 1) / kVUpWarps) * chunks;
  return p.part_o && blocks1 > blocks_per_wave + blocks_per_wave / 4 ? 2 : 1;
}

}  // namespace rs::cuda
