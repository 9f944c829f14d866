// `rackserve bench mla-prefill`: the expanded MLA prefill attention kernel alone at
// DeepSeek-V2-Lite shapes (16 heads, q/k 192 = 128 nope + 64 rope, v 128), causal.
// Roofline first: the kernel is compute-bound, so the figure is TFLOP/s over the causal work
// only (every (query, visible key) pair costs 2 * (192 + 128) FLOPs: Q K^T and P V), and that as
// a % of the H200's dense bf16 tensor-core peak (~990 TFLOP/s).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/bench_commands.h"
#include "common/error.h"
#include "kernels/ops/mla_prefill_params.h"
#include "model/numerics.h"

namespace rs::bench {
namespace {

constexpr double kPeakTflops = 990.0;  // H200 SXM dense bf16 (no sparsity)

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("bench mla-prefill: ") + what + ": " + cudaGetErrorString(e));
}

// Uniform [-1, 1) bf16 values from a 64-bit LCG (fast enough for ~60 M values).
void fill_random(const cuda::DeviceBuffer& b, size_t count, uint64_t seed) {
  std::vector<uint16_t> h(count);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& v : h) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = f32_to_bf16(float(double(x >> 11) * 0x1.0p-53 * 2.0 - 1.0));
  }
  ok(cudaMemcpy(b.get(), h.data(), count * 2, cudaMemcpyHostToDevice), "upload");
}

void run(int iters, const std::string& json_path) {
  constexpr int heads = 16, nope = 128, rope = 64, vdim = 128, dk = nope + rope;
  struct Case { int start, T; };
  const std::vector<Case> cases = {{0, 1024}, {0, 4096}, {0, 8192}, {4096, 4096}};
  int maxL = 0;
  for (const Case& c : cases) maxL = std::max(maxL, c.start + c.T);
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "device properties");
  const auto q = bench_buffer(size_t(maxL) * heads * dk * 2), kv = bench_buffer(size_t(maxL) * heads * (nope + vdim) * 2),
             pe = bench_buffer(size_t(maxL) * rope * 2);
  fill_random(q, size_t(maxL) * heads * dk, 1);
  fill_random(kv, size_t(maxL) * heads * (nope + vdim), 2);
  fill_random(pe, size_t(maxL) * rope, 3);
  const auto out = bench_buffer(size_t(maxL) * heads * vdim * 2);
  cudaStream_t s;
  ok(cudaStreamCreate(&s), "stream");
  cudaEvent_t e0, e1;
  ok(cudaEventCreate(&e0), "event");
  ok(cudaEventCreate(&e1), "event");

  std::printf("bench mla-prefill: %s, heads %d, qk %d (%d nope + %d rope), v %d, causal, bf16; %d timed launches "
              "after 2 warm-up, median\n",
              prop.name, heads, dk, nope, rope, vdim, iters);
  std::printf("%-6s %-6s %12s %10s %8s\n", "start", "T", "median us", "TFLOP/s", "% peak");
  nlohmann::json js = nlohmann::json::array();
  for (const Case& c : cases) {
    double pairs = 0;  // (query, visible key) pairs: query i sees start + i + 1 keys
    for (int i = 0; i < c.T; ++i) pairs += double(c.start + i + 1);
    const double flops = 2.0 * heads * (dk + vdim) * pairs;
    rs::cuda::MlaPrefillParams p;
    p.q = static_cast<const __nv_bfloat16*>(q.get());  // the chunk's queries: rows [0, T)
    p.kv = static_cast<const __nv_bfloat16*>(kv.get());
    p.kpe = static_cast<const __nv_bfloat16*>(pe.get());
    p.out = static_cast<__nv_bfloat16*>(out.get());
    p.T = c.T;
    p.start = c.start;
    p.heads = heads;
    p.nope = nope;
    p.rope = rope;
    p.vdim = vdim;
    p.scale = 1.f / std::sqrt(float(dk));
    std::vector<double> t;
    for (int r = 0; r < iters + 2; ++r) {
      ok(cudaEventRecord(e0, s), "record");
      rs::cuda::launch_mla_prefill(p, s);
      ok(cudaEventRecord(e1, s), "record");
      ok(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      ok(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      if (r >= 2) t.push_back(ms * 1e-3);
    }
    std::sort(t.begin(), t.end());
    const double sec = t[t.size() / 2];
    const double tflops = flops / sec / 1e12;
    std::printf("%-6d %-6d %12.1f %10.1f %7.1f%%\n", c.start, c.T, sec * 1e6, tflops, 100.0 * tflops / kPeakTflops);
    js.push_back({{"start", c.start}, {"T", c.T}, {"median_us", sec * 1e6}, {"tflops", tflops},
                  {"pct_peak", 100.0 * tflops / kPeakTflops}});
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

}  // namespace

void add_mla_prefill(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("mla-prefill", "MLA prefill attention kernel alone at DeepSeek-V2-Lite shapes (TFLOP/s)");
  auto iters = std::make_shared<int>(10);
  auto json = std::make_shared<std::string>();
  cmd->add_option("--iters", *iters, "timed launches per case")->check(CLI::Range(1, 1000));
  cmd->add_option("--json", *json, "write the results as JSON");
  cmd->callback([iters, json] { run(*iters, *json); });
}

}  // namespace rs::bench
