#pragma once
#include <memory>

#include "backend/backend.h"

namespace rs {
std::unique_ptr<Backend> make_cpu_backend(const ModelSpec& spec, const Weights& weights, int threads);
}  // namespace rs
