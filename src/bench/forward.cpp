// rackserve bench forward: times Backend::execute (the real step: metadata upload, the forward
// kernels or decode graph, lm_head, GPU sampling, the one sync) and sets it against the HBM
// roofline: bytes the step must read (weights it touched + latent KV) over a device-to-device
// copy bandwidth measured in the same run.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bench/bench_commands.h"
#include "bench/routing_carry_over.h"
#include "bench/timeline_report.h"
#include "bench/wait_probe_report.h"
#include "kernels/common/l2_sides.h"
#include "common/error.h"
#include "common/read_file.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace rs::bench {

namespace {

struct ForwardArgs {
  std::string model, config, load_format = "auto", phase = "decode", dtype = "auto", quantization, json;
  int batch = 1, context = 1024, tokens = 0, iters = 20, warmup = 3;
  uint64_t seed = 0;
  bool ablate = false;
  bool repeat_step = false;
  bool no_overlap = false;  // decode: each step read before the next is launched
  std::string timeline;  // CSV of one decode graph replay's kernels (CUPTI)
  std::string wait_probe;  // CSV of one decode graph replay's PDL waits (a RS_WAIT_PROBE build)
  std::string wait_probe_blocks;  // and every block's record of that replay
};

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("bench forward: ") + what + ": " + cudaGetErrorString(e));
}

// Device-to-device copy of 1 GiB (read + write counted), median of 7, timed with events.
double copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  cuda_ok(cudaMalloc(&a, bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 8; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cuda_ok(cudaEventSynchronize(e1), "copy");
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i > 0) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(bytes) / (ms[ms.size() / 2] * 1e-3);
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
  return v[i];
}

