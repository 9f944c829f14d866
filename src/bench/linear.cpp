// `rackserve bench linear`: the matmul kernels at DeepSeek-V2-Lite shapes on this GPU.
// Roofline first: a device-to-device copy measured in the same run (bytes read + written over
// time) is the bandwidth ceiling; each decode-sized call reports weight bytes over its median
// time and that as a % of the copy bandwidth. Large-m calls report TFLOP/s. Every call runs
// inside a CUDA graph of many calls rotating over enough weight copies that L2 (~50 MB) cannot
// serve them, which is how the executor runs them.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/linear.h"
#include "bench/bench_buffer.h"
#include "bench/bench_commands.h"
#include "bench/bench_stats.h"
#include "common/error.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/moe_decode_launch.h"

namespace rs::bench {
namespace {

using rs::cuda::DeviceMatrix;
using rs::cuda::WeightType;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("bench linear: ") + what + ": " + cudaGetErrorString(e));
}

// --gemm-ab: time eagerly (stream order, no graph), because the cuBLASLt expert path reads the
// routing back to the host and cannot be captured; both backends are timed the same way.
bool g_eager = false;

double time_eager(cudaStream_t s, int calls, int reps, const std::function<void(int)>& body) {
  for (int i = 0; i < std::min(calls, 4); ++i) body(i);
  ok(cudaStreamSynchronize(s), "warm-up");
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    ok(cudaEventRecord(a, s), "record");
    for (int i = 0; i < calls; ++i) body(i);
    ok(cudaEventRecord(b, s), "record");
    ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms * 1e-3 / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// Median seconds per call of `calls` invocations of body(i) captured into one graph.
double time_graph(cudaStream_t s, int calls, int reps, const std::function<void(int)>& body) {
  if (g_eager) return time_eager(s, calls, reps, body);
  for (int i = 0; i < std::min(calls, 4); ++i) body(i);  // one-time setup outside capture
  ok(cudaStreamSynchronize(s), "warm-up");
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) body(i);
  ok(cudaStreamEndCapture(s, &g), "end capture");
  ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  ok(cudaGraphLaunch(ge, s), "replay");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    ok(cudaEventRecord(a, s), "record");
    ok(cudaGraphLaunch(ge, s), "replay");
    ok(cudaEventRecord(b, s), "record");
    ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms * 1e-3 / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return median(t);
}

