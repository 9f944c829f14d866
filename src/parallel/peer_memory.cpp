#include "parallel/peer_memory.h"

#include <cuda_runtime.h>

#include "parallel/cuda_check.h"

namespace rs::parallel {

void enable_peer_access(const std::vector<int>& devices) {
  int current = 0;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      cuda_check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer");
      if (!can)
        throw Error("GPU " + std::to_string(a) + " cannot access GPU " + std::to_string(b) +
                    " as a peer: the comm layer needs NVLink or PCIe peer-to-peer between all GPUs");
      cuda_check(cudaSetDevice(a), "cudaSetDevice");
      const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // not an error: another Comm enabled it first
      } else {
        cuda_check(err, "cudaDeviceEnablePeerAccess " + std::to_string(a) + "->" + std::to_string(b));
      }
    }
  }
  cuda_check(cudaSetDevice(current), "cudaSetDevice");
}

SymmetricAllocation::SymmetricAllocation(const Topology& topo, size_t bytes_per_rank)
    : topo_(topo), bytes_(bytes_per_rank), ptrs_(topo.size(), nullptr) {
  int current = 0;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  try {
    for (int r = 0; r < topo.size(); ++r) {
      cuda_check(cudaSetDevice(topo.device_of(r)), "cudaSetDevice");
      cuda_check(cudaMalloc(&ptrs_[r], bytes_per_rank),
                 "cudaMalloc of " + std::to_string(bytes_per_rank) + " bytes of comm workspace for rank " +
                     std::to_string(r) + " on GPU " + std::to_string(topo.device_of(r)));
    }
  } catch (...) {
    for (int r = 0; r < topo.size(); ++r)
      if (ptrs_[r]) { cudaSetDevice(topo.device_of(r)); cudaFree(ptrs_[r]); }
    cudaSetDevice(current);
    throw;
  }
  cudaSetDevice(current);
}

SymmetricAllocation::~SymmetricAllocation() {
  int current = 0;
  cudaGetDevice(&current);
  for (int r = 0; r < topo_.size(); ++r) {
    if (!ptrs_[r]) continue;
    cudaSetDevice(topo_.device_of(r));
    cudaFree(ptrs_[r]);
  }
  cudaSetDevice(current);
}

}  // namespace rs::parallel
