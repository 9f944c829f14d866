// The batch-1 decode megakernel (kernels/mega/) against the per-op kernels it replaces, on every
// fixture model, bf16 and FP8: two CUDA backends of the same weights, one with the megakernel
// and one without, fed the same tokens step by step after the same prefill. Every decode step's
// logits must agree (cosine >= 0.9999: the two paths run the same op arithmetic, only the GEMV
// row-to-warp assignment and so some fp32 summation orders differ) and so must their argmax,
// except where the per-op path's own margin is below bf16 noise (printed). Twelve steps cross a
// KV block boundary, so later steps read cache rows earlier megakernel steps wrote.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/forward_pass.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "tests/gpu/cuda_test_util.h"

using namespace rs::cudatest;

namespace {

constexpr int kBlock = 16;
constexpr double kMinCosine = 0.9999;

std::vector<int32_t> table_of(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = i;
  return t;
}

struct Backends {
  std::unique_ptr<rs::Backend> per_op, mega;
};

}  // namespace

TEST_SUITE("gpu.mega") {

TEST_CASE("decode megakernel: every fixture model's decode steps match the per-op kernels, bf16 and FP8") {
  if (skip_without_gpu("decode megakernel fixtures")) return;
  const std::string root = std::string(RS_FIXTURES_DIR) + "/models";
  std::vector<std::string> dirs;
  for (auto& e : std::filesystem::directory_iterator(root))
    if (e.is_directory() && std::filesystem::exists(e.path() / "config.json")) dirs.push_back(e.path().string());
  std::sort(dirs.begin(), dirs.end());
  REQUIRE(dirs.size() >= 4);
  const bool was_on = rs::cuda::megakernel_enabled();
  for (const std::string& dir : dirs) {
    const std::string name = std::filesystem::path(dir).filename().string();
    INFO("model " << name);
    rs::ModelSpec spec = rs::load_model_spec(dir);
    auto weights = rs::Weights::load(dir, spec);
    Backends be;
    be.per_op = rs::make_cuda_backend(spec, *weights);
    be.mega = rs::make_cuda_backend(spec, *weights);
    rs::KvConfig kv;
    kv.block_size = kBlock;
    kv.num_blocks = 8;
    be.per_op->init_kv(kv);
    be.mega->init_kv(kv);
    const auto table = table_of(4);
    const std::vector<int32_t> prompt = {5, 17, 300 % spec.vocab_size, 42, 7, 99 % spec.vocab_size, 3};
    // The switch is read when a backend records its program (its first one-token decode step):
    // each backend's steps run under its own setting.
    rs::cuda::set_megakernel(false);
    int32_t tok = greedy_step(*be.per_op, prompt, 0, table);
    rs::cuda::set_megakernel(true);
    REQUIRE(greedy_step(*be.mega, prompt, 0, table) == tok);  // the prefill runs the same kernels
    const int V = spec.vocab_size;
    const float noise = spec.quant.fp8_block ? 0.1f : 0.05f;
    double worst = 1.0;
    for (int t = 0; t < 12; ++t) {
      const int pos = int(prompt.size()) + t;
      rs::cuda::set_megakernel(false);
      const int32_t ref_next = greedy_step(*be.per_op, {tok}, pos, table);
      const std::vector<float> ref = rs::cuda_last_step_logits(*be.per_op, 0);
      rs::cuda::set_megakernel(true);
      const int32_t mega_next = greedy_step(*be.mega, {tok}, pos, table);
      const std::vector<float> got = rs::cuda_last_step_logits(*be.mega, 0);
      const double c = cosine(got.data(), ref.data(), V);
      worst = std::min(worst, c);
      CHECK(c >= kMinCosine);
      if (mega_next != ref_next) {
        std::vector<float> sorted = ref;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        const float margin = sorted[0] - sorted[1];
        std::printf("[gpu.mega] %-16s step %d: megakernel %d, per-op %d; per-op argmax margin %.5f %s\n", name.c_str(),
                    t, mega_next, ref_next, margin, margin < noise ? "(below noise: allowed)" : "(NOT explained)");
        CHECK(margin < noise);
      }
      tok = ref_next;  // both continue from the per-op path's token
    }
    const rs::CudaMegakernelState st = rs::cuda_megakernel_state(*be.mega);
    std::printf("[gpu.mega] %-16s %s; 12 decode steps, min logits cosine vs per-op %.7f\n", name.c_str(),
                st.active ? "megakernel active" : ("megakernel OFF: " + st.off_reason).c_str(), worst);
    CHECK(st.active);
    CHECK_FALSE(rs::cuda_megakernel_state(*be.per_op).active);
  }
  rs::cuda::set_megakernel(was_on);
}

}  // TEST_SUITE

#include "backend/cuda/mega_program.h"
#include "kernels/mega/decode_megakernel.h"

TEST_SUITE("gpu.mega") {

// The interpreter alone: a program of instructions with no work (element-wise ops over zero
// elements) still passes every grid barrier. It must finish, leave its sync words zeroed for the
// next launch (launched repeatedly, also from a CUDA graph), and its time per instruction is
// printed: the floor under every instruction of a real step (docs/perf/cuda.md).
TEST_CASE("decode megakernel: an empty program's barriers, relaunches and graph replays") {
  if (skip_without_gpu("decode megakernel interpreter")) return;
  int sms = 0;
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  constexpr int kInstr = 200;
  rs::cuda::MegaProgram prog(sms * rs::kern::mega::kCtasPerSm);
  rs::cuda::SiluMulParams none;
  for (int i = 0; i < kInstr; ++i) prog.silu_mul(none);
  cudaStream_t s;
  ok(cudaStreamCreate(&s), "stream");
  prog.finish(false, 576, 64, s);
  CHECK(prog.instructions() == kInstr);
  for (int i = 0; i < 5; ++i) prog.launch(s);
  ok(cudaStreamSynchronize(s), "eager launches");
  cudaGraph_t g;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  prog.launch(s);
  ok(cudaStreamEndCapture(s, &g), "capture end");
  cudaGraphExec_t ge;
  ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  constexpr int kReps = 50;
  ok(cudaEventRecord(a, s), "record");
  for (int i = 0; i < kReps; ++i) ok(cudaGraphLaunch(ge, s), "graph launch");
  ok(cudaEventRecord(b, s), "record");
  ok(cudaEventSynchronize(b), "graph replays");
  float ms = 0;
  ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
  std::printf("[gpu.mega] empty program: %d instructions, %d CTAs: %.2f us a launch, %.3f us an instruction\n", kInstr,
              prog.grid(), 1e3 * ms / kReps, 1e3 * ms / kReps / kInstr);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
}

}  // TEST_SUITE
