#pragma once
// MLA prefill attention in the expanded form: per-head keys [k_nope | k_pe] (qk_head_dim) and
// values (v_head_dim) come from kv_b_proj applied to the cached latents of positions [0, start+T),
// so a chunk whose prefix is already cached attends to it without recomputing the prefix.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace rs::cuda {

struct MlaPrefillParams {
  const __nv_bfloat16* q = nullptr;    // [T, heads, nope + rope], rope part rotated
  const __nv_bfloat16* kv = nullptr;   // [L, heads, nope + v] = kv_b_proj(latent)
  const __nv_bfloat16* kpe = nullptr;  // [L, rope] roped shared keys, gathered from the cache
  __nv_bfloat16* out = nullptr;        // [T, heads, v]
  int T = 0, start = 0;                // query i sits at position start + i; L = start + T
  int heads = 0, nope = 0, rope = 0, vdim = 0;
  float scale = 1.0f;
};
// The kernel is compiled for fixed head dims (its fragments live in registers): (nope, rope, v) =
// (128, 64, 128) (DeepSeek-V2/V3) and (32, 16, 32) (the tiny fixture models).
bool mla_prefill_supported(int nope, int rope, int vdim);
// Queues the kernel; rs::Error for head dims without a compiled kernel or a failed launch.
// (Defined in src/backend/cuda/mla_prefill_launch.cpp: rs::Error needs C++20, the .cu files
// are compiled as C++17.)
void launch_mla_prefill(const MlaPrefillParams& p, cudaStream_t stream);
// The launch itself (mla_prefill_kernels.cu): cudaErrorInvalidValue for unsupported head dims.
cudaError_t mla_prefill_enqueue(const MlaPrefillParams& p, cudaStream_t stream);

}  // namespace rs::cuda
