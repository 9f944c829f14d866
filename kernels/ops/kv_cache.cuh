#pragma once
#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"

namespace rs::cuda {

__device__ __forceinline__ void kv_write_token(const KvWriteParams& p, int t) {
  __shared__ float scratch[32];
  const __nv_bfloat16* in = p.kv_a + static_cast<int64_t>(t) * p.kv_a_stride;
  __nv_bfloat16* out = p.cache + static_cast<int64_t>(p.slots[t]) * (p.kv_lora + p.rope.rope_dim);
  rmsnorm_bf16_row(in, out, p.norm_weight, p.kv_lora, p.eps, scratch);
  const int half = p.rope.rope_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    rope_apply_pair(p.rope, p.positions[t], i, in + p.kv_lora, out + p.kv_lora);
}

__device__ __forceinline__ void kv_gather_row(const KvGatherParams& p, int pos) {
  const int kv_dim = p.kv_lora + p.rope;
  const int64_t slot = static_cast<int64_t>(p.block_table[pos / p.block_size]) * p.block_size +
                       pos % p.block_size;
  const uint4* src = reinterpret_cast<const uint4*>(p.cache + slot * kv_dim);
  uint4* lat = reinterpret_cast<uint4*>(p.latent + static_cast<int64_t>(pos) * p.kv_lora);
  uint4* pe = reinterpret_cast<uint4*>(p.pe + static_cast<int64_t>(pos) * p.rope);
  for (int i = threadIdx.x; i < kv_dim / 8; i += blockDim.x) {
    if (i < p.kv_lora / 8) lat[i] = src[i];
    else pe[i - p.kv_lora / 8] = src[i];
  }
}

__device__ __forceinline__ void kv_copy_block(const KvCopyParams& p, int pair, int layer) {
  const int src = p.pairs[2 * pair], dst = p.pairs[2 * pair + 1];
  const uint4* s = reinterpret_cast<const uint4*>(p.cache + layer * p.layer_stride + src * p.block_elems);
  uint4* d = reinterpret_cast<uint4*>(p.cache + layer * p.layer_stride + dst * p.block_elems);
  for (int64_t i = threadIdx.x; i < p.block_elems / 8; i += blockDim.x) d[i] = s[i];
}

}  // namespace rs::cuda
