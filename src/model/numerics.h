#pragma once
// Scalar conversions between the stored weight formats and fp32 (host side).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rs {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN kept quiet: the rounding torch uses for .to(bfloat16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// e4m3fn: bias 7, no infinities, 0x7f/0xff are NaN, max finite 448.
inline float e4m3_to_f32(uint8_t b) {
  uint32_t sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 0x7;
  float v;
  if (exp == 15 && man == 7) v = NAN;
  else if (exp == 0) v = std::ldexp(static_cast<float>(man), -9);
  else v = std::ldexp(static_cast<float>(man | 0x8), static_cast<int>(exp) - 10);
  return sign ? -v : v;
}

// Round to nearest even with saturation to +-448 (CUDA's __NV_SATFINITE conversion). Bit-level:
// dummy FP8 weights convert billions of values.
inline uint8_t f32_to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 31) << 7);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return 0x7f;              // NaN
  if (u >= 0x43e00000u) return sign | 0x7e;      // >= 448: saturate
  if (u < 0x3c800000u) {                         // < 2^-6: e4m3 subnormal, steps of 2^-9
    float a;
    std::memcpy(&a, &u, 4);
    int m = static_cast<int>(std::nearbyint(a * 512.0f));  // exact scaling; ties to even
    return sign | static_cast<uint8_t>(m);       // m == 8 encodes 2^-6, the smallest normal
  }
  int exp = static_cast<int>(u >> 23) - 127 + 7;
  uint32_t man = (u >> 20) & 0x7, rest = u & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (man & 1))) ++man;
  if (man == 8) {
    man = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && man == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((exp << 3) | man);
}

}  // namespace rs
