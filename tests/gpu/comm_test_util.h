#pragma once
// Shared by the gpu.comm tests: GPU count and skip message, random inputs in bf16/fp32 bits,
// the fp64 reference sum, and per-element tolerances.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/dtype.h"

namespace rs::comm_test {

// Logical ranks sharing a GPU each launch on their own stream. If two of those streams share one
// hardware queue (CUDA_DEVICE_MAX_CONNECTIONS, default 8), a rank's second kernel (PDL-launched,
// waiting for its first) can sit in front of a peer rank's collective, which its first kernel
// waits for: a deadlock that only the spin-wait bound ends. More queues make that unlikely; set
// before any CUDA call (static initialisation), unless the environment already says.
inline const bool kManyHardwareQueues = [] { return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0; }();

inline int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// The comm tests need two GPUs (peer access over NVLink); say so plainly when skipping.
inline bool have_two_gpus() {
  const int n = gpu_count();
  if (n < 2) {
    MESSAGE("skipped: gpu.comm tests need >= 2 CUDA GPUs with peer access (found " << n << ")");
    return false;
  }
  return true;
}

// Usable on rank threads: throws (run_rank_threads rethrows on the test's thread) rather than
// using doctest assertions from several threads at once.
inline void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}
#define RS_CUDA_OK(expr) ::rs::comm_test::cuda_ok((expr), #expr)

inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {  // round to nearest even
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// Host copy of a device array in its element type.
struct HostArray {
  DType type = DType::BF16;
  std::vector<unsigned char> bytes;
  size_t count() const { return bytes.size() / dtype_size(type); }
  float get(size_t i) const {
    if (type == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      return bf16_bits_to_float(h);
    }
    float f;
    std::memcpy(&f, &bytes[4 * i], 4);
    return f;
  }
  uint32_t bits(size_t i) const {
    if (type == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      return h;
    }
    uint32_t b;
    std::memcpy(&b, &bytes[4 * i], 4);
    return b;
  }
  void set(size_t i, float f) {
    if (type == DType::BF16) {
      const uint16_t h = float_to_bf16_bits(f);
      std::memcpy(&bytes[2 * i], &h, 2);
    } else {
      std::memcpy(&bytes[4 * i], &f, 4);
    }
  }
  void set_bits(size_t i, uint32_t b) {
    if (type == DType::BF16) {
      const uint16_t h = static_cast<uint16_t>(b);
      std::memcpy(&bytes[2 * i], &h, 2);
    } else {
      std::memcpy(&bytes[4 * i], &b, 4);
    }
  }
};

inline HostArray random_array(size_t count, DType type, uint64_t seed, float scale = 1.0f) {
  HostArray a;
  a.type = type;
  a.bytes.resize(count * dtype_size(type));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
  for (size_t i = 0; i < count; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    a.set(i, scale * (static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f));
  }
  return a;
}

inline HostArray poison_array(size_t count, DType type) {  // all-ones bits: NaN in both types
  HostArray a;
  a.type = type;
  a.bytes.assign(count * dtype_size(type), 0xff);
  return a;
}

// Unit roundoff of the element type, and of the fp32 accumulator.
inline double unit_roundoff(DType t) { return t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24); }
inline double fp32_roundoff() { return std::ldexp(1.0, -24); }

// Bound on |computed - exact| for an fp32 sum of n terms rounded to the element type.
inline double sum_tolerance(DType t, double exact, double abs_sum, int n) {
  return unit_roundoff(t) * std::fabs(exact) + n * fp32_roundoff() * abs_sum + 1e-30;
}

struct DeviceArray {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceArray() = default;
  explicit DeviceArray(size_t b) : bytes(b) { RS_CUDA_OK(cudaMalloc(&ptr, b ? b : 16)); }
  ~DeviceArray() { if (ptr) cudaFree(ptr); }
  DeviceArray(DeviceArray&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  DeviceArray(const DeviceArray&) = delete;
  void upload(const HostArray& h) { RS_CUDA_OK(cudaMemcpy(ptr, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice)); }
  HostArray download(DType t) const {
    HostArray h;
    h.type = t;
    h.bytes.resize(bytes);
    RS_CUDA_OK(cudaMemcpy(h.bytes.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return h;
  }
};

}  // namespace rs::comm_test
