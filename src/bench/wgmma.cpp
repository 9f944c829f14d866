// `rackserve bench wgmma`: which shared-memory descriptor strides make wgmma m64n8k32 e4m3 (the
// weights as register A, the token as 8 B columns) compute a GEMV tile right, and the rates of
// the FP8 dot instructions a batch-1 expert GEMV could use (kernels/bench/wgmma_probe.h says why).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_commands.h"
#include "bench/bench_device.h"
#include "kernels/bench/wgmma_probe.h"
#include "kernels/common/dummy_init.h"
#include "model/numerics.h"

namespace rs::bench {
namespace {

constexpr int kRows = kern::kWgmmaProbeRows, kCols = kern::kWgmmaProbeCols;

void run(const std::string& json_path) {
  const cudaDeviceProp prop = bench_device("bench wgmma");
  std::printf("device: %s, %d SMs (sm_%d%d)\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  // A 64 x 128 e4m3 tile and two e4m3 columns in the ranges the FP8 GEMV would see (x's hi part in
  // [128, 256) a block, lo up to 16 times smaller), and their products in fp64.
  // (dummy_init.h's deterministic uniform values, one stream per array.)
  std::vector<uint8_t> w(kRows * kCols), xh(kCols), xl(kCols);
  auto fill = [](std::vector<uint8_t>& v, uint64_t stream, float scale) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = f32_to_e4m3(dummy::uniform_pm1(12345, stream, i) * scale);
  };
  fill(w, 1, 4.f);
  fill(xh, 2, 200.f);
  fill(xl, 3, 20.f);
  // ref: the exact sums; mag: the sums of the products' magnitudes, the scale of the tensor core's
  // rounding (it adds the products with fewer bits than fp32: ~2^-13 of the largest, H200).
  std::vector<double> ref(kRows * 2, 0.0), mag(kRows * 2, 0.0);
  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kCols; ++k)
      for (int n = 0; n < 2; ++n) {
        const double prod = double(e4m3_to_f32(w[r * kCols + k])) * e4m3_to_f32((n ? xl : xh)[k]);
        ref[r * 2 + n] += prod;
        mag[r * 2 + n] += std::fabs(prod);
      }
  // The PTX ISA's K-major unswizzled layout says (128, 256) and order 0; the rest are checks.
  const uint32_t strides[][2] = {{128, 256}, {256, 128}, {128, 128}, {256, 256}, {128, 1024}, {1024, 128}};
  std::vector<kern::WgmmaLayout> layouts;
  for (int order = 0; order < 2; ++order)
    for (const auto& s : strides) layouts.push_back({s[0], s[1], order});
  std::vector<std::vector<float>> outs;
  const char* err = nullptr;
  bool good = kern::wgmma_layout_outputs(w.data(), xh.data(), xl.data(), layouts, &outs, &err);
  nlohmann::json js = {{"layouts", nlohmann::json::array()}};
  std::printf("B descriptor strides (64 x 128 tile, columns 0-1 against the host's products):\n");
  for (size_t i = 0; i < outs.size(); ++i) {
    const kern::WgmmaLayout& l = layouts[i];
    const std::vector<float>& out = outs[i];
    // rel: the largest error over its row's sum of magnitudes. A wrong layout pairs weights with
    // the wrong x (errors of the order of the sums themselves); a right one leaves the tensor
    // core's rounding alone, held here to 2^-10, 8 times below a bf16 result's half ulp.
    double rel = 0, max_other = 0;  // max_other: the zero B columns 2-7, must be 0
    for (int r = 0; r < kRows; ++r) {
      for (int n = 0; n < 2; ++n) rel = std::fmax(rel, std::fabs(out[r * 8 + n] - ref[r * 2 + n]) / mag[r * 2 + n]);
      for (int n = 2; n < 8; ++n) max_other = std::fmax(max_other, std::fabs(out[r * 8 + n]));
    }
    const bool right = rel <= 0x1p-10 && max_other == 0;
    std::printf("  A order %d  lbo %5u  sbo %5u: max error 2^%.1f of the magnitudes' sum, zero columns max %.3g  %s\n",
                l.a_order, l.lbo, l.sbo, rel > 0 ? std::log2(rel) : -INFINITY, max_other, right ? "RIGHT" : "wrong");
    js["layouts"].push_back({{"a_order", l.a_order}, {"lbo", l.lbo}, {"sbo", l.sbo}, {"max_rel_err", rel},
                             {"max_other", max_other}, {"right", right}});
  }
  kern::WgmmaRates r;
  if (good) good = kern::wgmma_rates(&r, &err);
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
  std::printf("wgmma m64n8k32 e4m3: ns between an SM's instructions (1: each warpgroup's a dependent chain; 4: four\n"
              "independent accumulator chains a warpgroup), by warpgroups an SM:\n");
  std::printf("  %-8s %8s %8s %8s\n", "chains", "1 wg", "2 wg", "4 wg");
  for (int c = 0; c < 2; ++c)
    std::printf("  %-8d %8.2f %8.2f %8.2f\n", c ? 4 : 1, r.wgmma_sm_ns[c][0], r.wgmma_sm_ns[c][1], r.wgmma_sm_ns[c][2]);
  js["rates"] = {{"wgmma_ns", r.wgmma_ns}, {"mma_ns", r.mma_ns}, {"core_ns", r.core_ns}, {"wgmma_weights_per_ns_sm", r.wgmma_wpns},
                 {"mma_weights_per_ns_sm", r.mma_wpns}, {"core_weights_per_ns_sm", r.core_wpns},
                 {"wgmma_sm_ns_1chain_1_2_4wg", {r.wgmma_sm_ns[0][0], r.wgmma_sm_ns[0][1], r.wgmma_sm_ns[0][2]}},
                 {"wgmma_sm_ns_4chains_1_2_4wg", {r.wgmma_sm_ns[1][0], r.wgmma_sm_ns[1][1], r.wgmma_sm_ns[1][2]}}};
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
