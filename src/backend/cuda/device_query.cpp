#include <cuda_runtime.h>
#include <dlfcn.h>

#include "backend/cuda/cuda_backend.h"

namespace rs {
int cuda_device_count(std::string* why) {
  // cudart reports a missing driver as "driver version is insufficient", which misleads on a
  // machine that simply has no NVIDIA driver: look for the driver library first.
  if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(drv);
  } else {
    if (why) *why = "no NVIDIA driver: libcuda.so.1 not found";
    return 0;
  }
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
