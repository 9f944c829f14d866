#pragma once
// Host-side helpers for the matmul GPU tests: bf16 / e4m3 encodings, random data, device
// buffers, and a relative-error measure (||out - ref|| / ||ref||, NaN counts as failure).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "kernels/ops/linear_params.h"
#include "model/numerics.h"

namespace rs::test {

inline bool have_gpu() { return cuda_device_count(nullptr) > 0; }

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline float bf16_to_float(uint16_t b) { return bf16_to_f32(b); }
inline uint16_t float_to_bf16(float f) { return f32_to_bf16(f); }
inline float e4m3_to_float(uint8_t b) { return e4m3_to_f32(b); }

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  int below(int n) { return int(gen() % uint64_t(n)); }
  // Random non-zero bf16 in +-[0.01, 1).
  std::vector<uint16_t> bf16(size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) {
      float f = uniform(0.01f, 1.f);
      x = float_to_bf16(gen() & 1 ? f : -f);
    }
    return v;
  }
  // Random e4m3 bytes over normal and subnormal values (never NaN 0x7f/0xff), magnitudes up to 2^3.
  std::vector<uint8_t> e4m3(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) {
      const int e = below(11);  // 0 (subnormal) .. 10
      const int m = below(8);
      b = uint8_t(((gen() & 1) << 7) | (e << 3) | m);
      if (b == 0 || b == 0x80) b = 0x38;  // keep inputs non-zero: 1.0
    }
    return v;
  }
};

template <class T>
struct DeviceBuf {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuf(size_t count) : n(count) { cuda_ok(cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc"); }
  DeviceBuf(const std::vector<T>& host) : DeviceBuf(host.size()) { upload(host); }
  ~DeviceBuf() { cudaFree(ptr); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  void upload(const std::vector<T>& host) {
    cuda_ok(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    cuda_ok(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  // NaN bit patterns everywhere, so an element the kernel never wrote fails the comparison.
  void poison() { cuda_ok(cudaMemset(ptr, 0xff, n * sizeof(T)), "poison"); }
};

// bf16 bits to doubles, for the fp64 host references.
inline std::vector<double> to_double(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = bf16_to_float(v[i]);
  return d;
}

// The routed experts' per-expert matrix tables uploaded to the device, and the MoeExperts that
// points at them (valid while this object lives).
struct DeviceExpertTables {
  DeviceBuf<rs::cuda::DeviceMatrix> gate, up, down;
  DeviceExpertTables(const std::vector<rs::cuda::DeviceMatrix>& g, const std::vector<rs::cuda::DeviceMatrix>& u,
                     const std::vector<rs::cuda::DeviceMatrix>& d)
      : gate(g), up(u), down(d) {}
  rs::cuda::MoeExperts experts(int hidden, int inter, rs::cuda::WeightType type) const {
    rs::cuda::MoeExperts e;
    e.num_experts = int(gate.n);
    e.hidden = hidden;
    e.inter = inter;
    e.gate = gate.ptr;
    e.up = up.ptr;
    e.down = down.ptr;
    e.type = type;
    return e;
  }
};

struct ErrorStats {
  double rel = 0;
  size_t nan = 0;
};
inline ErrorStats relative_error(const std::vector<uint16_t>& out_bf16, const std::vector<double>& ref) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = bf16_to_float(out_bf16[i]);
    if (!std::isfinite(o)) {
      ++s.nan;
      continue;
    }
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
  }
  s.rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
  return s;
}

}  // namespace rs::test
