#include "parallel/nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "common/error.h"

namespace rs::parallel {
namespace {

template <class Fn>
void bind(void* handle, const char* name, Fn*& out, const std::string& path) {
  void* sym = dlsym(handle, name);
  if (!sym) throw Error(path + ": symbol " + name + " not found (NCCL too old?)");
  out = reinterpret_cast<Fn*>(sym);
}

void check(const NcclLibrary& lib, nccl_abi::Result r, const std::string& what) {
  if (r != 0) throw Error("NCCL " + what + ": " + lib.GetErrorString(r));
}

}  // namespace

NcclLibrary NcclLibrary::load(const std::string& path) {
  NcclLibrary lib;
  lib.path = path;
  lib.handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    const char* why = dlerror();
    throw Error("cannot load NCCL (" + lib.path + "): " + (why ? why : "unknown error") +
                "; put libnccl.so.2 on LD_LIBRARY_PATH or set RS_NCCL_LIBRARY to its path");
  }
  bind(lib.handle, "ncclGetVersion", lib.GetVersion, lib.path);
  bind(lib.handle, "ncclCommInitAll", lib.CommInitAll, lib.path);
  bind(lib.handle, "ncclCommDestroy", lib.CommDestroy, lib.path);
  bind(lib.handle, "ncclAllReduce", lib.AllReduce, lib.path);
  bind(lib.handle, "ncclGetErrorString", lib.GetErrorString, lib.path);
  if (lib.GetVersion(&lib.version) != 0) throw Error(lib.path + ": ncclGetVersion failed");
  return lib;
}

const NcclLibrary& NcclLibrary::get() {
  static std::mutex mu;
  static NcclLibrary* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded) {
    const char* env = std::getenv("RS_NCCL_LIBRARY");
    loaded = new NcclLibrary(load(env && *env ? env : "libnccl.so.2"));
  }  // lives as long as the process; never dlclosed
  return *loaded;
}

void nccl_disable_multicast_unless_set() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

NcclComms::NcclComms(const Topology& topo) : lib_(nullptr) {
  if (topo.ranks_share_devices())
    throw Error("NCCL needs one GPU per rank; " + topo.describe() + " places several ranks on a GPU");
  lib_ = &NcclLibrary::get();
  nccl_disable_multicast_unless_set();
  std::vector<int> devices;
  for (int r = 0; r < topo.size(); ++r) devices.push_back(topo.device_of(r));
  comms_.assign(topo.size(), nullptr);
  int current = 0;
  cudaGetDevice(&current);
  const nccl_abi::Result res = lib_->CommInitAll(comms_.data(), topo.size(), devices.data());
  cudaSetDevice(current);
  check(*lib_, res, "ncclCommInitAll over " + topo.describe());
}

NcclComms::~NcclComms() {
  for (auto c : comms_)
    if (c) lib_->CommDestroy(c);
}

void NcclComms::all_reduce(int rank, const void* in, void* out, size_t count, DType type,
                           cudaStream_t stream) const {
  nccl_abi::DataType t;
  switch (type) {
    case DType::BF16: t = nccl_abi::kBfloat16; break;
    case DType::F32: t = nccl_abi::kFloat32; break;
    default: throw Error(std::string("all-reduce of ") + dtype_name(type) + ": only BF16 and F32 are supported");
  }
  const nccl_abi::Result r = lib_->AllReduce(in, out, count, t, nccl_abi::kSum, comms_.at(rank), stream);
  if (r != 0) check(*lib_, r, "ncclAllReduce on rank " + std::to_string(rank));  // message built on failure only
}

int NcclComms::version() const { return lib_->version; }

}  // namespace rs::parallel
