#pragma once
// CUDA runtime failures in the comm layer become rs::Error naming the call, the rank and the GPU.
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"

namespace rs::parallel {

inline void cuda_check(cudaError_t err, const std::string& what,
                       std::source_location loc = std::source_location::current()) {
  if (err != cudaSuccess) throw Error(what + ": " + cudaGetErrorString(err), loc);
}

}  // namespace rs::parallel
