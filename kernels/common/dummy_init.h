#pragma once
// Deterministic dummy weights, computable on the host or on a GPU from (seed, tensor, index)
// alone, so a GPU can initialise hundreds of GB in place and the CPU can reproduce any element.
#include <cstdint>

#if defined(__CUDACC__)
#define RS_HD __host__ __device__ __forceinline__
#else
#define RS_HD inline
#endif

namespace rs::dummy {

RS_HD uint64_t mix64(uint64_t x) {  // splitmix64 finaliser: a bijection with good avalanche
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27; x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// FNV-1a of the tensor name: a stable per-tensor stream id.
inline uint64_t name_hash(const char* s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ULL;
  return h;
}

// Uniform in [-1, 1).
RS_HD float uniform_pm1(uint64_t seed, uint64_t tensor_id, uint64_t index) {
  uint64_t r = mix64(seed ^ mix64(tensor_id + 0x9e3779b97f4a7c15ULL * (index + 1)));
  return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace rs::dummy
