#pragma once
// Warp-level reductions. Butterfly (xor) shuffles leave the result in every lane, so any lane
// can write it without another broadcast.
namespace rs::kern {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

}  // namespace rs::kern
