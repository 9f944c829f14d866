#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/error.h"

namespace rs::cli {
// Placeholder until its issue lands: says so instead of pretending.
void add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "(not built yet)");
  cmd->allow_extras();
  cmd->callback([] { throw Error("'chat' is not built yet"); });
}
}  // namespace rs::cli
