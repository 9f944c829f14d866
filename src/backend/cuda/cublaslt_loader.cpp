#include "backend/cuda/cublaslt_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "common/error.h"

namespace rs::cuda {
namespace {

template <class Fn>
void bind(void* handle, const char* name, Fn& out, const std::string& path) {
  void* sym = dlsym(handle, name);
  if (!sym) throw Error(path + ": symbol " + name + " not found (cuBLASLt too old?)");
  out = reinterpret_cast<Fn>(sym);
}

}  // namespace

std::vector<std::string> CublasLtLibrary::candidates() {
  const char* env = std::getenv("RS_CUBLASLT_LIBRARY");
  if (env && *env) return {env};
  const std::string so = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> paths = {so};
  const char* home = std::getenv("CUDA_HOME");
  if (home && *home) paths.push_back(std::string(home) + "/lib64/" + so);
  paths.push_back("/usr/local/cuda/lib64/" + so);
  return paths;
}

CublasLtLibrary CublasLtLibrary::load(const std::string& path) {
  CublasLtLibrary lib;
  lib.path = path;
  lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    const char* why = dlerror();
    throw Error("cannot load cuBLASLt (" + path + "): " + (why ? why : "unknown error"));
  }
  try {
    bind(lib.handle, "cublasLtGetVersion", lib.GetVersion, path);
    bind(lib.handle, "cublasLtGetStatusString", lib.GetStatusString, path);
    bind(lib.handle, "cublasLtCreate", lib.Create, path);
    bind(lib.handle, "cublasLtDestroy", lib.Destroy, path);
    bind(lib.handle, "cublasLtMatmulDescCreate", lib.MatmulDescCreate, path);
    bind(lib.handle, "cublasLtMatmulDescDestroy", lib.MatmulDescDestroy, path);
    bind(lib.handle, "cublasLtMatmulDescSetAttribute", lib.MatmulDescSetAttribute, path);
    bind(lib.handle, "cublasLtMatrixLayoutCreate", lib.MatrixLayoutCreate, path);
    bind(lib.handle, "cublasLtMatrixLayoutDestroy", lib.MatrixLayoutDestroy, path);
    bind(lib.handle, "cublasLtMatmulPreferenceCreate", lib.MatmulPreferenceCreate, path);
    bind(lib.handle, "cublasLtMatmulPreferenceDestroy", lib.MatmulPreferenceDestroy, path);
    bind(lib.handle, "cublasLtMatmulPreferenceSetAttribute", lib.MatmulPreferenceSetAttribute, path);
    bind(lib.handle, "cublasLtMatmulAlgoGetHeuristic", lib.MatmulAlgoGetHeuristic, path);
    bind(lib.handle, "cublasLtMatmul", lib.Matmul, path);
    lib.version = lib.GetVersion();
    // The enums and attribute ids come from the header this was compiled with; they are stable
    // within a major version, so insist on the same major.
    if (lib.version / 10000 != CUBLAS_VER_MAJOR)
      throw Error(path + ": cuBLASLt version " + std::to_string(lib.version) + ", built against major " +
                  std::to_string(CUBLAS_VER_MAJOR));
  } catch (...) {
    dlclose(lib.handle);
    throw;
  }
  return lib;
}

const CublasLtLibrary& CublasLtLibrary::get() {
  static std::mutex mu;
  static std::unique_ptr<CublasLtLibrary> loaded;  // lives as long as the process; never dlclosed
  static std::string failure;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) return *loaded;
  if (!failure.empty()) throw Error(failure);
  std::string tried;
  for (const std::string& path : candidates()) {
    try {
      loaded = std::make_unique<CublasLtLibrary>(load(path));
      return *loaded;
    } catch (const Error& e) {
      tried += (tried.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  failure = "cuBLASLt is not available: " + tried +
            " (put libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR) +
            " on LD_LIBRARY_PATH or set RS_CUBLASLT_LIBRARY to its path)";
  throw Error(failure);
}

}  // namespace rs::cuda
