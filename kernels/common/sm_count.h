#pragma once
// The current device's multiprocessor count, for sizing one-wave and persistent grids. Queried
// once per device and cached (host side; launchers run on every rank's thread, hence atomics).
// A failed query returns 0, so a caller picks its own fallback or error. And how many blocks of
// a kernel fit on one SM, the other factor of a one-wave grid.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <vector>

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

// Resident blocks per SM of `kernel` at `threads` threads and `dynamic_smem` bytes (registers and
// shared memory decide), 0 when the query fails. Remembered per (host thread, device, kernel,
// threads, bytes): a launcher may ask on every launch and pay one lookup after the first.
template <class Kernel>
int resident_blocks_exact(Kernel kernel, int threads, size_t dynamic_smem = 0) {
  struct Entry {
    const void* kernel;
    int device, threads;
    size_t smem;
    int blocks;
  };
  thread_local std::vector<Entry> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const void* k = reinterpret_cast<const void*>(kernel);
  for (const Entry& e : known)
    if (e.kernel == k && e.device == dev && e.threads == threads && e.smem == dynamic_smem) return e.blocks;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, dynamic_smem) != cudaSuccess || n < 0) {
    cudaGetLastError();
    n = 0;
  }
  known.push_back({k, dev, threads, dynamic_smem, n});
  return n;
}

// The same, at least 1 (also when the query fails): the other factor of a one-wave grid.
template <class Kernel>
int resident_blocks_per_sm(Kernel kernel, int threads, size_t dynamic_smem = 0) {
  return std::max(1, resident_blocks_exact(kernel, threads, dynamic_smem));
}

}  // namespace rs::kern
