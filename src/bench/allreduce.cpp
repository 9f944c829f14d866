#include <CLI/CLI.hpp>

#include "bench/bench_commands.h"
#include "common/error.h"

namespace rs::bench {
void add_allreduce(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("allreduce", "(not built yet)");
  cmd->allow_extras();
  cmd->callback([] { throw Error("'bench allreduce' is not built yet"); });
}
}  // namespace rs::bench
