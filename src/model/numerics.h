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

// Round to nearest even with saturation to +-448 (CUDA's __NV_SATFINITE conversion).
inline uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Candidates are k * 2^(e-3) for the binade of a; subnormals share the 2^-9 step.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int step_exp = std::max(e - 1 - 3, -9);
  float step = std::ldexp(1.0f, step_exp);
  float q = a / step;
  float r = std::nearbyint(q);  // default rounding mode: nearest even
  float v = r * step;
  // Re-encode v exactly.
  if (v == 0.0f) return sign;
  int ve;
  float vm = std::frexp(v, &ve);  // v = vm * 2^ve
  int exp = ve - 1 + 7;
  if (exp <= 0) {  // subnormal: v = man * 2^-9
    return sign | static_cast<uint8_t>(std::lround(v / std::ldexp(1.0f, -9)));
  }
  int man = static_cast<int>(std::lround((vm * 2.0f - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>((exp << 3) | man);
}

}  // namespace rs
