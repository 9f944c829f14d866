#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace rs {
// Number of usable CUDA devices; 0 (with `why` set) when there is no driver or no GPU.
int cuda_device_count(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(const ModelSpec& spec, const Weights& weights);
}  // namespace rs
