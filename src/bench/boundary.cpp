// `rackserve bench boundary`: what one dependency step between two pieces of decode work costs on
// this GPU, as a chain of kernels (stream order, PDL, a flag handoff) and inside one persistent
// kernel (a grid-wide barrier). Each step is the smallest real one (every thread loads a value the
// previous step stored and stores one), so the figure is the join's cost plus one L2 round trip.
// kernels/bench/boundary_chain.h says why it matters.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_commands.h"
#include "bench/bench_device.h"
#include "kernels/bench/boundary_chain.h"

namespace rs::bench {
namespace {

void run(const std::vector<int>& grids, int threads, int steps, int reps, const std::string& json_path) {
  const cudaDeviceProp prop = bench_device("bench boundary");
  std::printf("device: %s, %d SMs; %d steps a graph replay, median of %d replays, %d threads a block\n", prop.name,
              prop.multiProcessorCount, steps, reps, threads);
  std::vector<int> gs = grids;
  if (gs.empty()) gs = {prop.multiProcessorCount, 2 * prop.multiProcessorCount, 16};
  const kern::BoundaryMode modes[] = {kern::BoundaryMode::kStreamOrder, kern::BoundaryMode::kPdl,
                                      kern::BoundaryMode::kFlag, kern::BoundaryMode::kGridBarrier};
  nlohmann::json js = nlohmann::json::array();
  std::printf("%-44s %6s %12s %10s\n", "step", "grid", "median us", "p90 us");
  for (int grid : gs)
    for (kern::BoundaryMode m : modes) {
      kern::BoundaryTiming t;
      const char* err = nullptr;
      if (!kern::measure_boundary(m, grid, threads, steps, reps, &t, &err)) {
        std::printf("%-44s %6d   not measured: %s\n", kern::boundary_mode_name(m), grid, err ? err : "?");
        continue;
      }
      std::printf("%-44s %6d %12.2f %10.2f\n", kern::boundary_mode_name(m), grid, t.median_us, t.p90_us);
      js.push_back({{"mode", kern::boundary_mode_name(m)}, {"grid", grid}, {"threads", threads}, {"steps", steps},
                    {"median_us", t.median_us}, {"p90_us", t.p90_us}});
    }
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

}  // namespace

void add_boundary(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("boundary",
                                   "cost of one dependency step: kernel chains (stream order, PDL, flag) and a grid barrier");
  auto grids = std::make_shared<std::vector<int>>();
  auto threads = std::make_shared<int>(256);
  auto steps = std::make_shared<int>(200);
  auto reps = std::make_shared<int>(15);
  auto json = std::make_shared<std::string>();
  cmd->add_option("--grid", *grids, "blocks a step (repeatable; default: the SM count, twice it, and 16)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--threads", *threads, "threads a block")->check(CLI::Range(32, 1024));
  cmd->add_option("--steps", *steps, "steps a graph replay (even)")->check(CLI::Range(2, 4096));
  cmd->add_option("--reps", *reps, "timed replays")->check(CLI::Range(1, 1000));
  cmd->add_option("--json", *json, "write the results as JSON");
  cmd->callback([grids, threads, steps, reps, json] { run(*grids, *threads, *steps, *reps, *json); });
}

}  // namespace rs::bench
