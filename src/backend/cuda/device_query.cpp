#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"

namespace rs {
int cuda_device_count(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}
}  // namespace rs
