#pragma once
// MLA's weight absorption for decode. kv_b_proj is [heads * (nope + v), kv_lora] (HF layout); per
// head its first `nope` rows are W_UK and the next `v` rows W_UV. Decode attends over the latent
// cache directly, so the query is moved into latent space (q_nope . W_UK) and the latent output
// is moved back to value space through W_UV.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace rs::cuda {

struct MlaAbsorbQParams {
  const __nv_bfloat16* q = nullptr;     // [n, heads, nope + rope], rope part already rotated
  const __nv_bfloat16* kv_b = nullptr;  // bf16 [heads * (nope + v), kv_lora]
  __nv_bfloat16* out = nullptr;         // [n, heads, kv_lora + rope]
  int n = 0, heads = 0, nope = 0, rope = 0, vdim = 0, kv_lora = 0;
};
void launch_mla_absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream);

struct MlaVUpParams {
  const __nv_bfloat16* o_latent = nullptr;  // [n, heads, kv_lora]
  const __nv_bfloat16* kv_b = nullptr;      // bf16 [heads * (nope + v), kv_lora]
  __nv_bfloat16* out = nullptr;             // [n, heads * v]
  int n = 0, heads = 0, nope = 0, vdim = 0, kv_lora = 0;
};
void launch_mla_v_up(const MlaVUpParams& p, cudaStream_t stream);

}  // namespace rs::cuda
