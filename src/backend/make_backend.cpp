#include <cstdio>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/error.h"

namespace rs {

std::unique_ptr<Backend> make_backend(const ModelSpec& spec, const Weights& weights,
                                      const BackendOptions& opt) {
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda")
    throw Error("--device must be auto, cpu or cuda (got '" + opt.device + "')");
  if (opt.device != "cpu") {
    std::string why;
    int n = cuda_device_count(&why);
    if (n > 0) return make_cuda_backend(spec, weights);
    if (opt.device == "cuda") throw Error("--device cuda: no usable GPU (" + why + ")");
    std::fprintf(stderr, "rackserve: no GPU (%s); using the CPU reference backend\n", why.c_str());
  }
  return make_cpu_backend(spec, weights, opt.threads);
}

}  // namespace rs
