#pragma once
// Helpers for the GPU tests compiled as CUDA C++17 (*.cu); cuda_test_util.h is C++20 host code.
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace rs::cutest {

// suite: the doctest suite named in the message ("gpu.cuda").
inline bool skip_without_gpu(const char* test, const char* suite = "gpu.cuda") {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return false;
  std::printf("[%s] %s: skipped, no CUDA device\n", suite, test);
  return true;
}

inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace rs::cutest
