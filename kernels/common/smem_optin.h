#pragma once
// Opting a kernel in to more than 48 KB of shared memory (static + dynamic).
// cudaFuncSetAttribute acts on the kernel for the current device only, so a once-per-process
// guard leaves every other GPU at the default and their launches fail (tensor-parallel ranks
// launch on devices 1..N-1 from their own threads). Here the opt-in is remembered per (host
// thread, device, kernel), raised when a launch needs more than was set, and asked of the driver
// only then (host side; never captured into a graph, so graph replays pay nothing).
#include <cuda_runtime.h>

#include <vector>

namespace rs::kern {

inline bool allow_dynamic_smem(const void* kernel, int bytes) {
  if (bytes <= 0) return true;
  struct Entry {
    const void* kernel;
    int device, bytes;
  };
  thread_local std::vector<Entry> set;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  for (const Entry& e : set)
    if (e.kernel == kernel && e.device == dev && e.bytes >= bytes) return true;
  // The default limit covers static and dynamic shared memory together: 48 KB of dynamic memory
  // or less needs the opt-in too when the kernel's static arrays take it past 48 KB.
  if (bytes <= 48 * 1024) {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
      cudaGetLastError();  // clears only this call's error (it returned one)
      return false;
    }
    if (attr.sharedSizeBytes + size_t(bytes) <= 48 * 1024) {
      set.push_back({kernel, dev, bytes});
      return true;
    }
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  set.push_back({kernel, dev, bytes});
  return true;
}

template <class... Args>
bool allow_dynamic_smem(void (*kernel)(Args...), int bytes) {
  return allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace rs::kern
