// Measuring the two L2 sides (l2_sides.h): which SMs share a side, which arena page is homed where.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "kernels/common/env_int.h"
#include "kernels/common/l2_sides.h"
#include "kernels/common/sm_count.h"

namespace rs::kern {
namespace {

constexpr int kPages = 16;
constexpr int kPageWords = 1024;  // 4 KB
constexpr int kReps = 16;

// One thread a block, at least one block an SM: kReps dependent atomics on each page's first
// word, the pages in an order staggered by block so that blocks rarely hit one line at once.
__global__ void l2_side_probe_kernel(unsigned* arena, int* lat) {
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  for (int i = 0; i < kPages; ++i) {
    const int p = (i + blockIdx.x) % kPages;
    unsigned* w = arena + p * kPageWords;
    unsigned v = 0;
    asm volatile("atom.global.add.u32 %0, [%1], 0;" : "=r"(v) : "l"(w) : "memory");
    if (v == 0x7fffffffu) asm volatile("trap;");  // a branch on v: the clock waits for the atomic
    long long t0, t1;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0)::"memory");
    for (int r = 0; r < kReps; ++r) asm volatile("atom.global.add.u32 %0, [%1], 0;" : "=r"(v) : "l"(w + v) : "memory");
    if (v == 0x7fffffffu) asm volatile("trap;");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1)::"memory");
    if (smid < kL2SideMaxSms) atomicMin(lat + smid * kPages + p, static_cast<int>(t1 - t0) / kReps);
  }
}

L2Sides measure() {
  L2Sides s;
  if (!env_int("RS_L2_SIDES", 1, 0, 1)) return s;
  const int sms = current_sm_count();
  unsigned* arena = nullptr;
  int* lat_d = nullptr;
  uint8_t* side_d = nullptr;
  // 4 KB-aligned pages: cudaMalloc returns at least 256-byte alignment, so round up inside.
  if (sms <= 0 || cudaMalloc(&arena, (kPages + 1) * kPageWords * 4) != cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  unsigned* base = reinterpret_cast<unsigned*>((reinterpret_cast<uintptr_t>(arena) + 4095) & ~uintptr_t(4095));
  std::vector<int> lat_h(size_t(kL2SideMaxSms) * kPages, 0x7fffffff);
  // Zeroed once: the probe adds 0, so the pages are the zeroed counters they are used as after it.
  bool ok = cudaMemset(arena, 0, (kPages + 1) * kPageWords * 4) == cudaSuccess &&
            cudaMalloc(&lat_d, lat_h.size() * 4) == cudaSuccess &&
            cudaMemcpy(lat_d, lat_h.data(), lat_h.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess;
  if (ok) {
    for (int run = 0; run < 3; ++run) l2_side_probe_kernel<<<2 * sms, 1>>>(base, lat_d);
    ok = cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(lat_h.data(), lat_d, lat_h.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  L2SideMap map;
  if (ok) {
    std::vector<float> lat(lat_h.size());
    for (size_t i = 0; i < lat.size(); ++i) lat[i] = lat_h[i] == 0x7fffffff ? -1.f : float(lat_h[i]);
    ok = classify_l2_sides(lat, kL2SideMaxSms, kPages, 100.f, map);
  }
  int home[2][kL2SidePages], found[2] = {0, 0};
  if (ok)
    for (int p = 0; p < kPages; ++p) {
      const int h = map.page_home[p];
      if (found[h] < kL2SidePages) home[h][found[h]++] = p;
    }
  ok = ok && found[0] == kL2SidePages && found[1] == kL2SidePages;
  std::vector<uint8_t> side_h(kL2SideMaxSms, 0);
  if (ok) {
    for (int i = 0; i < kL2SideMaxSms; ++i) side_h[i] = static_cast<uint8_t>(map.sm_side[i] == 1);
    ok = cudaMalloc(&side_d, kL2SideMaxSms) == cudaSuccess &&
         cudaMemcpy(side_d, side_h.data(), kL2SideMaxSms, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  if (lat_d) cudaFree(lat_d);
  if (!ok) {
    cudaGetLastError();
    if (side_d) cudaFree(side_d);
    cudaFree(arena);
    return s;
  }
  // The arena and the table live as long as the process (one small allocation per device).
  s.valid = true;
  s.sm_side = side_d;
  s.sm_side_host = side_h;
  for (int side = 0; side < 2; ++side)
    for (int k = 0; k < kL2SidePages; ++k) s.page[side][k] = base + home[side][k] * kPageWords;
  return s;
}

}  // namespace

bool classify_l2_sides(const std::vector<float>& lat, int sms, int pages, float min_gap, L2SideMap& out) {
  out.sm_side.assign(sms, -1);
  out.page_home.assign(pages, -1);
  float lo = 1e30f, hi = -1e30f;
  for (int sm = 0; sm < sms; ++sm) {
    const float v = lat[size_t(sm) * pages];
    if (v < 0) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (hi - lo < min_gap) return false;
  const float mid = (lo + hi) / 2;
  int count[2] = {0, 0};
  for (int sm = 0; sm < sms; ++sm) {
    const float v = lat[size_t(sm) * pages];
    if (v < 0) continue;
    out.sm_side[sm] = v < mid ? 0 : 1;
    ++count[out.sm_side[sm]];
  }
  if (count[0] == 0 || count[1] == 0) return false;
  for (int p = 0; p < pages; ++p) {
    double sum[2] = {0, 0};
    int n[2] = {0, 0};
    for (int sm = 0; sm < sms; ++sm) {
      const float v = lat[size_t(sm) * pages + p];
      if (v < 0 || out.sm_side[sm] < 0) continue;
      sum[out.sm_side[sm]] += v;
      ++n[out.sm_side[sm]];
    }
    if (n[0] == 0 || n[1] == 0) return false;
    const double m0 = sum[0] / n[0], m1 = sum[1] / n[1];
    if (std::abs(m0 - m1) < min_gap) return false;
    out.page_home[p] = m0 < m1 ? 0 : 1;
  }
  return true;
}

namespace {
thread_local const void* t_sided[3] = {nullptr, nullptr, nullptr};
}
void l2_sided_inputs_mark(const void* x, const void* ids, const void* weights) {
  t_sided[0] = x;
  t_sided[1] = ids;
  t_sided[2] = weights;
}
bool l2_sided_inputs_take(const void* x, const void* ids, const void* weights) {
  const bool match = x && t_sided[0] == x && t_sided[1] == ids && t_sided[2] == weights;
  t_sided[0] = t_sided[1] = t_sided[2] = nullptr;
  return match;
}

const L2Sides& l2_sides(bool may_measure) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static L2Sides cached[kMaxDevices];
  static bool done[kMaxDevices] = {};
  int dev = 0;
  static const L2Sides none;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return none;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (!done[dev] && !may_measure) return none;
  if (!done[dev]) {
    cached[dev] = measure();
    done[dev] = true;
    std::fprintf(stderr, "rackserve: L2 sides on device %d: %s\n", dev,
                 cached[dev].valid ? "two, measured (hot counters and one token's expert inputs copied to each)"
                                     : "not used (no clean split measured, or RS_L2_SIDES=0)");
  }
  return cached[dev];
}

}  // namespace rs::kern
