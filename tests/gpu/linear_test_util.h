#pragma once
// Host-side helpers for the matmul GPU tests: bf16 / e4m3 encodings, random data, device
// buffers, test weight matrices and MoE fixtures with their fp64 references, and a relative-error
// measure (||out - ref|| / ||ref||, NaN counts as failure).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

using rs::cuda::DeviceMatrix;
using rs::cuda::WeightType;

// FP8 block-scale range of random test weights.
struct Fp8ScaleRange {
  float lo = 0.001f, hi = 0.01f;
};

// A weight matrix on host (for the reference) and device (for the kernels).
struct TestMatrix {
  WeightType type;
  int64_t rows, cols;
  std::vector<float> values;  // dequantised, row-major
  std::unique_ptr<DeviceBuf<uint16_t>> bf16;
  std::unique_ptr<DeviceBuf<uint8_t>> fp8;
  std::unique_ptr<DeviceBuf<float>> scales;
  DeviceMatrix dm;

  TestMatrix(WeightType t, int64_t r, int64_t c, Rng& rng, Fp8ScaleRange scale = {})
      : type(t), rows(r), cols(c), values(r * c) {
    dm.type = t;
    dm.rows = r;
    dm.cols = c;
    if (t == WeightType::BF16) {
      auto h = rng.bf16(r * c);
      for (size_t i = 0; i < h.size(); ++i) values[i] = bf16_to_float(h[i]);
      bf16 = std::make_unique<DeviceBuf<uint16_t>>(h);
      dm.data = bf16->ptr;
    } else {
      auto h = rng.e4m3(r * c);
      const int64_t sr = (r + 127) / 128, sc = (c + 127) / 128;
      std::vector<float> s(sr * sc);
      for (auto& v : s) v = rng.uniform(scale.lo, scale.hi);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < c; ++k)
          values[i * c + k] = e4m3_to_float(h[i * c + k]) * s[(i / 128) * sc + k / 128];
      fp8 = std::make_unique<DeviceBuf<uint8_t>>(h);
      scales = std::make_unique<DeviceBuf<float>>(s);
      dm.data = fp8->ptr;
      dm.scale_inv = scales->ptr;
    }
  }
  double dot(int64_t row, const std::vector<double>& x, int64_t x0) const {
    double acc = 0;
    for (int64_t k = 0; k < cols; ++k) acc += double(values[row * cols + k]) * x[x0 + k];
    return acc;
  }
};

// Routed experts (and optionally shared ones) with random weights, a random router and the fp64
// reference of the MoE FFN.
struct MoeFixture {
  int E, hidden, inter, top_k;
  WeightType type;
  std::vector<std::unique_ptr<TestMatrix>> gate, up, down;
  std::unique_ptr<DeviceExpertTables> tables;
  rs::cuda::MoeExperts experts;
  // Shared experts as HF stores them: [n_shared * inter, hidden] gate / up, [hidden, n_shared *
  // inter] down. The reference runs them as one dense SwiGLU MLP of that width.
  int n_shared = 0;
  std::unique_ptr<TestMatrix> sgate, sup, sdown;

  MoeFixture(WeightType t, int e, int hid, int in, int k, Rng& rng, int shared = 0, Fp8ScaleRange scale = {})
      : E(e), hidden(hid), inter(in), top_k(k), type(t), n_shared(shared) {
    std::vector<DeviceMatrix> hg, hu, hd;
    for (int i = 0; i < E; ++i) {
      gate.push_back(std::make_unique<TestMatrix>(t, inter, hidden, rng, scale));
      up.push_back(std::make_unique<TestMatrix>(t, inter, hidden, rng, scale));
      down.push_back(std::make_unique<TestMatrix>(t, hidden, inter, rng, scale));
      hg.push_back(gate.back()->dm);
      hu.push_back(up.back()->dm);
      hd.push_back(down.back()->dm);
    }
    tables = std::make_unique<DeviceExpertTables>(hg, hu, hd);
    experts = tables->experts(hidden, inter, t);
    if (n_shared > 0) {
      sgate = std::make_unique<TestMatrix>(t, int64_t(n_shared) * inter, hidden, rng, scale);
      sup = std::make_unique<TestMatrix>(t, int64_t(n_shared) * inter, hidden, rng, scale);
      sdown = std::make_unique<TestMatrix>(t, hidden, int64_t(n_shared) * inter, rng, scale);
      experts.n_shared = n_shared;
      experts.shared_gate = sgate->dm;
      experts.shared_up = sup->dm;
      experts.shared_down = sdown->dm;
    }
  }

  // Distinct experts per token; an id of -1 (if allowed) selects nothing.
  void route(int m, Rng& rng, std::vector<int>& ids, std::vector<float>& w, bool with_invalid) const {
    ids.assign(size_t(m) * top_k, 0);
    w.assign(size_t(m) * top_k, 0.f);
    for (int t = 0; t < m; ++t) {
      std::vector<int> perm(E);
      for (int i = 0; i < E; ++i) perm[i] = i;
      for (int j = 0; j < top_k; ++j) {
        std::swap(perm[j], perm[j + rng.below(E - j)]);
        ids[size_t(t) * top_k + j] = perm[j];
        w[size_t(t) * top_k + j] = rng.uniform(0.05f, 1.f);
      }
    }
    if (with_invalid && m > 0) ids[0] = -1;
  }

  std::vector<double> reference(int m, const std::vector<uint16_t>& xh, const std::vector<int>& ids,
                                const std::vector<float>& w) const {
    const auto xd = to_double(xh);
    std::vector<double> out(size_t(m) * hidden, 0.0), h(inter);
    for (int t = 0; t < m; ++t)
      for (int j = 0; j < top_k; ++j) {
        const int e = ids[size_t(t) * top_k + j];
        if (e < 0 || e >= E) continue;
        for (int i = 0; i < inter; ++i) {
          const double g = gate[e]->dot(i, xd, int64_t(t) * hidden);
          const double u = up[e]->dot(i, xd, int64_t(t) * hidden);
          h[i] = g / (1 + std::exp(-g)) * u;
        }
        for (int r = 0; r < hidden; ++r)
          out[size_t(t) * hidden + r] += w[size_t(t) * top_k + j] * down[e]->dot(r, h, 0);
      }
    if (n_shared > 0) {
      std::vector<double> hs(size_t(n_shared) * inter);
      for (int t = 0; t < m; ++t) {
        for (size_t i = 0; i < hs.size(); ++i) {
          const double g = sgate->dot(int64_t(i), xd, int64_t(t) * hidden);
          const double u = sup->dot(int64_t(i), xd, int64_t(t) * hidden);
          hs[i] = g / (1 + std::exp(-g)) * u;
        }
        for (int r = 0; r < hidden; ++r) out[size_t(t) * hidden + r] += sdown->dot(r, hs, 0);
      }
    }
    return out;
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
