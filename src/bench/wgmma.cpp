// `rackserve bench wgmma`: which shared-memory descriptor strides make wgmma m64n8k32 e4m3 (the
// weights as register A, the token as 8 B columns) compute a GEMV tile right, and the rates of
// the FP8 dot instructions a batch-1 expert GEMV could use (kernels/bench/wgmma_probe.h says why).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_commands.h"
#include "bench/bench_device.h"
#include "kernels/bench/wgmma_probe.h"

namespace rs::bench {
namespace {

void run(const std::string& json_path) {
  const cudaDeviceProp prop = bench_device("bench wgmma");
  std::printf("device: %s, %d SMs (sm_%d%d)\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  std::vector<kern::WgmmaLayoutCheck> checks;
  kern::WgmmaRates r;
  const char* err = nullptr;
  const bool good = kern::probe_wgmma_e4m3(&checks, &r, &err);
  nlohmann::json js = {{"layouts", nlohmann::json::array()}};
  std::printf("B descriptor strides (64 x 128 tile, columns 0-1 against the host's products):\n");
  for (const auto& c : checks) {
    const bool right = c.max_err <= 1e-6 * c.max_ref && c.max_other == 0;
    std::printf("  A order %d  lbo %5u  sbo %5u: max error %.3g of %.3g, zero columns max %.3g  %s\n", c.a_order, c.lbo,
                c.sbo, c.max_err, c.max_ref, c.max_other, right ? "RIGHT" : "wrong");
    js["layouts"].push_back({{"a_order", c.a_order}, {"lbo", c.lbo}, {"sbo", c.sbo}, {"max_err", c.max_err},
                             {"max_ref", c.max_ref}, {"max_other", c.max_other}, {"right", right}});
  }
  if (!good) {
    std::printf("not measured: %s\n", err ? err : "?");
    if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
    return;
  }
  std::printf("rates (132 blocks of 256 threads, constant operands):\n");
  std::printf("  wgmma m64n8k32 e4m3 (register A)  %7.2f ns an instruction a warpgroup  %8.1f e4m3 weights/ns an SM\n",
              r.wgmma_ns, r.wgmma_wpns);
  std::printf("  mma.sync m16n8k32 e4m3            %7.2f ns an instruction a warp        %8.1f\n", r.mma_ns, r.mma_wpns);
  std::printf("  CUDA-core dot16_e4m3_f16          %7.2f ns a 16-weight chunk a warp      %8.1f\n", r.core_ns, r.core_wpns);
  std::printf("  (the HBM stream at 4.26 TB/s brings 32 e4m3 weights/ns an SM of 132)\n");
  js["rates"] = {{"wgmma_ns", r.wgmma_ns}, {"mma_ns", r.mma_ns}, {"core_ns", r.core_ns}, {"wgmma_weights_per_ns_sm", r.wgmma_wpns},
                 {"mma_weights_per_ns_sm", r.mma_wpns}, {"core_weights_per_ns_sm", r.core_wpns}};
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

}  // namespace

void add_wgmma(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("wgmma", "FP8 tensor-core instructions for the batch-1 expert GEMV: wgmma layout check and rates");
  auto json = std::make_shared<std::string>();
  cmd->add_option("--json", *json, "write the results as JSON");
  cmd->callback([json] { run(*json); });
}

}  // namespace rs::bench
