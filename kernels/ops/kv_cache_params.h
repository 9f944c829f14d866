#pragma once
// The paged latent KV cache: per layer [num_slots, kv_lora_rank + rope_dim] bf16, slot =
// block * block_size + offset, row = normalised latent | roped shared key.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops/rope_params.h"

namespace rs::cuda {

// kv_a = [latent (kv_lora) | k_pe (rope)] per token (the kv_a_proj_with_mqa output). Writes
// rmsnorm(latent) * w | rope(k_pe) into the token's cache slot.
struct KvWriteParams {
  const __nv_bfloat16* kv_a = nullptr;
  int kv_a_stride = 0;
  const float* norm_weight = nullptr;  // kv_a_layernorm [kv_lora]
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [n]
  const int32_t* slots = nullptr;      // [n]
  __nv_bfloat16* cache = nullptr;      // this layer's [num_slots, kv_lora + rope]
  int n = 0, kv_lora = 0;
  RopeSpec rope;
};
void launch_kv_write(const KvWriteParams& p, cudaStream_t stream);

// Gathers positions [0, len) of one sequence into dense rows: the latents (the kv_b_proj GEMM's
// input) and the shared rope keys, for the expanded prefill.
struct KvGatherParams {
  const __nv_bfloat16* cache = nullptr;
  const int32_t* block_table = nullptr;  // device, the sequence's blocks
  int block_size = 0, len = 0, kv_lora = 0, rope = 0;
  __nv_bfloat16* latent = nullptr;       // [len, kv_lora]
  __nv_bfloat16* pe = nullptr;           // [len, rope]
};
void launch_kv_gather(const KvGatherParams& p, cudaStream_t stream);

// Copies whole blocks (all layers) src -> dst, for copy-on-write of shared prefix blocks.
struct KvCopyParams {
  __nv_bfloat16* cache = nullptr;  // base of all layers
  const int32_t* pairs = nullptr;  // [count, 2] (src, dst)
  int count = 0, layers = 0;
  int64_t layer_stride = 0;        // elements per layer
  int64_t block_elems = 0;         // block_size * kv_dim
};
void launch_kv_copy(const KvCopyParams& p, cudaStream_t stream);

}  // namespace rs::cuda
