#pragma once
namespace CLI { class App; }

namespace rs::bench {
void add_forward(CLI::App& bench);    // src/bench/forward.cpp
void add_allreduce(CLI::App& bench);  // src/bench/allreduce.cpp
}  // namespace rs::bench