void run_forward(const ForwardArgs& a) {
  using clock = std::chrono::steady_clock;
  if (a.model.empty() == a.config.empty()) throw Error("give exactly one of --model DIR and --config FILE");
  if (a.load_format != "auto" && a.load_format != "dummy")
    throw Error("--load-format must be auto or dummy (got '" + a.load_format + "')");
  if (!a.config.empty() && a.load_format != "dummy") throw Error("--config needs --load-format dummy");
  if (a.phase != "decode" && a.phase != "prefill") throw Error("--phase must be decode or prefill (got '" + a.phase + "')");
  if (a.dtype != "auto" && a.dtype != "bf16" && a.dtype != "fp8") throw Error("--dtype must be bf16 or fp8 (got '" + a.dtype + "')");
  if (!a.quantization.empty() && a.quantization != "fp8")
    throw Error("--quantization: only fp8 is supported (got '" + a.quantization + "')");
  if (a.batch < 1) throw Error("--batch must be >= 1");
  if (a.context < 1) throw Error("--context must be >= 1");
  if (a.iters < 1 || a.warmup < 0) throw Error("--iters must be >= 1 and --warmup >= 0");
  const int T = a.phase == "decode" ? 1 : (a.tokens > 0 ? a.tokens : a.context);
  if (a.phase == "decode" && a.tokens > 1) throw Error("--tokens must be 1 for --phase decode");
  if (a.phase != "decode" && (a.repeat_step || a.no_overlap))
    throw Error(std::string(a.repeat_step ? "--repeat-step" : "--no-overlap") + ": decode steps only");
  if (T > a.context) throw Error("--tokens (" + std::to_string(T) + ") exceeds --context (" + std::to_string(a.context) + ")");

  ModelSpec spec = a.config.empty() ? load_model_spec(a.model) : parse_model_spec(read_text_file(a.config), a.config);
  const bool want_fp8 = a.quantization == "fp8" || a.dtype == "fp8";
  if (a.dtype == "bf16" && spec.quant.fp8_block)
    throw Error("--dtype bf16: this checkpoint is FP8 (dequantised bf16 serving is not offered)");
  if (want_fp8) {
    spec.quant.fp8_block = true;  // block-FP8 linear weights, quantised at upload if stored in bf16
    spec.quant.block_rows = spec.quant.block_cols = 128;
  }
  if (a.context > spec.max_position_embeddings)
    throw Error("--context " + std::to_string(a.context) + " exceeds max_position_embeddings " +
                std::to_string(spec.max_position_embeddings));
  std::string why;
  if (cuda_device_count(&why) == 0) throw Error("bench forward needs a GPU (" + why + ")");

  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "device properties");
  const double copy_bw = copy_bandwidth();

  const auto t_load = clock::now();
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Weights> weights;
  if (a.load_format == "dummy") {
    backend = make_cuda_backend_dummy(spec, a.seed);
  } else {
    weights = Weights::load(a.model, spec);
    backend = make_cuda_backend(spec, *weights);
  }
  const double load_s = std::chrono::duration<double>(clock::now() - t_load).count();

  const int block = 16;
  // Decode steps overlapped as the engine runs them (EngineConfig::overlap_steps): step it + 1 is
  // launched, its token taken on the device from step it's sample, before step it is read; a
  // step's time is then the interval between two reads. --no-overlap: launch, read, launch.
  // Overlapped, two more steps run than are timed: the last two (below).
  const bool overlap = a.phase == "decode" && !a.no_overlap;
  const int steps = a.warmup + a.iters + (overlap ? 2 : 0);
  const int max_len = a.context + (a.phase == "decode" ? steps : 0) + 1;
  const int blocks_per_seq = (max_len + block - 1) / block;
  KvConfig kv;
  kv.block_size = block;
  kv.num_blocks = blocks_per_seq * a.batch;
  if (backend->max_kv_blocks(block, 0) < kv.num_blocks)
    throw Error("bench forward: batch " + std::to_string(a.batch) + " x context " + std::to_string(max_len) +
                " needs " + std::to_string(kv.num_blocks) + " KV blocks; the GPU holds " +
                std::to_string(backend->max_kv_blocks(block, 0)));
  backend->init_kv(kv);

  // B sequences with their own blocks; the KV before start_pos is whatever the cache holds
  // (zeros): attention reads it all the same, which is what the step's cost depends on.
  std::vector<std::vector<int32_t>> tables(a.batch), toks(a.batch);
  std::vector<SamplingParams> params(a.batch);
  for (int b = 0; b < a.batch; ++b) {
    for (int k = 0; k < blocks_per_seq; ++k) tables[b].push_back(b * blocks_per_seq + k);
    for (int k = 0; k < T; ++k) toks[b].push_back(int32_t((1000003ull * (b * 7919 + k + 1)) % spec.vocab_size));
    params[b].temperature = 0.0f;  // greedy: the sampler kernel still runs every step
  }
  std::vector<double> ms;
  std::vector<std::vector<int32_t>> prev_routing;  // the step before the last one's (one token)
  auto batch_for = [&](int it, bool chained) {
    Batch batch;
    for (int b = 0; b < a.batch; ++b) {
      SeqStep s;
      s.seq_id = uint64_t(b);
      s.tokens = toks[b];
      s.token_from_previous = chained && !a.repeat_step;
      s.start_pos = a.phase == "decode" ? a.context - 1 + (a.repeat_step ? 0 : it) : a.context - T;
      s.block_table = tables[b];
      s.sample = true;
      s.sampling.params = &params[b];
      batch.seqs.push_back(s);
    }
    return batch;
  };
  auto read = [&](const std::vector<SeqResult>& r) {
    if (a.phase == "decode" && !a.repeat_step)
      for (int b = 0; b < a.batch; ++b)
        if (r[b].token) toks[b][0] = r[b].token->id;
  };
  if (!overlap) {
    for (int it = 0; it < steps; ++it) {
      const Batch batch = batch_for(it, false);
      const auto t0 = clock::now();
      std::vector<SeqResult> r = backend->execute(batch);
      const double dt = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      if (it >= a.warmup) ms.push_back(dt);
      read(r);
      // (a device read between two timed steps, outside both)
      if (a.phase == "decode" && it == steps - 2) prev_routing = cuda_last_step_traffic(*backend).first_row_routing;
    }
  } else {
    backend->launch(batch_for(0, false));
    auto t_prev = clock::now();
    for (int it = 1; it <= steps; ++it) {
      // The routing of step steps - 2 (the device then holds the last launched step's), read
      // while nothing else is in flight; the interval it falls in is not timed.
      const bool probe = it == steps - 1;
      if (probe) {
        read(backend->collect());
        prev_routing = cuda_last_step_traffic(*backend).first_row_routing;
        backend->launch(batch_for(it, false));
        t_prev = clock::now();
        continue;
      }
      if (it < steps) backend->launch(batch_for(it, true));
      read(backend->collect());
      const auto now = clock::now();
      // Step steps - 1 ran alone (nothing launched behind it): not timed either.
      if (it - 1 >= a.warmup && it < steps) ms.push_back(std::chrono::duration<double, std::milli>(now - t_prev).count());
      t_prev = now;
    }
  }
  const CudaStepTraffic traffic = cuda_last_step_traffic(*backend);
  const double med = percentile(ms, 0.5), p90 = percentile(ms, 0.9);
  const double tokens_per_step = double(a.batch) * T;
  const double tok_s = tokens_per_step / (med * 1e-3);
  const double bytes = double(traffic.weight_bytes + traffic.kv_bytes);
  const double achieved = bytes / (med * 1e-3);
  const double roofline_tok_s = tokens_per_step / (bytes / copy_bw);
  const std::string wtype = spec.quant.fp8_block ? "fp8 (e4m3, 128x128 block scales)" : "bf16";

  std::printf("bench forward: %s, %s weights, phase %s, batch %d, context %d, tokens/seq %d\n", prop.name,
              wtype.c_str(), a.phase.c_str(), a.batch, a.context, T);
  std::printf("  weights created/uploaded in %.1f s; %d timed steps after %d warm-up\n", load_s, a.iters, a.warmup);
  const CudaMegakernelState mk = cuda_megakernel_state(*backend);
  const std::string path = a.phase != "decode" ? "per-op kernels (eager)"
                           : mk.active && a.batch == 1 ? "decode megakernel (one launch a step)"
                           : a.batch == 1 ? "per-op kernels in a CUDA graph (megakernel off" +
                                                (mk.off_reason.empty() ? std::string(")") : ": " + mk.off_reason + ")")
                                          : "per-op kernels in a CUDA graph";
  std::printf("  step path         %s%s\n", path.c_str(),
              a.phase != "decode" ? ""
              : overlap           ? "; steps overlapped (the next launched before this one is read)"
                                  : "; steps not overlapped (--no-overlap)");
  std::printf("  step time         median %.3f ms   p90 %.3f ms\n", med, p90);
  std::printf("  throughput        %.1f tokens/s\n", tok_s);
  std::printf("  read per step     weights %.3f GB (%.1f routed experts/MoE layer) + KV %.3f GB\n",
              traffic.weight_bytes / 1e9, traffic.experts_per_moe_layer, traffic.kv_bytes / 1e9);
  std::printf("  achieved          %.2f TB/s = %.1f%% of the D2D copy bandwidth %.2f TB/s\n", achieved / 1e12,
              100.0 * achieved / copy_bw, copy_bw / 1e12);
  std::printf("  roofline          %.1f tokens/s (bytes per step / copy bandwidth) -> %.1f%% of roofline\n",
              roofline_tok_s, 100.0 * tok_s / roofline_tok_s);
  if (!prev_routing.empty() && !traffic.first_row_routing.empty() && !traffic.first_row_routing[0].empty()) {
    const int k = int(traffic.first_row_routing[0].size());
    std::printf("  routing repeated  of the previous step's first 1 / 2 / %d experts a layer (row 0): %.0f%% / %.0f%% / %.0f%%\n",
                k, 100.0 * routing_carry_over(prev_routing, traffic.first_row_routing, 1),
                100.0 * routing_carry_over(prev_routing, traffic.first_row_routing, 2),
                100.0 * routing_carry_over(prev_routing, traffic.first_row_routing, k));
  }
  if (!mk.profile.empty()) std::printf("%s", mk.profile.c_str());
  nlohmann::json ablation = nlohmann::json::array();
  if (a.ablate) {
    if (a.phase != "decode") throw Error("bench forward --ablate: decode steps only (they run as CUDA graphs)");
    const cuda::GraphAblation g = cuda_decode_graph_ablation(*backend, 21);
    std::printf("  in-graph cost per kernel (its nodes disabled, graph replayed; median of 21):\n");
    std::printf("    whole graph %.3f ms, %d kernel nodes\n", g.baseline_ms, g.kernel_nodes);
    std::printf("    %10s %6s %10s  %s\n", "us/step", "nodes", "us/node", "kernel");
    for (const auto& k : g.kernels) {
      std::printf("    %10.1f %6d %10.2f  %s\n", k.cost_us, k.nodes, k.cost_us / k.nodes, k.kernel.c_str());
      ablation.push_back({{"kernel", k.kernel}, {"nodes", k.nodes}, {"cost_us", k.cost_us}});
    }
  }
  if (!a.timeline.empty()) {
    if (a.phase != "decode") throw Error("bench forward --timeline: decode steps only (they run as CUDA graphs)");
    const std::vector<TimelineRow> rows = timeline_rows(cuda_decode_graph_timeline(*backend, 3));
    std::ofstream f(a.timeline);
    if (!f) throw Error("--timeline: cannot write '" + a.timeline + "'");
    f << timeline_csv(rows);
    const TimelineTotals t = timeline_totals(rows);
    std::printf("  kernel timeline of one graph replay (CUPTI; all %d kernels in %s):\n", t.kernels, a.timeline.c_str());
    std::printf("    first start to last end %.1f us: a kernel running %.1f us, none %.1f us; durations add up to %.1f us\n",
                t.span_us, t.busy_us, t.idle_us, t.sum_us);
    std::printf("    what held the step up: each kernel's end past every earlier end, by kernel (us)\n");
    std::printf("    %9s %6s %9s  %s\n", "total", "count", "median", "kernel");
    for (const TimelineAdvance& adv : timeline_advance(rows))
      std::printf("    %9.1f %6d %9.2f  %s\n", adv.total_us, adv.count, adv.median_us, adv.kernel.c_str());
    // One MoE layer in the middle of the step: the kernels around its router.
    int routers = 0;
    for (const TimelineRow& r : rows) routers += r.kernel.find("router") != std::string::npos;
    const std::vector<TimelineRow> w = timeline_window(rows, "router", routers / 2, 6, 5);
    if (!w.empty()) {
      std::printf("    around router %d of %d (us from the step's first kernel; gap < 0: overlap with the previous):\n",
                  routers / 2, routers);
      std::printf("    %9s %9s %8s %8s  %s\n", "start", "end", "dur", "gap", "kernel");
      for (const TimelineRow& r : w)
        std::printf("    %9.2f %9.2f %8.2f %8.2f  %s\n", r.start_us, r.end_us, r.dur_us, r.gap_us, r.kernel.c_str());
    }
  }
  if (!a.wait_probe.empty()) {
    if (a.phase != "decode") throw Error("bench forward --wait-probe: decode steps only (they run as CUDA graphs)");
    const std::vector<kern::WaitProbeRecord> rec = cuda_decode_graph_wait_probe(*backend);
    std::string why;
    const std::vector<cuda::KernelSpan> spans =
        cuda::kernel_timeline_available(&why) ? cuda_decode_graph_timeline(*backend, 3) : std::vector<cuda::KernelSpan>{};
    const kern::L2Sides& sides = kern::l2_sides(false);  // measured when the backend started
    const std::vector<ProbeLaunch> launches = probe_launches(rec, spans, sides.valid ? &sides.sm_side_host : nullptr);
    std::ofstream f(a.wait_probe);
    if (!f) throw Error("--wait-probe: cannot write '" + a.wait_probe + "'");
    f << probe_csv(launches);
    if (!a.wait_probe_blocks.empty()) {
      std::ofstream fb(a.wait_probe_blocks);
      if (!fb) throw Error("--wait-probe-blocks: cannot write '" + a.wait_probe_blocks + "'");
      fb << probe_records_csv(rec);
    }
    std::printf("  PDL waits of one graph replay (%zu blocks of %zu launches, in %s%s):\n", rec.size(), launches.size(),
                a.wait_probe.c_str(), spans.empty() ? "; no CUPTI to name the kernels" : "");
    std::printf("    release: a launch's first block leaves its wait; advance: to the next launch's release;\n"
                "    late: its last block reached the wait after the release; spread: its last block's release;\n"
                "    input / main / grid / end / s1-s3: the last block's marks (inputs ready, main loop done, a\n"
                "    grid-wide wait passed, done, a kernel's own steps) after the release; medians over launches (us)\n");
    std::printf("    %9s %6s %8s %7s %7s %7s %7s %7s %7s %7s %7s %7s  %s\n", "advance", "count", "median", "late", "spread",
                "input", "main", "grid", "end", "s1", "s2", "s3", "kernel");
    auto mk = [](double v) {  // a mark's median, "-" where the kernel sets none
      char b[32] = "-";
      if (v >= 0) std::snprintf(b, sizeof b, "%.2f", v);
      return std::string(b);
    };
    for (const ProbeSummary& s : probe_summary(launches))
      std::printf("    %9.1f %6d %8.2f %7.2f %7.2f %7s %7s %7s %7s %7s %7s %7s  %s\n", s.advance_total_us, s.count,
                  s.advance_median_us, s.late_median_us, s.spread_median_us, mk(s.mark_median_us[1]).c_str(),
                  mk(s.mark_median_us[2]).c_str(), mk(s.mark_median_us[3]).c_str(), mk(s.mark_median_us[4]).c_str(),
                  mk(s.mark_median_us[5]).c_str(), mk(s.mark_median_us[6]).c_str(), mk(s.mark_median_us[7]).c_str(),
                  s.kernel.c_str());
    if (sides.valid) {
      std::printf("    by L2 side (kernels/common/l2_sides.h), the last block of side 0 / side 1, medians (us):\n");
      std::printf("    %13s %13s %13s %13s %13s  %s\n", "released", "input", "main", "grid", "end", "kernel");
      auto pair = [&](const ProbeSummary& s, int k) { return mk(s.side_median_us[0][k]) + "/" + mk(s.side_median_us[1][k]); };
      for (const ProbeSummary& s : probe_summary(launches))
        std::printf("    %13s %13s %13s %13s %13s  %s\n", pair(s, 0).c_str(), pair(s, 1).c_str(), pair(s, 2).c_str(),
                    pair(s, 3).c_str(), pair(s, 4).c_str(), s.kernel.c_str());
    }
  }
  if (!a.json.empty()) {
    nlohmann::json j = {{"gpu", prop.name},
                        {"model", a.model.empty() ? a.config : a.model},
                        {"weights", wtype},
                        {"phase", a.phase},
                        {"batch", a.batch},
                        {"context", a.context},
                        {"tokens_per_seq", T},
                        {"iters", a.iters},
                        {"median_ms", med},
                        {"p90_ms", p90},
                        {"step_path", path},
                        {"steps_overlapped", overlap},
                        {"tokens_per_s", tok_s},
                        {"weight_bytes", traffic.weight_bytes},
                        {"kv_bytes", traffic.kv_bytes},
                        {"experts_per_moe_layer", traffic.experts_per_moe_layer},
                        {"achieved_bytes_per_s", achieved},
                        {"copy_bytes_per_s", copy_bw},
                        {"pct_of_copy_bw", 100.0 * achieved / copy_bw},
                        {"roofline_tokens_per_s", roofline_tok_s}};
    if (a.ablate) j["graph_ablation"] = ablation;
    std::ofstream f(a.json);
    if (!f) throw Error("--json: cannot write '" + a.json + "'");
    f << j.dump(1) << "\n";
  }
}

}  // namespace

