#pragma once
// Deterministic dummy weights, computable on the host or on a GPU from (seed, tensor, index)
// alone, so a GPU can initialise hundreds of GB in place and the CPU can reproduce any element.
#include <cmath>
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

// How a tensor's dummy values are scaled. The codes equal rs::TensorInfo::Init (src/model/tensor.h).
enum InitCode : uint8_t { kNormal = 0, kOnes = 1, kZero = 2, kEmbedding = 3, kRouterGate = 4 };

// Element i of a tensor (name hash `tensor_id`, fan_in from its TensorInfo) is
//   Ones: 1 exactly;  Zero: 0 exactly;
//   otherwise uniform_pm1(seed, tensor_id, i) * amplitude, in fp32, where amplitude is
//     Normal, RouterGate: sqrtf(3 / fan_in)  (std 1/sqrt(fan_in): each projection keeps its
//                         input's scale, so 61 residual layers grow the stream like sqrt(61));
//     Embedding:          1.
// A BF16/F16/F32 tensor stores that value rounded to nearest even.
RS_HD float amplitude(uint8_t init, int64_t fan_in) {
  if (init == kEmbedding) return 1.0f;
  if (init == kOnes || init == kZero) return 1.0f;
  return sqrtf(3.0f / static_cast<float>(fan_in > 0 ? fan_in : 1));
}
RS_HD float value(uint64_t seed, uint64_t tensor_id, uint64_t index, uint8_t init, int64_t fan_in) {
  if (init == kOnes) return 1.0f;
  if (init == kZero) return 0.0f;
  return uniform_pm1(seed, tensor_id, index) * amplitude(init, fan_in);
}

// FP8 e4m3 block-scaled tensors (128x128 blocks, partial edge blocks included): every block's
// fp32 scale_inv is amplitude / 448 (|value| <= amplitude, so nothing saturates and no block
// reduction is needed), and the stored byte is e4m3(value / scale_inv) rounded to nearest even
// with saturation (CUDA __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)). The fp32 division is
// IEEE-exact on both sides (no fast-math), so host and GPU produce identical bytes.
constexpr float kFp8Max = 448.0f;
RS_HD float fp8_block_scale_inv(uint8_t init, int64_t fan_in) {
  return amplitude(init, fan_in) / kFp8Max;
}

}  // namespace rs::dummy
