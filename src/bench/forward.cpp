#include <CLI/CLI.hpp>

#include "bench/bench_commands.h"
#include "common/error.h"

namespace rs::bench {
void add_forward(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("forward", "(not built yet)");
  cmd->allow_extras();
  cmd->callback([] { throw Error("'bench forward' is not built yet"); });
}
}  // namespace rs::bench
