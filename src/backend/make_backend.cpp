#include <cstdio>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "model/weights.h"
#include "common/error.h"

namespace rs {

namespace {

// True when the CUDA backend should be used; says so on stderr when falling back to the CPU.
bool use_cuda(const BackendOptions& opt) {
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda")
    throw Error("--device must be auto, cpu or cuda (got '" + opt.device + "')");
  if (opt.device == "cpu") return false;
  std::string why;
  if (cuda_device_count(&why) > 0) return true;
  if (opt.device == "cuda") throw Error("--device cuda: no usable GPU (" + why + ")");
  std::fprintf(stderr, "rackserve: no GPU (%s); using the CPU reference backend\n", why.c_str());
  return false;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const ModelSpec& spec, const Weights& weights,
                                      const BackendOptions& opt) {
  if (use_cuda(opt)) return make_cuda_backend(spec, weights);
  return make_cpu_backend(spec, weights, opt.threads);
}

std::unique_ptr<Backend> make_dummy_backend(const ModelSpec& spec, uint64_t seed, const BackendOptions& opt,
                                            std::unique_ptr<Weights>& host_weights) {
  if (use_cuda(opt)) return make_cuda_backend_dummy(spec, seed);
  host_weights = Weights::dummy(spec, seed);
  return make_cpu_backend(spec, *host_weights, opt.threads);
}

}  // namespace rs
