// `rackserve bench fanout`: the cost of every head's cluster reading MLA's shared latent cache rows
// (kernels/bench/fanout_read.h says why), against reading each row once as the split decode
// attention does. Region = rows x row bytes (576 bf16 = 1152 at DeepSeek V2/V3's kv_lora 512 +
// rope 64); the layouts are those of the launches an attention could be folded into.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_commands.h"
#include "bench/bench_device.h"
#include "kernels/bench/fanout_read.h"

namespace rs::bench {
namespace {

struct Layout {
  int slices, fanout;
  const char* what;
};

void run(int rows, int row_bytes, int heads, int reps, const std::string& json_path) {
  const cudaDeviceProp prop = bench_device("bench fanout");
  const int64_t region = int64_t(rows) * row_bytes;
  std::printf("device: %s, %d SMs; %d rows of %d bytes (%.2f MB), median of %d replays; time from the first block's "
              "entry to the last copy landing\n",
              prop.name, prop.multiProcessorCount, rows, row_bytes, region / 1e6, reps);
  const Layout layouts[] = {
      {32, 1, "32 parts once (the split attention at batch 1)"},
      {8, 1, "8 parts once"},
      {8, heads, "8 parts x heads (clusters of 8 a head)"},
      {6, 1, "6 parts once"},
      {6, heads, "6 parts x heads (clusters of 6 a head)"},
  };
  nlohmann::json js = nlohmann::json::array();
  std::printf("%-42s %5s %6s %10s %10s %10s %10s\n", "layout", "grid", "L2", "KB/block", "median us", "p90 us", "GB/s");
  for (const Layout& l : layouts)
    for (bool cold : {true, false}) {
      kern::FanoutTiming t;
      const char* err = nullptr;
      const int grid = l.slices * l.fanout;
      if (!kern::measure_fanout_read(region, l.slices, l.fanout, cold, reps, &t, &err)) {
        std::printf("%-42s %5d %6s   not measured: %s\n", l.what, grid, cold ? "cold" : "warm", err ? err : "?");
        continue;
      }
      const double moved = double(region) * l.fanout;
      std::printf("%-42s %5d %6s %10.1f %10.2f %10.2f %10.0f\n", l.what, grid, cold ? "cold" : "warm",
                  region / double(l.slices) / 1024, t.median_us, t.p90_us, moved / (t.median_us * 1e3));
      js.push_back({{"layout", l.what}, {"slices", l.slices}, {"fanout", l.fanout}, {"grid", grid}, {"cold", cold},
                    {"region_bytes", region}, {"median_us", t.median_us}, {"p90_us", t.p90_us}});
    }
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

}  // namespace

void add_fanout(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("fanout", "cost of every head's cluster copying the shared latent cache rows");
  auto rows = std::make_shared<int>(1024);
  auto row_bytes = std::make_shared<int>(1152);
  auto heads = std::make_shared<int>(16);
  auto reps = std::make_shared<int>(31);
  auto json = std::make_shared<std::string>();
  cmd->add_option("--rows", *rows, "cached rows (the context)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--row-bytes", *row_bytes, "bytes a row (16-byte multiple)")->capture_default_str()->check(CLI::Range(16, 1 << 16));
  cmd->add_option("--heads", *heads, "clusters reading every part")->capture_default_str()->check(CLI::Range(1, 128));
  cmd->add_option("--reps", *reps, "timed replays")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--json", *json, "write the results as JSON");
  cmd->callback([rows, row_bytes, heads, reps, json] { run(*rows, *row_bytes, *heads, *reps, *json); });
}

}  // namespace rs::bench
