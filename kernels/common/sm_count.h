#pragma once
// The current device's multiprocessor count, for sizing one-wave and persistent grids. Queried
// once per device and cached (host side; launchers run on every rank's thread, hence atomics).
// A failed query returns 0, so a caller picks its own fallback or error.
#include <cuda_runtime.h>

#include <atomic>

namespace rs::kern {

inline int current_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return 0;
  }
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n > 0) return n;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return 0;
  }
  cached[dev].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace rs::kern