double copy_bandwidth(cudaStream_t s, int reps) {
  const size_t bytes = size_t(2) << 30;
  const auto a = bench_buffer(bytes), b = bench_buffer(bytes);
  ok(cudaMemsetAsync(a.get(), 1, bytes, s), "memset");
  cudaEvent_t e0, e1;
  ok(cudaEventCreate(&e0), "event");
  ok(cudaEventCreate(&e1), "event");
  std::vector<double> t;
  for (int r = 0; r < reps + 2; ++r) {
    ok(cudaEventRecord(e0, s), "record");
    ok(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s), "copy");
    ok(cudaEventRecord(e1, s), "record");
    ok(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (r >= 2) t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * bytes / median(t);  // read + write
}

// The current device and a non-blocking stream, the set-up every `bench linear` mode starts from.
struct BenchGpu {
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;
  BenchGpu() {
    int dev = 0;
    ok(cudaGetDevice(&dev), "device");
    ok(cudaGetDeviceProperties(&prop, dev), "properties");
    ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  }
  ~BenchGpu() { cudaStreamDestroy(stream); }
  BenchGpu(const BenchGpu&) = delete;
  BenchGpu& operator=(const BenchGpu&) = delete;

  // The bandwidth roofline of this run (measured, then printed in the header line).
  double copy_roofline(int reps) const {
    const double copy_bw = copy_bandwidth(stream, reps);
    std::printf("GPU %s, %d SMs, L2 %.0f MB; device-to-device copy %.0f GB/s (read+write)\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize / 1e6, copy_bw / 1e9);
    return copy_bw;
  }
};

struct Row {
  std::string name, type;
  int m;
  std::string shape;
  double bytes, flops, seconds;
};

// A weight of `rows x cols` with `copies` rotating replicas.
struct Weights {
  std::vector<cuda::DeviceBuffer> data, scales;
  std::vector<DeviceMatrix> dm;
  double bytes_each = 0;
  Weights(WeightType t, int64_t rows, int64_t cols, int copies, uint64_t seed, cudaStream_t s) {
    const bool fp8 = t == WeightType::FP8_E4M3_BLOCK;
    const size_t bytes = size_t(rows * cols) * (fp8 ? 1 : 2);
    const size_t sbytes = size_t((rows + 127) / 128) * size_t((cols + 127) / 128) * 4;
    bytes_each = double(bytes) + (fp8 ? double(sbytes) : 0.0);
    for (int c = 0; c < copies; ++c) {
      data.push_back(bench_buffer(bytes));
      kern::launch_fill_random(data.back().get(), bytes, seed + c, fp8, s);
      DeviceMatrix w;
      w.type = t;
      w.rows = rows;
      w.cols = cols;
      w.data = data.back().get();
      if (fp8) {
        scales.push_back(bench_buffer(sbytes));
        std::vector<float> h(sbytes / 4, 0.01f);
        ok(cudaMemcpy(scales.back().get(), h.data(), sbytes, cudaMemcpyHostToDevice), "scales");
        w.scale_inv = static_cast<const float*>(scales.back().get());
      }
      dm.push_back(w);
    }
  }
};

int copies_for(double bytes) { return int(std::clamp(512e6 / bytes, 1.0, 64.0)); }

Row bench_dense(const std::string& name, WeightType t, int64_t rows, int64_t cols, int m, int reps, cudaStream_t s) {
  const bool fp8 = t == WeightType::FP8_E4M3_BLOCK;
  const double wbytes = double(rows) * cols * (fp8 ? 1 : 2);
  const int copies = m > 64 ? 1 : copies_for(wbytes);
  Weights w(t, rows, cols, copies, 1000 + rows + cols, s);
  const auto x = bench_buffer(size_t(m) * cols * 2), y = bench_buffer(size_t(m) * rows * 2);
  kern::launch_fill_random(x.get(), size_t(m) * cols * 2, 7, false, s);
  const size_t wsb = rs::cuda::linear_workspace_bytes(m, rows, cols);
  const auto ws = bench_buffer(wsb);
  const int calls = std::max(copies, m > 64 ? 5 : 40);
  const double sec = time_graph(s, calls, reps, [&](int i) {
    rs::cuda::linear(w.dm[i % copies], static_cast<const __nv_bfloat16*>(x.get()), m,
                     static_cast<__nv_bfloat16*>(y.get()), {ws.get(), wsb}, s);
  });
  return {name, fp8 ? "fp8" : "bf16", m, std::to_string(rows) + "x" + std::to_string(cols), w.bytes_each,
          2.0 * m * rows * cols, sec};
}

// n_shared > 0: V2-Lite's two shared experts folded into the same call (moe_can_fuse_shared).
Row bench_moe(const std::string& name, WeightType t, int m, int reps, cudaStream_t s, int n_shared = 0) {
  const int E = 64, hidden = 2048, inter = 1408, top_k = 6;  // DeepSeek-V2-Lite
  const bool fp8 = t == WeightType::FP8_E4M3_BLOCK;
  const double per_expert = 3.0 * inter * hidden * (fp8 ? 1 : 2);
  double shared_bytes = 0;
  const int copies = m <= 8 ? 2 : 1;
  std::vector<std::unique_ptr<Weights>> mats;  // [copy][gate, up, down] each E replicas
  std::vector<cuda::DeviceBuffer> arrays;
  std::vector<rs::cuda::MoeExperts> sets;
  for (int c = 0; c < copies; ++c) {
    rs::cuda::MoeExperts e;
    e.num_experts = E;
    e.hidden = hidden;
    e.inter = inter;
    e.type = t;
    const DeviceMatrix** slots[3] = {&e.gate, &e.up, &e.down};
    for (int k = 0; k < 3; ++k) {
      mats.push_back(std::make_unique<Weights>(t, k == 2 ? hidden : inter, k == 2 ? inter : hidden, E, 50 + 7 * c + k, s));
      arrays.push_back(bench_buffer(sizeof(DeviceMatrix) * E));
      ok(cudaMemcpy(arrays.back().get(), mats.back()->dm.data(), sizeof(DeviceMatrix) * E, cudaMemcpyHostToDevice), "experts");
      *slots[k] = static_cast<const DeviceMatrix*>(arrays.back().get());
    }
    if (n_shared > 0) {
      DeviceMatrix* sh[3] = {&e.shared_gate, &e.shared_up, &e.shared_down};
      shared_bytes = 0;
      for (int k = 0; k < 3; ++k) {
        const int64_t r = k == 2 ? hidden : int64_t(n_shared) * inter, c2 = k == 2 ? int64_t(n_shared) * inter : hidden;
        mats.push_back(std::make_unique<Weights>(t, r, c2, 1, 90 + 7 * c + k, s));
        *sh[k] = mats.back()->dm[0];
        shared_bytes += mats.back()->bytes_each;
      }
      e.n_shared = n_shared;
      if (!rs::cuda::moe_can_fuse_shared(e, m)) throw Error("bench linear: shared experts not foldable at m=" + std::to_string(m));
    }
    sets.push_back(e);
  }
  // Four routings (distinct experts per token, random weights) rotated between calls.
  std::mt19937 gen(42);
  const int nroute = 4;
  std::vector<cuda::DeviceBuffer> ids, wts;
  double unique_sum = 0;
  for (int r = 0; r < nroute; ++r) {
    std::vector<int> hid(size_t(m) * top_k);
    std::vector<float> hw(size_t(m) * top_k);
    std::vector<char> used(E, 0);
    for (int t2 = 0; t2 < m; ++t2) {
      std::vector<int> perm(E);
      for (int i = 0; i < E; ++i) perm[i] = i;
      for (int j = 0; j < top_k; ++j) {
        std::swap(perm[j], perm[j + gen() % (E - j)]);
        hid[size_t(t2) * top_k + j] = perm[j];
        hw[size_t(t2) * top_k + j] = 1.0f / top_k;
        used[perm[j]] = 1;
      }
    }
    unique_sum += std::count(used.begin(), used.end(), 1);
    ids.push_back(bench_buffer(hid.size() * 4));
    wts.push_back(bench_buffer(hw.size() * 4));
    ok(cudaMemcpy(ids.back().get(), hid.data(), hid.size() * 4, cudaMemcpyHostToDevice), "ids");
    ok(cudaMemcpy(wts.back().get(), hw.data(), hw.size() * 4, cudaMemcpyHostToDevice), "weights");
  }
  const auto x = bench_buffer(size_t(m) * hidden * 2), out = bench_buffer(size_t(m) * hidden * 2);
  kern::launch_fill_random(x.get(), size_t(m) * hidden * 2, 9, false, s);
  const size_t wsb = rs::cuda::moe_workspace_bytes(m, top_k, sets[0]);
  const auto ws = bench_buffer(wsb);
  const int calls = m <= 64 ? 40 : 4;
  const double sec = time_graph(s, calls, reps, [&](int i) {
    rs::cuda::moe_experts(sets[i % copies], static_cast<const __nv_bfloat16*>(x.get()), m, top_k,
                          static_cast<const int*>(ids[i % nroute].get()), static_cast<const float*>(wts[i % nroute].get()),
                          static_cast<__nv_bfloat16*>(out.get()), {ws.get(), wsb}, s);
  });
  const double bytes = unique_sum / nroute * per_expert + shared_bytes;
  return {name, fp8 ? "fp8" : "bf16", m, n_shared ? "64x[3x1408x2048] top6+2sh" : "64x[3x1408x2048] top6", bytes,
          2.0 * m * (top_k + n_shared) * 3.0 * inter * hidden, sec};
}

// Large-m bf16 GEMMs on the built-in kernels against cuBLASLt, side by side (eager timing):
// the V2-Lite prefill shapes at m = 8192, an m sweep for the auto thresholds, and the routed
// experts with 1 and 4 lanes.
void run_gemm_ab(bool quick, const std::string& json_path) {
  const BenchGpu gpu;
  const cudaDeviceProp& prop = gpu.prop;
  cudaStream_t s = gpu.stream;
  const int reps = quick ? 5 : 11;
  g_eager = true;
  using rs::cuda::GemmBackend;
  const GemmBackend saved = rs::cuda::gemm_backend();
  const int saved_lanes = rs::cuda::cublaslt_lanes();
  struct Ab { std::string op, shape; int m; double flops, own_s, lt_s; int lanes; };
  std::vector<Ab> out;
  const WeightType B = WeightType::BF16;
  auto dense = [&](const std::string& name, int64_t rows, int64_t cols, int m) {
    rs::cuda::set_gemm_backend(GemmBackend::Own);
    const Row own = bench_dense(name, B, rows, cols, m, reps, s);
    rs::cuda::set_gemm_backend(GemmBackend::CublasLt);
    const Row lt = bench_dense(name, B, rows, cols, m, reps, s);
    out.push_back({name, own.shape, m, own.flops, own.seconds, lt.seconds, 0});
  };
  auto moe = [&](int m, std::vector<int> lanes) {
    rs::cuda::set_gemm_backend(GemmBackend::Own);
    const Row own = bench_moe("moe_experts", B, m, reps, s);
    rs::cuda::set_gemm_backend(GemmBackend::CublasLt);
    for (int l : lanes) {
      rs::cuda::set_cublaslt_lanes(l);
      const Row lt = bench_moe("moe_experts", B, m, reps, s);
      out.push_back({"moe_experts", own.shape, m, own.flops, own.seconds, lt.seconds, l});
    }
  };
  struct Shape { const char* name; int64_t rows, cols; };
  // What one V2-Lite prefill layer runs through linear() (the MLPs call gate and up separately).
  const Shape prefill[] = {{"q_proj", 3072, 2048},      {"kv_a_proj", 576, 2048},     {"kv_b_proj", 4096, 512},
                           {"o_proj", 2048, 2048},      {"shared_gate", 2816, 2048},  {"shared_down", 2048, 2816},
                           {"dense_gate", 10944, 2048}, {"dense_down", 2048, 10944}};
  for (const auto& sh : prefill) dense(sh.name, sh.rows, sh.cols, 8192);
  for (int m : {16, 32, 64, 128, 256, 512, 1024, 2048}) {
    dense("o_proj", 2048, 2048, m);
    dense("shared_gate", 2816, 2048, m);
    if (!quick) dense("kv_b_proj", 4096, 512, m);
  }
  moe(8192, {1, 2, 4, 8});
  for (int m : {64, 128, 256, 512, 1024, 2048}) moe(m, {4});
  rs::cuda::set_gemm_backend(saved);
  rs::cuda::set_cublaslt_lanes(saved_lanes);
  g_eager = false;

  std::printf("GPU %s, %d SMs; bf16, eager stream timing (median of %d), own = built-in mma.sync kernels\n", prop.name,
              prop.multiProcessorCount, reps);
  std::printf("%-14s %5s %-22s %5s %10s %9s %10s %9s %7s\n", "op", "m", "shape", "lanes", "own us", "TFLOP/s",
              "cuBLASLt us", "TFLOP/s", "speedup");
  nlohmann::json js;
  js["gpu"] = prop.name;
  for (const auto& r : out) {
    std::printf("%-14s %5d %-22s %5s %10.1f %9.1f %10.1f %9.1f %6.2fx\n", r.op.c_str(), r.m, r.shape.c_str(),
                r.lanes ? std::to_string(r.lanes).c_str() : "-", r.own_s * 1e6, r.flops / r.own_s / 1e12, r.lt_s * 1e6,
                r.flops / r.lt_s / 1e12, r.own_s / r.lt_s);
    js["rows"].push_back({{"op", r.op}, {"m", r.m}, {"shape", r.shape}, {"lanes", r.lanes}, {"own_us", r.own_s * 1e6},
                          {"cublaslt_us", r.lt_s * 1e6}, {"own_TFLOPs", r.flops / r.own_s / 1e12},
                          {"cublaslt_TFLOPs", r.flops / r.lt_s / 1e12}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

void run(bool quick, const std::string& json_path) {
  const BenchGpu gpu;
  const cudaDeviceProp& prop = gpu.prop;
  cudaStream_t s = gpu.stream;
  const int reps = quick ? 5 : 15;
  const double copy_bw = gpu.copy_roofline(reps);

  std::vector<Row> rows;
  const WeightType B = WeightType::BF16, F = WeightType::FP8_E4M3_BLOCK;
  // Decode (m = 1) shapes of one DeepSeek-V2-Lite layer, bf16 and FP8.
  struct Shape { const char* name; int64_t rows, cols; };
  const Shape decode[] = {{"q_proj", 3072, 2048},        {"kv_a_proj", 576, 2048},
                          {"kv_b_proj", 4096, 512},      {"o_proj", 2048, 2048},
                          {"shared_gate_up", 5632, 2048}, {"shared_down", 2048, 2816},
                          {"dense_gate_up", 21888, 2048}, {"dense_down", 2048, 10944},
                          {"lm_head", 102400, 2048}};
  // Plain stream order first (what a chain of kernels without PDL gets), then with PDL, where
  // each call's weight loads overlap the previous call's tail.
  kern::set_matmul_pdl(false);
  for (const auto& sh : decode) rows.push_back(bench_dense(std::string(sh.name) + "/nopdl", B, sh.rows, sh.cols, 1, reps, s));
  rows.push_back(bench_moe("moe_experts/nopdl", B, 1, reps, s));
  kern::set_matmul_pdl(true);
  for (WeightType t : {B, F})
    for (const auto& sh : decode) rows.push_back(bench_dense(sh.name, t, sh.rows, sh.cols, 1, reps, s));
  rows.push_back(bench_moe("moe_experts", B, 1, reps, s));
  rows.push_back(bench_moe("moe_experts", F, 1, reps, s));
  // Decode expert kernels (expert_decode.cuh, default) against the earlier ones, and with the
  // two shared experts folded in (replacing shared_gate_up + swiglu + shared_down).
  for (int m : {1, 64})
    for (WeightType t : {B, F}) {
      rows.push_back(bench_moe("moe+shared", t, m, reps, s, 2));
      kern::set_expert_decode(false);
      rows.push_back(bench_moe("moe_experts/old", t, m, reps, s));
      kern::set_expert_decode(true);
    }
  // The CUDA-core GEMV (fallback) on the same shapes, for comparison.
  kern::set_gemv_tc(false);
  for (WeightType t : {B, F})
    for (const auto& sh : decode) rows.push_back(bench_dense(std::string(sh.name) + "/cudacore", t, sh.rows, sh.cols, 1, reps, s));
  kern::set_gemv_tc(true);
  // GEMV against the tensor-core path for a few tokens: where the dispatch threshold belongs.
  const kern::GemvThresholds defaults = kern::gemv_thresholds();
  for (int m : {1, 2, 4, 8}) {
    for (int path = 0; path < 2; ++path) {
      kern::set_gemv_max_tokens(path == 0 ? 8 : 0, path == 0 ? 8 : 0);
      const std::string suffix = path == 0 ? "/gemv" : "/mma";
      if (m > 1) {
        rows.push_back(bench_dense("o_proj" + suffix, B, 2048, 2048, m, reps, s));
        rows.push_back(bench_dense("dense_gate_up" + suffix, B, 21888, 2048, m, reps, s));
      }
      rows.push_back(bench_moe("moe_experts" + suffix, B, m, reps, s));
      if (m == 1) rows.push_back(bench_moe("moe_experts" + suffix, F, m, reps, s));
    }
  }
  kern::set_gemv_thresholds(defaults);
  for (int m : {16, 64}) {
    rows.push_back(bench_dense("o_proj", B, 2048, 2048, m, reps, s));
    rows.push_back(bench_dense("dense_gate_up", B, 21888, 2048, m, reps, s));
  }
  rows.push_back(bench_dense("q_proj", B, 3072, 2048, 64, reps, s));
  rows.push_back(bench_moe("moe_experts", B, 16, reps, s));
  rows.push_back(bench_moe("moe_experts", B, 64, reps, s));
  rows.push_back(bench_moe("moe_experts", F, 64, reps, s));
  // Prefill (8K tokens): compute bound.
  rows.push_back(bench_dense("o_proj", B, 2048, 2048, 8192, reps, s));
  rows.push_back(bench_dense("q_proj", B, 3072, 2048, 8192, reps, s));
  rows.push_back(bench_dense("dense_gate_up", B, 21888, 2048, 8192, reps, s));
  rows.push_back(bench_dense("o_proj", F, 2048, 2048, 8192, reps, s));
  rows.push_back(bench_moe("moe_experts", B, 8192, reps, s));
  rows.push_back(bench_moe("moe_experts", F, 8192, reps, s));

  nlohmann::json js;
  js["gpu"] = prop.name;
  js["copy_GBps"] = copy_bw / 1e9;
  std::printf("%-20s %-5s %5s %-22s %10s %9s %8s %7s %8s\n", "op", "type", "m", "shape", "MB", "us", "GB/s",
              "%copy", "TFLOP/s");
  for (const auto& r : rows) {
    const double gbps = r.bytes / r.seconds / 1e9;
    const double pct = 100.0 * r.bytes / r.seconds / copy_bw;
    const double tf = r.flops / r.seconds / 1e12;
    std::printf("%-20s %-5s %5d %-22s %10.1f %9.1f %8.0f %6.1f%% %8.1f\n", r.name.c_str(), r.type.c_str(), r.m,
                r.shape.c_str(), r.bytes / 1e6, r.seconds * 1e6, gbps, pct, tf);
    js["rows"].push_back({{"op", r.name}, {"type", r.type}, {"m", r.m}, {"shape", r.shape}, {"bytes", r.bytes},
                          {"us", r.seconds * 1e6}, {"GBps", gbps}, {"pct_copy", pct}, {"TFLOPs", tf}});
  }
  // Matmul-only time of one V2-Lite decode token (m = 1): 27 layers of attention projections,
  // 26 MoE layers (routed top-6 + shared), 1 dense MLP layer, lm_head (bf16 in both runs).
  for (const std::string variant : {"bf16/nopdl", "bf16", "fp8"}) {
    const std::string ty = variant.substr(0, variant.find('/'));
    const std::string suffix = variant.find('/') == std::string::npos ? "" : variant.substr(variant.find('/'));
    double sec = 0, bytes = 0;
    auto add = [&](const std::string& n, const std::string& type, double count) {
      for (const auto& r : rows)
        if (r.name == n + suffix && r.type == type && r.m == 1) { sec += count * r.seconds; bytes += count * r.bytes; }
    };
    for (const char* n : {"q_proj", "kv_a_proj", "kv_b_proj", "o_proj"}) add(n, ty, 27);
    add("shared_gate_up", ty, 26);
    add("shared_down", ty, 26);
    add("moe_experts", ty, 26);
    add("dense_gate_up", ty, 1);
    add("dense_down", ty, 1);
    add("lm_head", "bf16", 1);
    std::printf("V2-Lite decode, matmuls only, %s: %.3f ms/token (%.0f tok/s), %.2f GB, %.1f%% of copy bandwidth\n",
                variant.c_str(), sec * 1e3, 1.0 / sec, bytes / 1e9, 100.0 * bytes / sec / copy_bw);
    js["decode_estimate"][variant] = {{"ms", sec * 1e3}, {"tok_s", 1.0 / sec}, {"GB", bytes / 1e9},
                                      {"pct_copy", 100.0 * bytes / sec / copy_bw}};
  }
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

}  // namespace

// Decode-time expert kernels only (a short device run): the routed experts at m = 1 and 64 on
// the decode kernels (default), on the earlier ones (/old), and with the two shared experts
// folded in, next to the dense shared-expert GEMVs that the folding replaces.
void run_experts(bool quick, const std::string& json_path) {
  const BenchGpu gpu;
  const cudaDeviceProp& prop = gpu.prop;
  cudaStream_t s = gpu.stream;
  const int reps = quick ? 5 : 15;
  const double copy_bw = gpu.copy_roofline(reps);
  const WeightType B = WeightType::BF16, F = WeightType::FP8_E4M3_BLOCK;
  std::vector<Row> rows;
  for (WeightType t : {B, F}) {
    for (int m : {1, 64}) {
      rows.push_back(bench_moe("moe_experts", t, m, reps, s));
      rows.push_back(bench_moe("moe+shared", t, m, reps, s, 2));
      kern::set_expert_decode(false);
      rows.push_back(bench_moe("moe_experts/old", t, m, reps, s));
      kern::set_expert_decode(true);
      rows.push_back(bench_dense("shared_gate_up", t, 5632, 2048, m, reps, s));
      rows.push_back(bench_dense("shared_down", t, 2048, 2816, m, reps, s));
    }
  }
  nlohmann::json js;
  js["gpu"] = prop.name;
  js["copy_GBps"] = copy_bw / 1e9;
  std::printf("%-20s %-5s %5s %-26s %8s %9s %8s %7s\n", "op", "type", "m", "shape", "MB", "us", "GB/s", "%copy");
  for (const auto& r : rows) {
    const double gbps = r.bytes / r.seconds / 1e9, pct = 100.0 * r.bytes / r.seconds / copy_bw;
    std::printf("%-20s %-5s %5d %-26s %8.1f %9.1f %8.0f %6.1f%%\n", r.name.c_str(), r.type.c_str(), r.m,
                r.shape.c_str(), r.bytes / 1e6, r.seconds * 1e6, gbps, pct);
    js["rows"].push_back({{"op", r.name}, {"type", r.type}, {"m", r.m}, {"shape", r.shape}, {"bytes", r.bytes},
                          {"us", r.seconds * 1e6}, {"GBps", gbps}, {"pct_copy", pct}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << js.dump(2) << "\n";
}

void add_linear(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("linear", "matmul kernels (linear, moe_experts) at DeepSeek-V2-Lite shapes");
  auto quick = std::make_shared<bool>(false);
  auto json = std::make_shared<std::string>();
  cmd->add_flag("--quick", *quick, "fewer repetitions");
  cmd->add_option("--json", *json, "write the results as JSON");
  auto experts = std::make_shared<bool>(false);
  cmd->add_flag("--experts", *experts, "decode expert kernels only: decode vs earlier kernels, shared experts folded in");
  auto ab = std::make_shared<bool>(false);
  cmd->add_flag("--gemm-ab", *ab, "large-m bf16 GEMMs only: built-in kernels against cuBLASLt, side by side");
  cmd->callback([quick, json, ab, experts] {
    if (*ab) run_gemm_ab(*quick, *json);
    else if (*experts) run_experts(*quick, *json);
    else run(*quick, *json);
  });
}

}  // namespace rs::bench
