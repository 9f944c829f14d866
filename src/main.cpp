#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"rackserve: DeepSeek-family MoE inference server"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "rackserve 0.1.0");
  rs::cli::add_generate(app);
  rs::cli::add_inspect(app);
  rs::cli::add_tokenize(app);
  rs::cli::add_serve(app);
  rs::cli::add_chat(app);
  rs::cli::add_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const rs::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
