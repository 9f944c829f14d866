// linear() and moe_experts() against an fp64 host reference: random non-zero inputs, poisoned
// outputs, shapes that are not multiples of any tile, FP8 with partial scale blocks, every
// dispatch path (scalar fallback, GEMV, split-K GEMM, each tensor-core tile width), and CUDA
// graph capture with routing that changes between replays; the grouped GEMV (linear_group, with
// and without the attention input's add + RMSNorm folded in) and the lm_head's fp32 logits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/cuda/linear.h"
#include "common/error.h"
#include "kernels/ops/lm_head_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/moe_decode_launch.h"
#include "kernels/ops/rmsnorm_params.h"
#include "tests/gpu/linear_test_util.h"

using namespace rs::test;
using rs::cuda::DeviceMatrix;
using rs::cuda::WeightType;

namespace {

constexpr double kTolerance = 1e-2;  // bf16 output rounding is ~2e-3; fp32 accumulation

bool skip_without_gpu(const char* name) {
  if (have_gpu()) return false;
  std::printf("[gpu.linear] %s: skipped, no CUDA device\n", name);
  return true;
}

struct LinearCase {
  WeightType type;
  int64_t rows, cols;
  int m;
};

void check_linear(const LinearCase& c, uint64_t seed) {
  Rng rng(seed);
  TestMatrix w(c.type, c.rows, c.cols, rng);
  auto xh = rng.bf16(size_t(c.m) * c.cols);
  DeviceBuf<uint16_t> x(xh), y(size_t(c.m) * c.rows);
  const size_t ws_bytes = rs::cuda::linear_workspace_bytes(c.m, c.rows, c.cols);
  DeviceBuf<uint8_t> ws(ws_bytes);
  y.poison();
  rs::cuda::linear(w.dm, reinterpret_cast<const __nv_bfloat16*>(x.ptr), c.m,
                   reinterpret_cast<__nv_bfloat16*>(y.ptr), {ws.ptr, ws_bytes}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "linear");
  const auto xd = to_double(xh);
  std::vector<double> ref(size_t(c.m) * c.rows);
  for (int t = 0; t < c.m; ++t)
    for (int64_t r = 0; r < c.rows; ++r) ref[size_t(t) * c.rows + r] = w.dot(r, xd, int64_t(t) * c.cols);
  const auto st = relative_error(y.download(), ref);
  INFO("linear " << (c.type == WeightType::BF16 ? "bf16" : "fp8") << " rows=" << c.rows
                 << " cols=" << c.cols << " m=" << c.m << " rel=" << st.rel << " nan=" << st.nan);
  CHECK(st.nan == 0);
  CHECK(st.rel <= kTolerance);
}

}  // namespace

TEST_SUITE("gpu.linear") {
TEST_CASE("linear rejects bad operands with a clear error") {
  DeviceMatrix w;  // no GPU needed: validation runs before any device call
  w.rows = 0;
  w.cols = 16;
  CHECK_THROWS_AS(rs::cuda::linear(w, nullptr, 1, nullptr, {}, nullptr), rs::Error);
  w.rows = 16;
  w.data = &w;  // any non-null pointer; the FP8 check below fires first
  w.type = WeightType::FP8_E4M3_BLOCK;
  CHECK_THROWS_WITH_AS(rs::cuda::linear(w, nullptr, 1, nullptr, {}, nullptr),
                       doctest::Contains("scale_inv"), rs::Error);
  w.type = WeightType::BF16;
  CHECK_THROWS_AS(rs::cuda::linear(w, nullptr, -1, nullptr, {}, nullptr), rs::Error);
  rs::cuda::MoeExperts e;
  e.num_experts = 4;
  e.hidden = 24;  // not a multiple of 16
  e.inter = 32;
  CHECK_THROWS_WITH_AS(rs::cuda::moe_workspace_bytes(4, 2, e), doctest::Contains("hidden"), rs::Error);
}

TEST_CASE("linear bf16 matches the fp64 reference on every path") {
  if (skip_without_gpu("linear bf16")) return;
  const LinearCase cases[] = {
      {WeightType::BF16, 2048, 2048, 1},  {WeightType::BF16, 576, 2048, 3},
      {WeightType::BF16, 1000, 72, 5},    {WeightType::BF16, 9000, 256, 8},   // GEMV, two rows/warp
      {WeightType::BF16, 300, 100, 2},    {WeightType::BF16, 37, 13, 11},     // scalar fallback
      {WeightType::BF16, 2048, 2048, 16}, {WeightType::BF16, 333, 1408, 40},  // split-K GEMM
      {WeightType::BF16, 517, 264, 200},  {WeightType::BF16, 4096, 512, 130},
      {WeightType::BF16, 130, 2048, 9},   {WeightType::BF16, 2048, 1024, 300},
      {WeightType::BF16, 96, 4096, 2},    {WeightType::BF16, 100, 1000, 1},   // width split over 8 / 2 warps
  };
  uint64_t seed = 1;
  for (const auto& c : cases) check_linear(c, seed++);
}

TEST_CASE("linear fp8 block-scaled matches the fp64 reference, partial blocks included") {
  if (skip_without_gpu("linear fp8")) return;
  const LinearCase cases[] = {
      {WeightType::FP8_E4M3_BLOCK, 2048, 2048, 1}, {WeightType::FP8_E4M3_BLOCK, 700, 1008, 3},
      {WeightType::FP8_E4M3_BLOCK, 9000, 512, 8},  {WeightType::FP8_E4M3_BLOCK, 70, 200, 4},  // scalar
      {WeightType::FP8_E4M3_BLOCK, 700, 1008, 50}, {WeightType::FP8_E4M3_BLOCK, 256, 2048, 300},
      {WeightType::FP8_E4M3_BLOCK, 1408, 2048, 17}, {WeightType::FP8_E4M3_BLOCK, 200, 1408, 100},
      {WeightType::FP8_E4M3_BLOCK, 300, 2048, 1},  {WeightType::FP8_E4M3_BLOCK, 5000, 1024, 2},
  };
  uint64_t seed = 100;
  for (const auto& c : cases) check_linear(c, seed++);
}

// y2 = W2 (W1 x) back to back on one stream: the second call reads what the first wrote, which
// is exactly what programmatic dependent launch must order (pdl_wait before reading x).
TEST_CASE("chained linear calls see their predecessor's output") {
  if (skip_without_gpu("linear chain")) return;
  for (int m : {1, 40}) {
    Rng rng(900 + m);
    TestMatrix w1(WeightType::BF16, 1024, 2048, rng), w2(WeightType::FP8_E4M3_BLOCK, 3000, 1024, rng);
    auto xh = rng.bf16(size_t(m) * 2048);
    DeviceBuf<uint16_t> x(xh), y1(size_t(m) * 1024), y2(size_t(m) * 3000);
    const size_t wsb = rs::cuda::linear_workspace_bytes(m, 3000, 2048);
    DeviceBuf<uint8_t> ws(wsb);
    y1.poison();
    y2.poison();
    cudaStream_t s;
    cuda_ok(cudaStreamCreate(&s), "stream");
    for (int rep = 0; rep < 3; ++rep) {
      rs::cuda::linear(w1.dm, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, reinterpret_cast<__nv_bfloat16*>(y1.ptr), {ws.ptr, wsb}, s);
      rs::cuda::linear(w2.dm, reinterpret_cast<const __nv_bfloat16*>(y1.ptr), m, reinterpret_cast<__nv_bfloat16*>(y2.ptr), {ws.ptr, wsb}, s);
    }
    cuda_ok(cudaStreamSynchronize(s), "chain");
    cudaStreamDestroy(s);
    // Reference from the GPU's own (bf16) intermediate, so only the second product is compared.
    const auto y1h = y1.download();
    const auto y1d = to_double(y1h);
    std::vector<double> ref(size_t(m) * 3000);
    for (int t = 0; t < m; ++t)
      for (int64_t r = 0; r < 3000; ++r) ref[size_t(t) * 3000 + r] = w2.dot(r, y1d, int64_t(t) * 1024);
    const auto st = relative_error(y2.download(), ref);
    INFO("chain m=" << m << " rel=" << st.rel << " nan=" << st.nan);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
    std::vector<double> ref1(size_t(m) * 1024);
    const auto xd = to_double(xh);
    for (int t = 0; t < m; ++t)
      for (int64_t r = 0; r < 1024; ++r) ref1[size_t(t) * 1024 + r] = w1.dot(r, xd, int64_t(t) * 2048);
    CHECK(relative_error(y1h, ref1).rel <= kTolerance);
  }
}

TEST_CASE("swiglu matches the reference") {
  if (skip_without_gpu("swiglu")) return;
  Rng rng(7);
  const int m = 5, inter = 300;
  auto gu = rng.bf16(size_t(m) * 2 * inter);
  DeviceBuf<uint16_t> dgu(gu), h(size_t(m) * inter);
  h.poison();
  rs::cuda::swiglu(reinterpret_cast<const __nv_bfloat16*>(dgu.ptr), m, inter,
                   reinterpret_cast<__nv_bfloat16*>(h.ptr), nullptr);
  cuda_ok(cudaDeviceSynchronize(), "swiglu");
  std::vector<double> ref(size_t(m) * inter);
  for (int t = 0; t < m; ++t)
    for (int i = 0; i < inter; ++i) {
      const double g = bf16_to_float(gu[size_t(t) * 2 * inter + i]);
      const double u = bf16_to_float(gu[size_t(t) * 2 * inter + inter + i]);
      ref[size_t(t) * inter + i] = g / (1 + std::exp(-g)) * u;
    }
  const auto st = relative_error(h.download(), ref);
  CHECK(st.nan == 0);
  CHECK(st.rel <= kTolerance);
}
}

