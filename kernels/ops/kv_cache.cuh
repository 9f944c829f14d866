#pragma once
#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"

namespace rs::cuda {

// A cache row from its kv_a row `in` at position pos into `out`, by the whole block (its bits
// depend on blockDim through the norm's block sum); the same row also into `copy` (shared
// memory) when given. p's kv_a, slots, positions and cache are not read: the decode attention
// forms a sequence's newest row this way with p's norm weight and rope table in shared memory
// (launch_mla_decode's new_kv).
// The rope part's first pair of each thread is loaded with the norm's inputs, not after its block
// sum: one trip to L2 on the row's path, not two.
__device__ __forceinline__ void kv_form_row(const KvWriteParams& p, const __nv_bfloat16* in, __nv_bfloat16* out, int pos,
                                            __nv_bfloat16* copy = nullptr) {
  __shared__ float scratch[32];
  const int half = p.rope.rope_dim / 2, i0 = threadIdx.x;
  const __nv_bfloat16* pe = in + p.kv_lora;
  const __nv_bfloat16 xa0 = i0 < half ? pe[rope_a(p.rope, i0)] : __nv_bfloat16();
  const __nv_bfloat16 xb0 = i0 < half ? pe[rope_b(p.rope, i0)] : __nv_bfloat16();
  rmsnorm_bf16_row(in, out, p.norm_weight, p.kv_lora, p.eps, scratch, copy);
  for (int i = i0; i < half; i += blockDim.x) {
    const int a = rope_a(p.rope, i), b = rope_b(p.rope, i);
    float ya, yb;
    rope_pair(p.rope, pos, i, __bfloat162float(i == i0 ? xa0 : pe[a]), __bfloat162float(i == i0 ? xb0 : pe[b]), &ya, &yb);
    const __nv_bfloat16 va = __float2bfloat16(ya), vb = __float2bfloat16(yb);
    out[p.kv_lora + a] = va;
    out[p.kv_lora + b] = vb;
    if (copy) {
      copy[p.kv_lora + a] = va;
      copy[p.kv_lora + b] = vb;
    }
  }
}
__device__ __forceinline__ void kv_write_token(const KvWriteParams& p, int t) {
  kv_form_row(p, p.kv_a + static_cast<int64_t>(t) * p.kv_a_stride,
              p.cache + static_cast<int64_t>(p.slots[t]) * (p.kv_lora + p.rope.rope_dim), p.positions[t]);
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
