#include "backend/cuda/cuda_backend.h"
#include "common/error.h"

namespace rs {
// Replaced by the CUDA executor (issue 5).
std::unique_ptr<Backend> make_cuda_backend(const ModelSpec&, const Weights&) {
  throw Error("the CUDA backend is not built yet; use --device cpu");
}
}  // namespace rs
