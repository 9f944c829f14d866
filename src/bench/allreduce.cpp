// rackserve bench allreduce: the comm layer's all-reduces against NCCL, in the same run.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <sstream>

#include "backend/cuda/cuda_backend.h"
#include "bench/allreduce_runner.h"
#include "bench/bench_commands.h"
#include "common/error.h"
#include "parallel/comm.h"
#include "parallel/cuda_check.h"
#include "parallel/topology.h"

namespace rs::bench {
namespace {

struct AllReduceCliOptions {
  int tp = 0;  // 0: every GPU
  int trays = 1;
  std::string sizes = "1K,14K,64K,256K,512K,1M,4M,16M,64M";
  std::string dtype = "bf16";
  int reps = 15;
  bool no_pdl = false;
  bool no_nccl = false;
  std::string oneshot_max;
  std::string two_shot_max;
  std::string tray_first_max;
  bool hang_selftest = false;
  int fused_threads = 128;
  std::string fused_variant = "auto";
  int fused_span = 0;
  int fused_max_ctas = 0;  // 0: the comm default
  int fused_decode_ctas = 0;  // 0: the comm default
  int fused_decode_threads = 0;  // 0: the comm default
  int fused_decode_rows = 0;     // 0: the comm default
  bool fused_in_place = false;
};

// "14K" -> 14336; K, M, G are binary; an optional trailing B.
uint64_t parse_size(const std::string& text) {
  std::string s = text;
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b')) s.pop_back();
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': mult = 1ull << 10; s.pop_back(); break;
      case 'M': mult = 1ull << 20; s.pop_back(); break;
      case 'G': mult = 1ull << 30; s.pop_back(); break;
      default: break;
    }
  }
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw Error("--sizes: '" + text + "' is not a size (examples: 8, 1K, 14K, 64M)");
  const uint64_t v = std::stoull(s) * mult;
  if (v == 0) throw Error("--sizes: '" + text + "' is zero");
  return v;
}

std::vector<uint64_t> parse_sizes(const std::string& list) {
  std::vector<uint64_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(parse_size(item));
  if (out.empty()) throw Error("--sizes: empty list");
  return out;
}

std::string size_label(uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b) + "B";
}

std::string cell(const std::optional<double>& graph, const std::optional<double>& eager) {
  if (!graph) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f/%.2f", *graph, *eager);
  return buf;
}

std::string signed_us(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f", *a - *b);
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%MZ", std::gmtime(&t));
  return buf;
}

// Rank 0 of a 2-rank group runs alone: its spin-wait must end in the diagnostic and a trap.
void run_hang_selftest() {
  const int gpus = cuda_device_count(nullptr);
  auto topo = parallel::Topology::make(2, 1, std::min(gpus, 2));
  parallel::CommConfig cfg;
  cfg.enable_nccl = false;
  cfg.timeout_ns = 200ull * 1000 * 1000;
  parallel::Comm comm(topo, cfg);
  parallel::cuda_check(cudaSetDevice(topo.device_of(0)), "cudaSetDevice");
  void* buf = nullptr;
  parallel::cuda_check(cudaMalloc(&buf, 1024), "cudaMalloc");
  parallel::cuda_check(cudaMemset(buf, 0, 1024), "cudaMemset");
  cudaStream_t stream;
  parallel::cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  comm.all_reduce(0, buf, buf, 256, DType::BF16, stream, parallel::AllReduceAlgo::lamport_oneshot);
  const cudaError_t err = cudaDeviceSynchronize();
  std::fflush(stdout);
  if (err == cudaSuccess)
    throw Error("hang self-test: rank 0 finished without its peer: the spin-wait bound did not fire");
  std::printf("hang self-test: rank 0 stopped as designed: %s\n", cudaGetErrorString(err));
  std::fflush(stdout);
}

