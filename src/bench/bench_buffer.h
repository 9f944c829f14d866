#pragma once
// Scratch device memory for the benches: the backend's DeviceBuffer, never smaller than 256 bytes,
// so a size that comes out as zero (a workspace some shapes do not need) still hands the kernels
// a valid pointer.
#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_check.h"

namespace rs::bench {

inline cuda::DeviceBuffer bench_buffer(size_t bytes) {
  return cuda::DeviceBuffer(std::max<size_t>(bytes, 256), "bench buffer");
}

}  // namespace rs::bench
