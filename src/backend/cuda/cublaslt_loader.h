#pragma once
// cuBLASLt, loaded at run time (dlopen) so the binary never links it and starts on machines
// without it. The toolkit's cublasLt.h is included for its types and enums only: every function
// is called through a pointer bound with dlsym, so nothing here creates a link dependency.
// Search order: the file RS_CUBLASLT_LIBRARY names (only that one, when set), then
// libcublasLt.so.13 on the loader path, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
#include <cublasLt.h>

#include <string>
#include <vector>

namespace rs::cuda {

struct CublasLtLibrary {
  void* handle = nullptr;
  std::string path;
  size_t version = 0;  // cublasLtGetVersion(), e.g. 130100 for 13.1.0
  decltype(&cublasLtGetVersion) GetVersion = nullptr;
  decltype(&cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;

  // Loads once per process; throws rs::Error naming every path tried and dlerror()'s text when
  // no candidate loads, a symbol is missing, or the major version differs from the header's.
  // A failure is remembered: later calls throw the same message without retrying.
  static const CublasLtLibrary& get();
  // Loads `path` now, uncached (get() uses it; tests call it with bad paths).
  static CublasLtLibrary load(const std::string& path);
  // The paths get() tries, in order.
  static std::vector<std::string> candidates();
};

}  // namespace rs::cuda