void add_forward(CLI::App& bench) {
  auto a = std::make_shared<ForwardArgs>();
  auto* cmd = bench.add_subcommand("forward", "time one forward step of the real execute path on the GPU");
  cmd->add_option("--model", a->model, "model directory (config.json + safetensors)");
  cmd->add_option("--config", a->config, "config.json alone (with --load-format dummy)");
  cmd->add_option("--load-format", a->load_format, "auto | dummy (weights created on the GPU)");
  cmd->add_option("--batch", a->batch, "sequences per step")->default_val(1);
  cmd->add_option("--context", a->context, "tokens each sequence attends to in the step")->default_val(1024);
  cmd->add_option("--phase", a->phase, "decode | prefill")->default_val("decode");
  cmd->add_option("--tokens", a->tokens, "prefill: new tokens per sequence (default: --context)");
  cmd->add_option("--dtype", a->dtype, "bf16 | fp8 (fp8: block-scaled linear weights)");
  cmd->add_option("--quantization", a->quantization, "fp8: block-FP8 linear weights (vLLM's spelling)");
  cmd->add_option("--iters", a->iters, "timed steps")->default_val(20);
  cmd->add_option("--warmup", a->warmup, "untimed steps first (graph capture happens here)")->default_val(3);
  cmd->add_option("--seed", a->seed, "dummy weight seed")->default_val(0);
  cmd->add_option("--json", a->json, "also write the figures to this file");
  cmd->add_flag("--repeat-step", a->repeat_step,
                "decode, a measurement aid: every step decodes the same token at the same position, so each "
                "layer's routing repeats exactly (what a perfect routing prediction would see)");
  cmd->add_flag("--no-overlap", a->no_overlap,
                "decode: read each step's tokens before launching the next (default: the next step is launched "
                "first, its tokens taken from this one's on the device, as the engine steps)");
  cmd->add_flag("--ablate", a->ablate,
                "decode: also print each kernel's in-graph cost (its graph nodes disabled in turn)");
  cmd->add_option("--timeline", a->timeline,
                  "decode: write when each kernel of one graph replay ran to this CSV (CUPTI, loaded at run "
                  "time) and print how far each kernel moved the step's end and one MoE layer's window");
  cmd->add_option("--wait-probe", a->wait_probe,
                  "decode, a build with -DRS_WAIT_PROBE=ON: write when every block of one graph replay reached and "
                  "left its PDL wait to this CSV and print where each kernel's blocks started and were released");
  cmd->add_option("--wait-probe-blocks", a->wait_probe_blocks,
                  "with --wait-probe: also write every block's wait and marks of that replay to this CSV");
  cmd->callback([a] { run_forward(*a); });
}

}  // namespace rs::bench
