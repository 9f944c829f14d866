#pragma once
namespace CLI { class App; }

namespace rs::bench {
void add_forward(CLI::App& bench);    // src/bench/forward.cpp
void add_allreduce(CLI::App& bench);  // src/bench/allreduce.cpp
void add_linear(CLI::App& bench);     // src/bench/linear.cpp
void add_mla_prefill(CLI::App& bench);  // src/bench/mla_prefill.cpp
void add_serve(CLI::App& bench);      // src/bench/serve.cpp
void add_boundary(CLI::App& bench);   // src/bench/boundary.cpp
void add_fanout(CLI::App& bench);     // src/bench/fanout.cpp
void add_wgmma(CLI::App& bench);      // src/bench/wgmma.cpp
}  // namespace rs::bench