void run(const AllReduceCliOptions& o) {
  if (o.hang_selftest) {
    run_hang_selftest();
    return;
  }
  DType dtype;
  if (o.dtype == "bf16") dtype = DType::BF16;
  else if (o.dtype == "fp32") dtype = DType::F32;
  else throw Error("--dtype " + o.dtype + ": expected bf16 or fp32");
  if (o.reps < 1) throw Error("--reps must be >= 1");
  // Before CUDA starts: logical ranks sharing a GPU need their streams on distinct hardware
  // queues (see kManyHardwareQueues in tests/gpu/comm_test_util.h); the environment may override.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  const int gpus = cuda_device_count(nullptr);
  if (gpus < 1) throw Error("bench allreduce needs a CUDA GPU (found none)");
  const int tp = o.tp > 0 ? o.tp : std::max(gpus, 2);
  const auto topo = parallel::Topology::make(tp, o.trays, gpus);

  parallel::CommConfig cfg;
  cfg.pdl = !o.no_pdl;
  cfg.enable_nccl = !o.no_nccl;
  cfg.fused_threads = o.fused_threads;
  cfg.fused_span = o.fused_span;
  if (o.fused_max_ctas > 0) cfg.fused_max_ctas = o.fused_max_ctas;
  if (o.fused_decode_ctas > 0) cfg.fused_decode_ctas = o.fused_decode_ctas;
  if (o.fused_decode_threads > 0) cfg.fused_decode_threads = o.fused_decode_threads;
  if (o.fused_decode_rows > 0) cfg.fused_decode_rows = static_cast<uint32_t>(o.fused_decode_rows);
  if (o.fused_variant == "auto") cfg.fused_variant = parallel::FusedVariant::automatic;
  else if (o.fused_variant == "whole-row") cfg.fused_variant = parallel::FusedVariant::whole_row;
  else if (o.fused_variant == "cluster") cfg.fused_variant = parallel::FusedVariant::cluster;
  else throw Error("--fused-variant " + o.fused_variant + ": expected auto, whole-row or cluster");
  if (!o.oneshot_max.empty()) cfg.dispatch.oneshot_max_bytes = parse_size(o.oneshot_max);
  if (!o.two_shot_max.empty()) cfg.dispatch.two_shot_max_bytes = parse_size(o.two_shot_max);
  if (!o.tray_first_max.empty()) cfg.dispatch.tray_first_max_bytes = parse_size(o.tray_first_max);
  ArBenchOptions bopt;
  bopt.sizes = parse_sizes(o.sizes);
  bopt.dtype = dtype;
  bopt.reps = o.reps;
  bopt.fused_in_place = o.fused_in_place;
  parallel::Comm comm(topo, cfg);

  cudaDeviceProp prop{};
  parallel::cuda_check(cudaGetDeviceProperties(&prop, topo.device_of(0)), "cudaGetDeviceProperties");
  std::printf("rackserve bench allreduce  %s  %s  %s  pdl=%s  fused=%s  GPUs: %d x %s  nccl: %s\n",
              utc_now().c_str(), topo.describe().c_str(), o.dtype.c_str(), cfg.pdl ? "on" : "off",
              (std::string(parallel::fused_variant_name(cfg.fused_variant)) + "/" + std::to_string(cfg.fused_threads) +
               (cfg.fused_span ? " span " + std::to_string(cfg.fused_span) : std::string()) + " ctas " +
               std::to_string(cfg.fused_max_ctas) + " (rows <= " + std::to_string(cfg.fused_decode_rows) + ": " +
               std::to_string(cfg.fused_decode_ctas) + " x " + std::to_string(cfg.fused_decode_threads) + ")" +
               (o.fused_in_place ? " in-place" : "")).c_str(),
              topo.num_devices(), prop.name, comm.nccl_status().c_str());
  const auto results = run_allreduce_bench(comm, bopt);

  // Chained first: in a decode layer every all-reduce's input is the previous kernel's output,
  // so its latency is what a step pays. The independent figures (every call reading the same
  // input) are kept, labelled, for comparison with earlier runs.
  for (bool chained : {true, false}) {
    std::printf("\n%s: median us per call, graph/eager (%d reps)\n",
                chained ? "CHAINED (call i+1 reads call i's output: latency on a dependency chain)"
                        : "independent (every call reads the same input)",
                bopt.reps);
    std::printf("%-7s %-13s %-13s %-13s %-13s %-13s %-13s %-16s %-10s %s\n", "size", "oneshot", "fused", "twoshot",
                "trayfirst", "nccl", "auto", "auto picks", "fused-1sh", "best-graph vs nccl");
    for (const auto& r : results) {
      auto graph = [&](ArVariant v) {
        const ArTiming& t = r.timing[static_cast<int>(v)];
        return chained ? t.chain_graph_us : t.graph_us;
      };
      auto eager = [&](ArVariant v) {
        const ArTiming& t = r.timing[static_cast<int>(v)];
        return chained ? t.chain_eager_us : t.eager_us;
      };
      std::string ratio = "-";
      double best = 1e300;
      for (ArVariant v : {ArVariant::oneshot, ArVariant::two_shot, ArVariant::tray_first})
        if (graph(v)) best = std::min(best, *graph(v));
      if (graph(ArVariant::nccl) && best < 1e300) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2fx", *graph(ArVariant::nccl) / best);
        ratio = buf;
      }
      std::string cells[kArVariantCount];
      for (int v = 0; v < kArVariantCount; ++v) cells[v] = cell(graph(kArVariants[v]), eager(kArVariants[v]));
      std::printf("%-7s %-13s %-13s %-13s %-13s %-13s %-13s %-16s %-10s %s\n", size_label(r.bytes).c_str(),
                  cells[0].c_str(), cells[1].c_str(), cells[2].c_str(), cells[3].c_str(), cells[4].c_str(),
                  cells[5].c_str(), r.auto_choice.c_str(),
                  signed_us(graph(ArVariant::fused), graph(ArVariant::oneshot)).c_str(), ratio.c_str());
    }
  }
  for (const auto& r : results) {
    for (int v = 0; v < kArVariantCount; ++v)
      if (!r.timing[v].note.empty())
        std::printf("note: %s %s: %s\n", size_label(r.bytes).c_str(), variant_name(kArVariants[v]),
                    r.timing[v].note.c_str());
    if (r.fused_rows)
      std::printf("fused shape at %s: %u rows x %u\n", size_label(r.bytes).c_str(), r.fused_rows, r.fused_hidden);
  }
}

}  // namespace

