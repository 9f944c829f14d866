#pragma once
// CUDA runtime errors become rs::Error naming the call; device memory is owned by DeviceBuffer.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "common/error.h"

namespace rs::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
#define RS_CUDA(call) ::rs::cuda::check((call), #call)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what = "buffer") { reset(bytes, what); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  void reset(size_t bytes, const char* what = "buffer") {
    release();
    if (bytes == 0) return;
    cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error("CUDA: cannot allocate " + std::to_string(bytes >> 20) + " MiB for " + what + " (" +
                  std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) + ")");
    }
    bytes_ = bytes;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace rs::cuda
