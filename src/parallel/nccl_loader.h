#pragma once
// NCCL, loaded at run time (dlopen("libnccl.so.2"), or the file RS_NCCL_LIBRARY names), so the
// binary starts on machines without it. The few ABI types used are declared here (NCCL's
// header is not a build dependency); their values are fixed by NCCL's stable C ABI.
// Communicators are made in-process: ncclCommInitAll over the ranks' GPUs, one per rank.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "parallel/topology.h"

namespace rs::parallel {

namespace nccl_abi {
using Comm = struct ncclComm*;
using Result = int;          // ncclResult_t: 0 is ncclSuccess
enum DataType : int { kFloat32 = 7, kBfloat16 = 9 };  // ncclFloat32, ncclBfloat16
enum RedOp : int { kSum = 0 };                        // ncclSum
}  // namespace nccl_abi

struct NcclLibrary {
  void* handle = nullptr;
  std::string path;
  int version = 0;  // NCCL_VERSION_CODE, e.g. 22703 for 2.27.3
  nccl_abi::Result (*GetVersion)(int*) = nullptr;
  nccl_abi::Result (*CommInitAll)(nccl_abi::Comm*, int, const int*) = nullptr;
  nccl_abi::Result (*CommDestroy)(nccl_abi::Comm) = nullptr;
  nccl_abi::Result (*AllReduce)(const void*, void*, size_t, nccl_abi::DataType, nccl_abi::RedOp,
                                nccl_abi::Comm, cudaStream_t) = nullptr;
  const char* (*GetErrorString)(nccl_abi::Result) = nullptr;

  // Loads once per process (RS_NCCL_LIBRARY, else libnccl.so.2); throws rs::Error with
  // dlerror()'s text when the library or a symbol is missing.
  static const NcclLibrary& get();
  // Loads `path` now, uncached (get() uses it; tests call it with bad paths).
  static NcclLibrary load(const std::string& path);
};

// Sets NCCL_NVLS_ENABLE=0 unless the user set it: NVLink multicast (NVLS) stays off.
void nccl_disable_multicast_unless_set();

class NcclComms {
 public:
  // One communicator per rank, from this thread. Throws rs::Error when NCCL is missing or when
  // ranks share a GPU (NCCL allows one rank per GPU in a communicator).
  explicit NcclComms(const Topology& topo);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  // Call from rank `rank`'s thread with a stream on its GPU; capturable in a CUDA graph.
  void all_reduce(int rank, const void* in, void* out, size_t count, DType type,
                  cudaStream_t stream) const;
  int version() const;

 private:
  const NcclLibrary* lib_;
  std::vector<nccl_abi::Comm> comms_;
};

}  // namespace rs::parallel