void add_allreduce(CLI::App& bench) {
  auto opts = std::make_shared<AllReduceCliOptions>();
  auto* cmd = bench.add_subcommand(
      "allreduce", "all-reduce latency (chained and independent calls): Lamport one-shot, fused AR+residual+RMSNorm, two-shot, tray-first, NCCL");
  cmd->add_option("--tp", opts->tp, "ranks (default: every GPU, at least 2); more ranks than GPUs share GPUs");
  cmd->add_option("--trays", opts->trays, "trays the ranks are grouped into (consecutive ranks)");
  cmd->add_option("--sizes", opts->sizes, "message sizes in bytes, K/M suffixes (default 1K,14K,...,64M)");
  cmd->add_option("--dtype", opts->dtype, "bf16 or fp32");
  cmd->add_option("--reps", opts->reps, "timed repetitions per cell (median reported)");
  cmd->add_flag("--no-pdl", opts->no_pdl, "launch without programmatic dependent launch");
  cmd->add_flag("--no-nccl", opts->no_nccl, "do not load NCCL");
  cmd->add_option("--oneshot-max", opts->oneshot_max, "dispatcher: largest one-shot message");
  cmd->add_option("--two-shot-max", opts->two_shot_max, "dispatcher: largest two-shot message (NCCL above)");
  cmd->add_option("--tray-first-max", opts->tray_first_max,
                  "dispatcher: with --trays > 1, largest message sent tray-first (default 0: never)");
  cmd->add_option("--fused-threads", opts->fused_threads, "fused cluster kernel: least vectors per row chunk (multiple of 32, 32..512)");
  cmd->add_option("--fused-max-ctas", opts->fused_max_ctas, "fused kernels: grid size cap (0: the default)");
  cmd->add_option("--fused-decode-ctas", opts->fused_decode_ctas,
                  "fused decode kernel: grid (0: the default, 2)");
  cmd->add_option("--fused-decode-threads", opts->fused_decode_threads,
                  "fused decode kernel: threads a CTA at most (0: the default, 512)");
  cmd->add_option("--fused-decode-rows", opts->fused_decode_rows,
                  "fused op: calls of up to this many rows take the decode kernel (0: the default, 1)");
  cmd->add_flag("--fused-in-place", opts->fused_in_place,
                "fused op: residual_out is the residual buffer (in place) instead of a second buffer");
  cmd->add_option("--fused-span", opts->fused_span, "fused cluster kernel: CTAs per row (0: chosen from rows and grid)");
  cmd->add_option("--fused-variant", opts->fused_variant,
                  "fused kernel: auto (whole-row up to 1024 vectors a row, else cluster), whole-row, cluster");
  cmd->add_flag("--hang-selftest", opts->hang_selftest,
                "run rank 0 of 2 alone: the bounded spin-wait must print its diagnostic and trap");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace rs::bench
