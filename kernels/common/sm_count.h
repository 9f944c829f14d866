#pragma once
// The current device's multiprocessor count, for sizing one-wave and persistent grids. Queried
// once per device and cached (host side; launchers run on every rank's thread, hence atomics).
// A failed query returns 0, so a caller picks its own fallback or error. And how many blocks of
// a kernel fit on one SM, the other factor of a one-wave grid.
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>

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

// Resident blocks per SM of `kernel` at `threads` threads (registers and shared memory decide),
// at least 1 (also when the query fails). Launchers ask once per instantiation and keep it.
template <class Kernel>
int resident_blocks_per_sm(Kernel kernel, int threads, size_t dynamic_smem = 0) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, dynamic_smem) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 1;
  }
  return n;
}

}  // namespace rs::kern
