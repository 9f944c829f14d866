#include <CLI/CLI.hpp>

#include "bench/bench_commands.h"
#include "cli/commands.h"

namespace rs::cli {
void add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "forward-step, communication and serving benchmarks");
  bench->require_subcommand(1);
  bench::add_forward(*bench);
  bench::add_allreduce(*bench);
  bench::add_linear(*bench);
  bench::add_mla_prefill(*bench);
  bench::add_serve(*bench);
  bench::add_boundary(*bench);
  bench::add_fanout(*bench);
  bench::add_wgmma(*bench);
}
}  // namespace rs::cli
