#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/error.h"

namespace rs::cli {
// Placeholder until its issue lands: says so instead of pretending.
void add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "(not built yet)");
  cmd->allow_extras();
  cmd->callback([] { throw Error("'tokenize' is not built yet"); });
}
}  // namespace rs::cli
