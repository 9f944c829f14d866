#pragma once
// The device a single-GPU device bench runs on: GPU 0's properties, or rs::Error naming the bench
// and why there is none (rs::cuda_device_count's reason: no driver, no device, a cudart error).
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_backend.h"
#include "common/error.h"

namespace rs::bench {

inline cudaDeviceProp bench_device(const std::string& bench) {
  std::string why;
  if (cuda_device_count(&why) < 1) throw Error(bench + ": " + why);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    throw Error(bench + ": cannot read the device");
  }
  return prop;
}

}  // namespace rs::bench
