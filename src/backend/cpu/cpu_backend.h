#pragma once
#include <memory>

#include "backend/backend.h"
#include "model/rope.h"

namespace rs {
std::unique_ptr<Backend> make_cpu_backend(const ModelSpec& spec, const Weights& weights, int threads);
// The same with a given rotary table instead of make_rope_table(spec): for checking a reference
// that was computed with different rotary frequencies (see tests/golden/cpu_golden_test.cpp).
std::unique_ptr<Backend> make_cpu_backend_with_rope(const ModelSpec& spec, const Weights& weights,
                                                    int threads, const RopeTable& rope);
}  // namespace rs
