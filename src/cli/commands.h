#pragma once
// One subcommand per file in src/cli/; main.cpp only wires them.
namespace CLI { class App; }

namespace rs::cli {
void add_generate(CLI::App& app);
void add_inspect(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_serve(CLI::App& app);
void add_chat(CLI::App& app);
void add_bench(CLI::App& app);  // bench forward | allreduce (src/bench/)
}  // namespace rs::cli
