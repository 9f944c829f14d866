#pragma once
// MLA decode attention in the absorbed form: every head's query lives in latent space
// [kv_lora | rope], the paged cache row is both key (all kv_dim columns) and value (the first
// kv_lora columns), shared by all heads (MQA). Split over the KV length (flash-decoding): each
// split writes a normalised partial output and its log-sum-exp; a combine pass merges them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops/kv_cache_params.h"

namespace rs::cuda {

struct MlaDecodeParams {
  const __nv_bfloat16* q = nullptr;      // [rows, heads, kv_dim]
  const int32_t* q_rows = nullptr;       // [batch] row of q (and of out) for each sequence
  const __nv_bfloat16* cache = nullptr;  // this layer's [slots, kv_dim]; under PDL the previous
                                         // kernel may write only each sequence's newest row
  const int32_t* block_tables = nullptr; // [batch, bt_stride]
  int bt_stride = 0, block_size = 0;
  const int32_t* seq_lens = nullptr;     // [batch] tokens attended, the current one included
  float* part_o = nullptr;               // [batch, heads, splits, kv_lora]
  float* part_lse = nullptr;             // [batch, heads, splits], log2 units
  __nv_bfloat16* out = nullptr;          // [rows, heads, kv_lora]; nullptr: no combine pass, the
                                         // partials go to launch_mla_v_up (MlaVUpParams::part_o)
  int batch = 0, heads = 0, splits = 1, kv_lora = 0, kv_dim = 0;
  float scale = 1.0f;                    // softmax scale (1/sqrt(qk_head_dim) * mscale^2)
};
// Most KV splits per sequence the combine kernel merges.
constexpr int kMlaDecodeMaxSplits = 64;
size_t mla_decode_smem_bytes(int kv_lora, int kv_dim);
// Runs the split kernel, and the combine kernel when `out` is set.
// new_kv (pure decode steps: sequence b is token b of its kv_a; p.splits >= 2): each sequence's
// newest row (position seq_len - 1) is not read from the cache but formed by the split kernel
// from the kv_a projection, kv_write_token's arithmetic, in a split of its own, split 0 (its
// block writes it to the cache and scores it: a one-row partial), while the other splits' tiles
// hold the older rows (empty splits stay the trailing ones, as the merges expect). The step then
// needs no cache-write kernel before this one (the fused q/kv + absorb launch, qkv_absorb.cuh,
// has none). The same cache bits as kv_write_token's own 256-thread blocks where the split kernel
// runs 8 warps (batch 1 and 2). A kernel instantiation of its own takes it, so the others keep
// their parameters, code and registers.
void launch_mla_decode(const MlaDecodeParams& p, cudaStream_t stream, const KvWriteParams* new_kv = nullptr);

}  // namespace rs::cuda
