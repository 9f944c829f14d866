#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/error.h"

namespace rs::cli {
// Placeholder until its issue lands: says so instead of pretending.
void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "(not built yet)");
  cmd->allow_extras();
  cmd->callback([] { throw Error("'inspect' is not built yet"); });
}
}  // namespace rs::cli