namespace {

struct MoeShape {
  int E = 12, hidden = 272, inter = 176, top_k = 4, n_shared = 0;
  bool strided = false;  // routed experts at one byte stride (restride below)
};

// The fixture's routed experts copied into one arena as the loader lays them out (each expert's
// gate, up, down, an FP8 matrix's scales after it, 256-byte aligned, so every expert is `stride`
// bytes after the previous one), with MoeExperts::stride and first[] set: the kernels then compute
// every routed expert's view from expert 0's instead of reading the tables.
struct StridedExperts {
  std::unique_ptr<DeviceBuf<uint8_t>> arena;
  std::unique_ptr<DeviceExpertTables> tables;
};

void restride(MoeFixture& f, StridedExperts& keep) {
  const auto up256 = [](size_t n) { return (n + 255) / 256 * 256; };
  const auto data_bytes = [](const TestMatrix& m) { return m.bf16 ? m.bf16->n * 2 : m.fp8->n; };
  const auto scale_bytes = [](const TestMatrix& m) { return m.scales ? m.scales->n * 4 : size_t(0); };
  const std::vector<std::unique_ptr<TestMatrix>>* parts[3] = {&f.gate, &f.up, &f.down};
  size_t per = 0;
  for (auto* v : parts) per += up256(data_bytes(*(*v)[0])) + up256(scale_bytes(*(*v)[0]));
  keep.arena = std::make_unique<DeviceBuf<uint8_t>>(per * f.E);
  std::vector<DeviceMatrix> views[3];
  for (int e = 0; e < f.E; ++e) {
    uint8_t* at = keep.arena->ptr + per * e;
    for (int k = 0; k < 3; ++k) {
      const TestMatrix& t = *(*parts[k])[e];
      DeviceMatrix m = t.dm;
      cuda_ok(cudaMemcpy(at, m.data, data_bytes(t), cudaMemcpyDeviceToDevice), "restride data");
      m.data = at;
      at += up256(data_bytes(t));
      if (t.scales) {
        cuda_ok(cudaMemcpy(at, m.scale_inv, scale_bytes(t), cudaMemcpyDeviceToDevice), "restride scales");
        m.scale_inv = reinterpret_cast<const float*>(at);
        at += up256(scale_bytes(t));
      }
      views[k].push_back(m);
    }
  }
  keep.tables = std::make_unique<DeviceExpertTables>(views[0], views[1], views[2]);
  f.experts.gate = keep.tables->gate.ptr;  // the shared experts' fields stay as they are
  f.experts.up = keep.tables->up.ptr;
  f.experts.down = keep.tables->down.ptr;
  f.experts.stride = int64_t(per);
  for (int k = 0; k < 3; ++k) f.experts.first[k] = views[k][0];
}

void check_moe(WeightType type, int m, uint64_t seed, bool with_invalid, MoeShape sh = {}) {
  Rng rng(seed);
  // By default hidden and inter are multiples of 16 but not of the 64/128 tiles or the 128
  // scale blocks.
  MoeFixture f(type, sh.E, sh.hidden, sh.inter, sh.top_k, rng, sh.n_shared);
  StridedExperts strided;
  if (sh.strided) restride(f, strided);
  if (sh.n_shared > 0) REQUIRE(rs::cuda::moe_can_fuse_shared(f.experts, m));
  rs::cuda::validate_moe_experts(f.experts);
  std::vector<int> ids;
  std::vector<float> w;
  f.route(m, rng, ids, w, with_invalid);
  auto xh = rng.bf16(size_t(m) * f.hidden);
  DeviceBuf<uint16_t> x(xh), out(size_t(m) * f.hidden);
  DeviceBuf<int> dids(ids);
  DeviceBuf<float> dw(w);
  const size_t ws_bytes = rs::cuda::moe_workspace_bytes(m, f.top_k, f.experts);
  DeviceBuf<uint8_t> ws(ws_bytes);
  out.poison();
  rs::cuda::moe_experts(f.experts, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, f.top_k, dids.ptr,
                        dw.ptr, reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, ws_bytes}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "moe_experts");
  const auto st = relative_error(out.download(), f.reference(m, xh, ids, w));
  INFO("moe " << (type == WeightType::BF16 ? "bf16" : "fp8") << " m=" << m << " E=" << sh.E << " top_k="
              << sh.top_k << " n_shared=" << sh.n_shared << " strided=" << sh.strided << " rel=" << st.rel
              << " nan=" << st.nan);
  CHECK(st.nan == 0);
  CHECK(st.rel <= kTolerance);
}

