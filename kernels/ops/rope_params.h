#pragma once
// Rotary embedding with YaRN. Frequencies and the attention factor come from the host's
// rs::make_rope_table (src/model/rope.h), so the GPU and the CPU reference share one definition.
// interleave: pairs (x[2i], x[2i+1]) as DeepSeek trains them; otherwise (x[i], x[i + d/2]).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rs::cuda {

struct RopeSpec {
  const float* inv_freq = nullptr;  // [rope_dim / 2], device
  float mscale = 1.0f;              // YaRN attention factor on cos and sin
  int rope_dim = 0;
  bool interleave = true;
};

// q[n, heads, head_dim]: rotate the last rope_dim elements of every head in place.
struct RopeQParams {
  __nv_bfloat16* q = nullptr;
  const int32_t* positions = nullptr;  // [n]
  int n = 0, heads = 0, head_dim = 0;  // head_dim = nope + rope
  RopeSpec rope;
};
void launch_rope_q(const RopeQParams& p, cudaStream_t stream);

}  // namespace rs::cuda