// Capture once, then change the routing (and x) in place and replay: the graph must follow.
void check_moe_graph(WeightType type, int m, uint64_t seed, int n_shared = 0) {
  Rng rng(seed);
  MoeFixture f(type, 12, 272, n_shared ? 256 : 176, 4, rng, n_shared);
  std::vector<int> ids;
  std::vector<float> w;
  f.route(m, rng, ids, w, false);
  auto xh = rng.bf16(size_t(m) * f.hidden);
  DeviceBuf<uint16_t> x(xh), out(size_t(m) * f.hidden);
  DeviceBuf<int> dids(ids);
  DeviceBuf<float> dw(w);
  const size_t ws_bytes = rs::cuda::moe_workspace_bytes(m, f.top_k, f.experts);
  DeviceBuf<uint8_t> ws(ws_bytes);
  cudaStream_t s;
  cuda_ok(cudaStreamCreate(&s), "stream");
  // First call outside capture sets kernel attributes; the graph must work without it too,
  // but this keeps the capture free of one-time setup.
  rs::cuda::moe_experts(f.experts, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, f.top_k, dids.ptr,
                        dw.ptr, reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, ws_bytes}, s);
  cudaGraph_t g;
  cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  rs::cuda::moe_experts(f.experts, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, f.top_k, dids.ptr,
                        dw.ptr, reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, ws_bytes}, s);
  cuda_ok(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t ge;
  cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int round = 0; round < 3; ++round) {
    f.route(m, rng, ids, w, false);
    xh = rng.bf16(size_t(m) * f.hidden);
    dids.upload(ids);
    dw.upload(w);
    x.upload(xh);
    out.poison();
    cuda_ok(cudaGraphLaunch(ge, s), "replay");
    cuda_ok(cudaStreamSynchronize(s), "replay sync");
    const auto st = relative_error(out.download(), f.reference(m, xh, ids, w));
    INFO("moe graph m=" << m << " round " << round << " rel=" << st.rel);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace

TEST_SUITE("gpu.linear") {
TEST_CASE("moe_experts bf16 matches the fp64 reference (GEMV and grouped GEMM paths)") {
  if (skip_without_gpu("moe bf16")) return;
  uint64_t seed = 500;
  for (int m : {1, 3, 8, 9, 40, 300}) check_moe(WeightType::BF16, m, seed++, false);
  check_moe(WeightType::BF16, 2, seed++, true);   // an invalid id selects nothing
  check_moe(WeightType::BF16, 33, seed++, true);
}

TEST_CASE("moe_experts fp8 matches the fp64 reference (GEMV and grouped GEMM paths)") {
  if (skip_without_gpu("moe fp8")) return;
  uint64_t seed = 600;
  for (int m : {1, 5, 8, 12, 100, 260}) check_moe(WeightType::FP8_E4M3_BLOCK, m, seed++, false);
}

// The GEMV paths are compiled for up to 8 tokens but dispatched only up to a (tunable)
// threshold; cover their 4- and 8-token tiles too.
TEST_CASE("GEMV paths with 3 to 8 tokens match the reference") {
  if (skip_without_gpu("gemv 3-8 tokens")) return;
  const int lin = rs::kern::gemv_max_tokens(), exp = rs::kern::expert_gemv_max_tokens();
  const rs::kern::GemvThresholds saved = rs::kern::gemv_thresholds();
  rs::kern::set_gemv_max_tokens(rs::kern::kGemvMaxTokens, rs::kern::kExpertGemvMaxTokens);
  check_linear({WeightType::BF16, 700, 2048, 3}, 801);
  check_linear({WeightType::BF16, 9000, 256, 8}, 802);
  check_linear({WeightType::FP8_E4M3_BLOCK, 700, 1008, 5}, 803);
  check_linear({WeightType::FP8_E4M3_BLOCK, 2048, 10944, 8}, 804);
  check_linear({WeightType::BF16, 33, 2816, 6}, 805);
  for (int m : {3, 8}) check_moe(WeightType::BF16, m, 810 + m, false);
  check_moe(WeightType::FP8_E4M3_BLOCK, 6, 820, false);
  rs::kern::set_gemv_thresholds(saved);
}

// The CUDA-core GEMV is the fallback where the tensor-core GEMV does not apply (FP8 scale
// blocks not multiples of 16 x 64); run it on the usual shapes.
TEST_CASE("CUDA-core GEMV fallback matches the reference") {
  if (skip_without_gpu("cuda-core gemv")) return;
  const int lin = rs::kern::gemv_max_tokens(), exp = rs::kern::expert_gemv_max_tokens();
  const rs::kern::GemvThresholds saved = rs::kern::gemv_thresholds();
  rs::kern::set_gemv_max_tokens(rs::kern::kGemvMaxTokens, exp);
  rs::kern::set_gemv_tc(false);
  const LinearCase cases[] = {
      {WeightType::BF16, 2048, 2048, 1},          {WeightType::BF16, 576, 2048, 3},
      {WeightType::BF16, 9000, 256, 8},           {WeightType::BF16, 96, 4096, 2},
      {WeightType::FP8_E4M3_BLOCK, 2048, 2048, 1}, {WeightType::FP8_E4M3_BLOCK, 700, 1008, 5},
      {WeightType::FP8_E4M3_BLOCK, 5000, 1024, 2}, {WeightType::FP8_E4M3_BLOCK, 300, 2048, 1},
  };
  uint64_t seed = 1200;
  for (const auto& c : cases) check_linear(c, seed++);
  rs::kern::set_gemv_max_tokens(rs::kern::kGemvMaxTokens, rs::kern::kExpertGemvMaxTokens);
  for (int m : {1, 2, 7}) check_moe(WeightType::FP8_E4M3_BLOCK, m, 1300 + m, false);  // CUDA-core FP8 experts
  rs::kern::set_gemv_tc(true);
  rs::kern::set_gemv_thresholds(saved);
}

TEST_CASE("moe_experts replays from a CUDA graph with changing routing") {
  if (skip_without_gpu("moe graph")) return;
  check_moe_graph(WeightType::BF16, 1, 700);
  check_moe_graph(WeightType::BF16, 6, 701);
  check_moe_graph(WeightType::FP8_E4M3_BLOCK, 1, 703);
  check_moe_graph(WeightType::FP8_E4M3_BLOCK, 64, 702);
}
}

TEST_SUITE("gpu.linear") {
// The decode kernels (expert_decode.cuh) are the default; the earlier few-token GEMV and
// grouped GEMM stay selectable for A/B runs and must stay correct.
TEST_CASE("moe_experts earlier kernels (expert decode kernels off) match the reference") {
  if (skip_without_gpu("moe earlier kernels")) return;
  rs::kern::set_expert_decode(false);
  uint64_t seed = 1500;
  for (int m : {1, 2, 9, 40}) check_moe(WeightType::BF16, m, seed++, false);
  for (int m : {1, 12}) check_moe(WeightType::FP8_E4M3_BLOCK, m, seed++, false);
  rs::kern::set_expert_decode(true);
}

// Shared experts folded into the routed-expert kernels as always-selected experts of weight 1:
// few-token GEMV (m <= 2 by default, 3..8 with the threshold raised), grouped tensor-core GEMV
// (bf16, <= 16 tokens per expert on average, experts with 9..16 and > 16 tokens included), and
// the mma.sync grouped tile with shared views (bf16 with many tokens per expert, FP8).
TEST_CASE("moe_experts with shared experts folded in matches the fp64 reference") {
  if (skip_without_gpu("moe shared")) return;
  const int lin = rs::kern::gemv_max_tokens(), exp = rs::kern::expert_gemv_max_tokens();
  const rs::kern::GemvThresholds saved = rs::kern::gemv_thresholds();
  uint64_t seed = 1600;
  MoeShape bf{12, 272, 176, 4, 2};  // no scale-block constraint for bf16
  for (int m : {1, 2, 9, 40, 300}) check_moe(WeightType::BF16, m, seed++, false, bf);
  check_moe(WeightType::BF16, 1, seed++, false, MoeShape{12, 272, 176, 4, 1});
  check_moe(WeightType::BF16, 2, seed++, true, bf);  // an invalid id selects nothing
  MoeShape wide{64, 256, 128, 6, 2};  // V2-Lite-like routing: ~6 tokens per expert at m = 64
  for (int m : {16, 64, 150}) check_moe(WeightType::BF16, m, seed++, false, wide);
  MoeShape f8{12, 272, 256, 4, 2};  // FP8: inter a multiple of the 128 scale blocks
  for (int m : {1, 2, 12, 100}) check_moe(WeightType::FP8_E4M3_BLOCK, m, seed++, false, f8);
  rs::kern::set_gemv_max_tokens(lin, rs::kern::kExpertGemvMaxTokens);
  for (int m : {3, 8}) check_moe(WeightType::BF16, m, seed++, false, bf);
  check_moe(WeightType::FP8_E4M3_BLOCK, 6, seed++, false, f8);
  rs::kern::set_gemv_thresholds(saved);
}

// Routed experts at one byte stride (as the loader lays them out): every kernel computes a routed
// expert's view from expert 0's and the stride; each decode path, bf16 and FP8, with and without
// shared experts. A stride that does not give the tables' views is refused by the check.
TEST_CASE("moe_experts with experts at one byte stride matches the fp64 reference; a wrong stride is refused") {
  if (skip_without_gpu("moe strided")) return;
  uint64_t seed = 1800;
  MoeShape bf{12, 272, 176, 4, 0, true}, bfs{12, 272, 176, 4, 2, true}, f8{12, 272, 256, 4, 0, true},
      f8s{12, 272, 256, 4, 2, true};
  for (int m : {1, 2, 9, 40, 300}) {
    check_moe(WeightType::BF16, m, seed++, false, bf);
    check_moe(WeightType::BF16, m, seed++, false, bfs);
  }
  for (int m : {1, 2, 12, 100}) {
    check_moe(WeightType::FP8_E4M3_BLOCK, m, seed++, false, f8);
    check_moe(WeightType::FP8_E4M3_BLOCK, m, seed++, false, f8s);
  }
  const bool saved = rs::kern::expert_decode();
  rs::kern::set_expert_decode(false);  // the earlier few-token GEMV reads views too
  for (int m : {1, 2}) check_moe(WeightType::BF16, m, seed++, false, bf);
  check_moe(WeightType::FP8_E4M3_BLOCK, 1, seed++, false, f8);
  rs::kern::set_expert_decode(saved);
  Rng rng(seed);
  MoeFixture f(WeightType::FP8_E4M3_BLOCK, 12, 272, 256, 4, rng);
  StridedExperts keep;
  restride(f, keep);
  rs::cuda::validate_moe_experts(f.experts);
  f.experts.stride += 256;
  CHECK_THROWS_WITH(rs::cuda::validate_moe_experts(f.experts), doctest::Contains("stride"));
}

TEST_CASE("moe_experts with shared experts replays from a CUDA graph with changing routing") {
  if (skip_without_gpu("moe shared graph")) return;
  check_moe_graph(WeightType::BF16, 1, 1700, 2);
  check_moe_graph(WeightType::BF16, 24, 1701, 2);
  check_moe_graph(WeightType::FP8_E4M3_BLOCK, 1, 1702, 2);
}
}

TEST_SUITE("gpu.linear") {
// No device needed: the checks run on the host before anything is launched.
TEST_CASE("moe_experts refuses shared experts it cannot fold in, with a clear error") {
  rs::cuda::MoeExperts e;
  e.num_experts = 8;
  e.hidden = 256;
  e.inter = 176;
  e.type = WeightType::FP8_E4M3_BLOCK;
  auto fake = [](uintptr_t a) { return reinterpret_cast<const DeviceMatrix*>(a); };
  e.gate = fake(0x100000);
  e.up = fake(0x200000);
  e.down = fake(0x300000);
  e.n_shared = 2;
  auto mat = [](int64_t r, int64_t c) {
    DeviceMatrix w;
    w.type = WeightType::FP8_E4M3_BLOCK;
    w.rows = r;
    w.cols = c;
    w.data = reinterpret_cast<const void*>(uintptr_t(0x400000));
    w.scale_inv = reinterpret_cast<const float*>(uintptr_t(0x500000));
    return w;
  };
  e.shared_gate = mat(352, 256);
  e.shared_up = mat(352, 256);
  e.shared_down = mat(256, 352);
  CHECK_FALSE(rs::cuda::moe_can_fuse_shared(e, 1));  // inter 176 is no multiple of the 128 blocks
  auto* p = reinterpret_cast<void*>(uintptr_t(0x600000));
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(p);
  auto* out = reinterpret_cast<__nv_bfloat16*>(p);
  const auto* ids = reinterpret_cast<const int*>(p);
  const auto* w = reinterpret_cast<const float*>(p);
  CHECK_THROWS_AS(rs::cuda::moe_experts(e, x, 1, 2, ids, w, out, {p, size_t(1) << 30}, nullptr), rs::Error);
  e.inter = 128;  // now the blocks tile inter ...
  e.shared_gate = mat(256, 256);
  e.shared_up = mat(256, 256);
  e.shared_down = mat(256, 256);
  CHECK(rs::cuda::moe_can_fuse_shared(e, 1));
  e.shared_up = mat(255, 256);  // ... but a shape that is not n_shared * inter is refused
  CHECK_FALSE(rs::cuda::moe_can_fuse_shared(e, 1));
  e.shared_up = mat(256, 256);
  CHECK_FALSE(rs::cuda::moe_can_fuse_shared(e, 100000));  // beyond the decode kernels
  e.type = WeightType::BF16;  // type mismatch with the shared matrices
  CHECK_FALSE(rs::cuda::moe_can_fuse_shared(e, 1));
}
}

// ---- Grouped dense GEMV (linear_group) and the lm_head's fp32-output GEMV path ----------------
namespace {

// Every job's output y[j] = x . w[j]^T (m rows of x) against the fp64 reference.
void check_group_outputs(const std::vector<std::unique_ptr<TestMatrix>>& w,
                         const std::vector<std::unique_ptr<DeviceBuf<uint16_t>>>& y, const std::vector<uint16_t>& xh,
                         int m) {
  const auto xd = to_double(xh);
  for (size_t j = 0; j < w.size(); ++j) {
    const int64_t rows = w[j]->rows, cols = w[j]->cols;
    std::vector<double> ref(size_t(m) * rows);
    for (int tok = 0; tok < m; ++tok)
      for (int64_t r = 0; r < rows; ++r) ref[size_t(tok) * rows + r] = w[j]->dot(r, xd, int64_t(tok) * cols);
    const auto st = relative_error(y[j]->download(), ref);
    INFO("linear_group " << (w[j]->type == WeightType::BF16 ? "bf16" : "fp8") << " job " << j << " of " << w.size()
                         << " rows=" << rows << " cols=" << cols << " m=" << m << " rel=" << st.rel
                         << " nan=" << st.nan);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
  }
}

// Jobs of one width over the same x; every job's output against the fp64 reference.
void check_group(WeightType t, const std::vector<int64_t>& rows, int64_t cols, int m, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::unique_ptr<TestMatrix>> w;
  std::vector<std::unique_ptr<DeviceBuf<uint16_t>>> y;
  std::vector<rs::cuda::LinearJob> jobs;
  int64_t max_rows = 0;
  for (int64_t r : rows) {
    w.push_back(std::make_unique<TestMatrix>(t, r, cols, rng));
    y.push_back(std::make_unique<DeviceBuf<uint16_t>>(size_t(m) * r));
    y.back()->poison();
    jobs.push_back({w.back()->dm, reinterpret_cast<__nv_bfloat16*>(y.back()->ptr)});
    max_rows = std::max(max_rows, r);
  }
  auto xh = rng.bf16(size_t(m) * cols);
  DeviceBuf<uint16_t> x(xh);
  const size_t wsb = rs::cuda::linear_workspace_bytes(m, max_rows, cols);
  DeviceBuf<uint8_t> ws(wsb);
  rs::cuda::linear_group(jobs.data(), int(jobs.size()), reinterpret_cast<const __nv_bfloat16*>(x.ptr), m,
                         {ws.ptr, wsb}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "linear_group");
  check_group_outputs(w, y, xh, m);
}

// launch_lm_head: logits[i, v] = x[rows[i]] . w[v] in fp32, against fp64 (fp32 accumulation
// over `hidden` products: relative error ~1e-6, far inside 1e-4).
void check_lm_head(int n, int vocab, int hidden, bool indirect, uint64_t seed) {
  Rng rng(seed);
  const int x_rows = n + 3;
  auto wh = rng.bf16(size_t(vocab) * hidden), xh = rng.bf16(size_t(x_rows) * hidden);
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = indirect ? (n - 1 - i + 2) % x_rows : i;  // reversed, shifted
  DeviceBuf<uint16_t> w(wh), x(xh);
  DeviceBuf<int32_t> drows(rows);
  DeviceBuf<float> logits(size_t(n) * vocab);
  logits.poison();
  rs::cuda::LmHeadParams p;
  p.x = reinterpret_cast<const __nv_bfloat16*>(x.ptr);
  p.rows = indirect ? drows.ptr : nullptr;
  p.w = reinterpret_cast<const __nv_bfloat16*>(w.ptr);
  p.logits = logits.ptr;
  p.n = n;
  p.hidden = hidden;
  p.vocab = vocab;
  rs::cuda::launch_lm_head(p, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "lm_head");
  const auto out = logits.download();
  const auto wd = to_double(wh), xd = to_double(xh);
  double num = 0, den = 0;
  size_t bad = 0;
  for (int i = 0; i < n; ++i)
    for (int v = 0; v < vocab; ++v) {
      double ref = 0;
      for (int k = 0; k < hidden; ++k) ref += wd[size_t(v) * hidden + k] * xd[size_t(rows[i]) * hidden + k];
      const double o = out[size_t(i) * vocab + v];
      if (!std::isfinite(o)) ++bad;
      else num += (o - ref) * (o - ref);
      den += ref * ref;
    }
  const double rel = std::sqrt(num / den);
  INFO("lm_head n=" << n << " vocab=" << vocab << " hidden=" << hidden << " indirect=" << indirect << " rel=" << rel
                    << " non-finite=" << bad);
  CHECK(bad == 0);
  CHECK(rel <= 1e-4);
}

}  // namespace

TEST_SUITE("gpu.linear") {
TEST_CASE("linear_group rejects bad operands with a clear error") {
  DeviceMatrix a, b;
  a.rows = b.rows = 16;
  a.cols = 256;
  b.cols = 128;  // jobs share x, so their widths must agree
  a.data = b.data = &a;
  auto* y = reinterpret_cast<__nv_bfloat16*>(&b);
  const rs::cuda::LinearJob jobs[2] = {{a, y}, {b, y}};
  CHECK_THROWS_WITH_AS(rs::cuda::linear_group(jobs, 2, nullptr, 1, {}, nullptr), doctest::Contains("wide"), rs::Error);
  CHECK_THROWS_AS(rs::cuda::linear_group(jobs, rs::kern::kMaxGemvJobs + 1, nullptr, 1, {}, nullptr), rs::Error);
  CHECK_THROWS_AS(rs::cuda::linear_group(jobs, 1, nullptr, -1, {}, nullptr), rs::Error);
  const rs::cuda::LinearJob no_y[1] = {{a, nullptr}};
  CHECK_THROWS_WITH_AS(rs::cuda::linear_group(no_y, 1, nullptr, 1, {}, nullptr), doctest::Contains("y"), rs::Error);
}

TEST_CASE("linear_group (grouped GEMV) matches the fp64 reference, bf16 and fp8, 1 to 16 rows") {
  if (skip_without_gpu("linear_group")) return;
  const int lin = rs::kern::gemv_max_tokens(), exp = rs::kern::expert_gemv_max_tokens();
  const rs::kern::GemvThresholds saved = rs::kern::gemv_thresholds();
  rs::kern::set_gemv_max_tokens(rs::kern::kGemvMaxTokens, exp);
  uint64_t seed = 2000;
  // Default dispatch, then with the tensor-core GEMV off (the dispatch test of each job differs;
  // m > 8 takes one linear() per job either way).
  for (bool tc : {true, false}) {
    rs::kern::set_gemv_tc(tc);
    for (int m : {1, 2, 3, 5, 8, 11, 16}) {
      check_group(WeightType::BF16, {3072 / 4, 576 / 4}, 2048, m, seed++);     // q_proj + kv_a, narrower
      check_group(WeightType::BF16, {37, 130, 9}, 1024, m, seed++);            // odd rows, three jobs
      check_group(WeightType::FP8_E4M3_BLOCK, {300, 129}, 1008, m, seed++);   // partial scale blocks
    }
    check_group(WeightType::BF16, {3999, 601}, 256, 1, seed++);  // two rows a warp, odd job ends
    check_group(WeightType::BF16, {3999, 601}, 256, 4, seed++);
    check_group(WeightType::FP8_E4M3_BLOCK, {2001, 333}, 512, 1, seed++);
    check_group(WeightType::FP8_E4M3_BLOCK, {1536, 576}, 2048, 2, seed++);  // V3-style q_a + kv_a, narrower
    check_group(WeightType::BF16, {64}, 2048, 1, seed++);                    // one job
    check_group(WeightType::BF16, {96, 40, 7, 300}, 4096, 3, seed++);        // four jobs, width split
  }
  rs::kern::set_gemv_tc(true);
  rs::kern::set_gemv_thresholds(saved);
}

// The grouped launch under graph capture, followed by a linear() that reads one of its outputs
// (the PDL wait of the successor must see the grouped kernel's writes).
TEST_CASE("linear_group replays from a CUDA graph and feeds the next call") {
  if (skip_without_gpu("linear_group graph")) return;
  Rng rng(2100);
  TestMatrix a(WeightType::BF16, 1024, 2048, rng), b(WeightType::BF16, 576, 2048, rng), c(WeightType::BF16, 700, 1024, rng);
  auto xh = rng.bf16(2048);
  DeviceBuf<uint16_t> x(xh), ya(1024), yb(576), yc(700);
  const size_t wsb = rs::cuda::linear_workspace_bytes(1, 1024, 2048);
  DeviceBuf<uint8_t> ws(wsb);
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const rs::cuda::LinearJob jobs[2] = {{a.dm, reinterpret_cast<__nv_bfloat16*>(ya.ptr)},
                                       {b.dm, reinterpret_cast<__nv_bfloat16*>(yb.ptr)}};
  auto body = [&] {
    rs::cuda::linear_group(jobs, 2, reinterpret_cast<const __nv_bfloat16*>(x.ptr), 1, {ws.ptr, wsb}, s);
    rs::cuda::linear(c.dm, reinterpret_cast<const __nv_bfloat16*>(ya.ptr), 1, reinterpret_cast<__nv_bfloat16*>(yc.ptr),
                     {ws.ptr, wsb}, s);
  };
  body();  // warm-up outside capture
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  body();
  cuda_ok(cudaStreamEndCapture(s, &g), "end capture");
  cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int rep = 0; rep < 3; ++rep) {
    ya.poison();
    yb.poison();
    yc.poison();
    cuda_ok(cudaGraphLaunch(ge, s), "launch");
    cuda_ok(cudaStreamSynchronize(s), "replay");
    const auto xd = to_double(xh);
    std::vector<double> ra(1024), rb(576);
    for (int r = 0; r < 1024; ++r) ra[r] = a.dot(r, xd, 0);
    for (int r = 0; r < 576; ++r) rb[r] = b.dot(r, xd, 0);
    const auto yah = ya.download();
    const auto yad = to_double(yah);
    std::vector<double> rc(700);
    for (int r = 0; r < 700; ++r) rc[r] = c.dot(r, yad, 0);
    INFO("replay " << rep);
    CHECK(relative_error(yah, ra).rel <= kTolerance);
    CHECK(relative_error(yb.download(), rb).rel <= kTolerance);
    CHECK(relative_error(yc.download(), rc).rel <= kTolerance);
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST_CASE("lm_head fp32 logits match the fp64 reference on every path") {
  if (skip_without_gpu("lm_head")) return;
  uint64_t seed = 2200;
  for (int n : {1, 2, 3, 5, 8, 9, 13, 16}) {  // the GEMV path
    check_lm_head(n, 5003, 2048, n % 2 == 1, seed++);
    check_lm_head(n, 64, 2048, false, seed++);  // router logits (64 experts)
  }
  check_lm_head(4, 9000, 264, true, seed++);   // two rows a warp, narrow and odd width in chunks
  check_lm_head(1, 33, 72, false, seed++);
  check_lm_head(20, 64, 2048, false, seed++);  // router above 16 rows: warp-per-row kernel
  check_lm_head(64, 64, 2048, true, seed++);
  check_lm_head(40, 3000, 512, true, seed++);  // WMMA GEMM
}
}

// ---- The attention input's add + RMSNorm folded into the grouped GEMV -------------------------
namespace {

// linear_group with a norm against the separate add_rmsnorm kernel on a copy of the same
// residual: the residual and x must come out bit for bit equal (same arithmetic), and the
// products must match the fp64 reference over that x. Three calls in a row: the residual
// accumulates and the last-block counter must be back at zero for every next call.
void check_group_norm(WeightType t, const std::vector<int64_t>& rows, int64_t cols, int m, int n_deltas,
                      uint64_t seed) {
  Rng rng(seed);
  std::vector<std::unique_ptr<TestMatrix>> w;
  std::vector<std::unique_ptr<DeviceBuf<uint16_t>>> y;
  std::vector<rs::cuda::LinearJob> jobs;
  int64_t max_rows = 0;
  DeviceBuf<uint16_t> x(size_t(m) * cols), x_ref(size_t(m) * cols);
  for (int64_t r : rows) {
    w.push_back(std::make_unique<TestMatrix>(t, r, cols, rng));
    y.push_back(std::make_unique<DeviceBuf<uint16_t>>(size_t(m) * r));
    jobs.push_back({w.back()->dm, reinterpret_cast<__nv_bfloat16*>(y.back()->ptr)});
    max_rows = std::max(max_rows, r);
  }
  std::vector<float> res_h(size_t(m) * cols), wt_h(cols);
  for (auto& v : res_h) v = rng.uniform(-4.f, 4.f);
  for (auto& v : wt_h) v = rng.uniform(0.5f, 1.5f);
  DeviceBuf<float> res(res_h), res_ref(res_h), wt(wt_h);
  std::vector<std::unique_ptr<DeviceBuf<uint16_t>>> deltas;
  for (int d = 0; d < n_deltas; ++d) deltas.push_back(std::make_unique<DeviceBuf<uint16_t>>(rng.bf16(size_t(m) * cols)));
  const size_t wsb = rs::cuda::linear_workspace_bytes(m, max_rows, cols);
  DeviceBuf<uint8_t> ws(wsb);
  auto norm_of = [&](DeviceBuf<float>& r, DeviceBuf<uint16_t>& out) {
    rs::cuda::AddRmsNormParams a;
    a.residual = r.ptr;
    const __nv_bfloat16** ds[3] = {&a.delta0, &a.delta1, &a.delta2};
    for (int d = 0; d < n_deltas; ++d) *ds[d] = reinterpret_cast<const __nv_bfloat16*>(deltas[d]->ptr);
    a.weight = wt.ptr;
    a.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);
    a.n = m;
    a.hidden = int(cols);
    a.eps = 1e-6f;
    return a;
  };
  for (int call = 0; call < 3; ++call) {
    for (auto& b : y) b->poison();
    x.poison();
    const rs::cuda::AddRmsNormParams a = norm_of(res, x), a_ref = norm_of(res_ref, x_ref);
    rs::cuda::launch_add_rmsnorm(a_ref, nullptr);
    rs::cuda::linear_group(jobs.data(), int(jobs.size()), reinterpret_cast<const __nv_bfloat16*>(x.ptr), m,
                           {ws.ptr, wsb}, nullptr, &a);
    cuda_ok(cudaDeviceSynchronize(), "linear_group with norm");
    INFO("linear_group+norm " << (t == WeightType::BF16 ? "bf16" : "fp8") << " cols=" << cols << " m=" << m
                              << " deltas=" << n_deltas << " call " << call);
    const auto xh = x.download();
    CHECK(xh == x_ref.download());
    CHECK(res.download() == res_ref.download());
    check_group_outputs(w, y, xh, m);
  }
}

}  // namespace

TEST_SUITE("gpu.linear") {
TEST_CASE("linear_group with the add + RMSNorm folded in equals the separate kernels") {
  if (skip_without_gpu("linear_group norm")) return;
  uint64_t seed = 2300;
  for (bool tc : {true, false}) {
    rs::kern::set_gemv_tc(tc);
    for (int m : {1, 2, 3}) {  // 1 and 2 fold; 3 runs add_rmsnorm first
      check_group_norm(WeightType::BF16, {768, 144}, 2048, m, 3, seed++);
      check_group_norm(WeightType::FP8_E4M3_BLOCK, {1536, 576}, 2048, m, 2, seed++);
    }
    check_group_norm(WeightType::BF16, {37, 130}, 1032, 1, 1, seed++);  // odd width, one delta
    check_group_norm(WeightType::BF16, {300}, 7168, 1, 0, seed++);      // V3 width, no delta
    check_group_norm(WeightType::BF16, {300, 20}, 7168, 2, 2, seed++);  // beyond the shared memory: separate norm
    // FP8 with rows enough to pair them a warp (>= 16 a SM), V2-Lite's q/kv and an odd split.
    check_group_norm(WeightType::FP8_E4M3_BLOCK, {3072, 576}, 2048, 1, 2, seed++);
    check_group_norm(WeightType::FP8_E4M3_BLOCK, {2049, 575}, 2048, 2, 1, seed++);
  }
  rs::kern::set_gemv_tc(true);
}
}

// ---- The weight-streaming GEMV (gemv_stream.cuh) ----------------------------------------------
// Every use it serves (single matrices, grouped jobs, the norm prologue, fp32 logits), bf16 and
// FP8, 1 and 2 tokens, odd row counts and rows that do not fill a stage, with a large ring (whole
// rows in a stage) and a small one (rows cut into column pieces), against the fp64 reference.
// The launch counter proves each call really took the streaming kernel; with the switch off the
// same calls must take the register GEMV (counter unchanged) and match too.
namespace {

struct StreamSwitch {  // restores the process-wide switches whatever happens
  unsigned uses = rs::kern::gemv_stream_uses();
  int ring = rs::kern::gemv_stream_ring_kb();
  ~StreamSwitch() {
    rs::kern::set_gemv_stream_uses(uses);
    rs::kern::set_gemv_stream_ring_kb(ring);
  }
};

void stream_cases(uint64_t& seed) {
  for (int m : {1, 2}) {
    check_linear({WeightType::BF16, 2048, 2048, m}, seed++);             // o_proj
    check_linear({WeightType::BF16, 577, 2048, m}, seed++);              // odd rows
    check_linear({WeightType::BF16, 3, 1024, m}, seed++);                // fewer rows than warps
    check_linear({WeightType::BF16, 2048, 10944, m}, seed++);            // dense down: wide rows
    check_linear({WeightType::BF16, 130, 72, m}, seed++);                // 144-byte rows
    check_linear({WeightType::FP8_E4M3_BLOCK, 2048, 2048, m}, seed++);
    check_linear({WeightType::FP8_E4M3_BLOCK, 700, 1008, m}, seed++);    // partial scale blocks
    check_linear({WeightType::FP8_E4M3_BLOCK, 1001, 10944, m}, seed++);  // wide, odd rows
    check_group(WeightType::BF16, {3072 / 4, 576 / 4}, 2048, m, seed++);
    check_group(WeightType::BF16, {37, 130, 9}, 1024, m, seed++);        // odd job ends inside stages
    check_group(WeightType::BF16, {96, 40, 7, 300}, 4096, m, seed++);    // four jobs
    check_group(WeightType::FP8_E4M3_BLOCK, {300, 129}, 1008, m, seed++);
    check_group(WeightType::FP8_E4M3_BLOCK, {1536, 576}, 2048, m, seed++);
    check_group_norm(WeightType::BF16, {768, 144}, 2048, m, 3, seed++);
    check_group_norm(WeightType::FP8_E4M3_BLOCK, {1536, 576}, 2048, m, 2, seed++);
    check_group_norm(WeightType::BF16, {37, 130}, 1032, m, 1, seed++);  // odd width
    check_lm_head(m, 5003, 2048, m == 2, seed++);                       // fp32 out, indirect rows
    check_lm_head(m, 64, 2048, false, seed++);                          // router-sized
    check_lm_head(m, 9000, 264, true, seed++);
  }
}
constexpr uint64_t kStreamCallsPerRun = 2 * (8 + 5 + 3 * 3 + 3);  // linear, group, norm (3 calls each), lm_head

}  // namespace

TEST_SUITE("gpu.linear") {
TEST_CASE("streaming GEMV (bulk-copy ring) matches the fp64 reference on every use, 1 and 2 tokens") {
  if (skip_without_gpu("streaming gemv")) return;
  StreamSwitch keep;
  uint64_t seed = 2400;
  for (int ring_kb : {128, 32, 64}) {
    rs::kern::set_gemv_stream_uses(rs::kern::kGemvStreamAll);
    rs::kern::set_gemv_stream_ring_kb(ring_kb);
    const uint64_t before = rs::kern::gemv_stream_launches();
    stream_cases(seed);
    INFO("ring " << ring_kb << " KB");
    CHECK(rs::kern::gemv_stream_launches() - before == kStreamCallsPerRun);
  }
  rs::kern::set_gemv_stream_uses(0);  // the register GEMV on the same calls
  const uint64_t before = rs::kern::gemv_stream_launches();
  stream_cases(seed);
  CHECK(rs::kern::gemv_stream_launches() == before);
}

TEST_CASE("streaming GEMV falls back where its checks fail") {
  if (skip_without_gpu("streaming gemv fallback")) return;
  StreamSwitch keep;
  rs::kern::set_gemv_stream_uses(rs::kern::kGemvStreamAll);
  uint64_t seed = 2500;
  const uint64_t before = rs::kern::gemv_stream_launches();
  check_linear({WeightType::BF16, 300, 100, 2}, seed++);   // 200-byte rows: scalar path
  check_linear({WeightType::BF16, 700, 2048, 3}, seed++);  // 3 tokens: register / tensor-core GEMV
  check_group(WeightType::BF16, {300, 20}, 7168, 4, seed++);
  CHECK(rs::kern::gemv_stream_launches() == before);
  // x that is not 16-byte aligned: the DenseGemvParams launcher refuses, nothing launched.
  Rng rng(seed++);
  TestMatrix w(WeightType::BF16, 64, 256, rng);
  DeviceBuf<uint16_t> x(rng.bf16(256 + 8)), y(64);
  rs::kern::DenseGemvParams p;
  p.w[0] = w.dm;
  p.y[0] = y.ptr;
  p.jobs = 1;
  p.x = reinterpret_cast<const __nv_bfloat16*>(x.ptr) + 1;
  p.m = 1;
  CHECK_FALSE(rs::kern::launch_gemv_stream(p, 132, nullptr));
  p.x = reinterpret_cast<const __nv_bfloat16*>(x.ptr);
  p.m = 3;  // beyond the streaming kernel's tokens
  CHECK_FALSE(rs::kern::launch_gemv_stream(p, 132, nullptr));
  CHECK(rs::kern::gemv_stream_launches() == before);
}
}
