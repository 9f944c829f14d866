// The decode-time expert kernels (kernels/ops/expert_decode.cuh) against an fp64 host reference:
// the few-token kernels (gate_up + SwiGLU, then down) forced for every m they are compiled for,
// and the default dispatch, bf16 and FP8, 1..16 tokens, with 0, 1 or 2 shared experts folded in,
// shapes whose rows do not fill a whole load batch, the V2-Lite shape itself, many calls in a
// row and graph replays with changing routing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/cuda/linear.h"
#include "kernels/common/l2_sides.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/moe_decode_launch.h"
#include "tests/gpu/linear_test_util.h"

using namespace rs::test;
using rs::cuda::DeviceMatrix;
using rs::cuda::WeightType;

namespace {

constexpr double kTolerance = 1e-2;  // bf16 output rounding is ~2e-3; fp32 accumulation

bool skip_without_gpu(const char* name) {
  if (have_gpu()) return false;
  std::printf("[gpu.experts] %s: skipped, no CUDA device\n", name);
  return true;
}

struct Shape {
  int E, hidden, inter, top_k, n_shared;
};

// The shared MoE fixture (linear_test_util.h) at a test shape, FP8 block scales in [0.01, 0.1).
struct Experts : MoeFixture {
  Shape sh;
  Experts(WeightType t, Shape s, Rng& rng)
      : MoeFixture(t, s.E, s.hidden, s.inter, s.top_k, rng, s.n_shared, Fp8ScaleRange{0.01f, 0.1f}), sh(s) {}
};

// `calls` calls in a row on one stream (new routing and x each time), every output checked. The
// workspace is sized for ws_m >= m tokens (a forward pass sizes it for its largest batch).
void check_calls(const Experts& f, int m, Rng& rng, int calls, int ws_m = 0) {
  const Shape sh = f.sh;
  const WeightType type = f.type;
  if (sh.n_shared > 0) REQUIRE(rs::cuda::moe_can_fuse_shared(f.experts, m));
  const size_t ws_bytes = rs::cuda::moe_workspace_bytes(std::max(m, ws_m), sh.top_k, f.experts);
  DeviceBuf<uint8_t> ws(ws_bytes);
  DeviceBuf<uint16_t> x(size_t(m) * sh.hidden), out(size_t(m) * sh.hidden);
  DeviceBuf<int> dids(size_t(m) * sh.top_k);
  DeviceBuf<float> dw(size_t(m) * sh.top_k);
  for (int c = 0; c < calls; ++c) {
    std::vector<int> ids;
    std::vector<float> w;
    f.route(m, rng, ids, w, false);
    const auto xh = rng.bf16(size_t(m) * sh.hidden);
    x.upload(xh);
    dids.upload(ids);
    dw.upload(w);
    out.poison();
    rs::cuda::moe_experts(f.experts, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, sh.top_k, dids.ptr, dw.ptr,
                          reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, ws_bytes}, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "moe_experts");
    const auto st = relative_error(out.download(), f.reference(m, xh, ids, w));
    INFO((type == WeightType::BF16 ? "bf16" : "fp8") << " m=" << m << " E=" << sh.E << " hidden=" << sh.hidden
                                                     << " inter=" << sh.inter << " top_k=" << sh.top_k
                                                     << " n_shared=" << sh.n_shared << " call " << c
                                                     << " rel=" << st.rel
                                                     << " nan=" << st.nan);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
  }
}

void check(WeightType type, Shape sh, int m, uint64_t seed, int calls = 1, int ws_m = 0) {
  Rng rng(seed);
  const Experts f(type, sh, rng);
  check_calls(f, m, rng, calls, ws_m);
}

// Few-token kernels for every m they are compiled for (the threshold raised to 8); restores
// the thresholds.
struct FewTokenScope {
  rs::kern::GemvThresholds saved = rs::kern::gemv_thresholds();
  FewTokenScope() { rs::kern::set_gemv_max_tokens(saved.linear, rs::kern::kExpertGemvMaxTokens); }
  ~FewTokenScope() { rs::kern::set_gemv_thresholds(saved); }
};

// One token's router inside the streamed expert launch (kernels/ops/expert_stream_route.cuh)
// against the fused router kernel then moe_experts(): the same bits for everything either stores
// (xn, logits, ids, weights, margins, the FFN's output), for the whole-FFN launch and the streamed
// gate_up + register down, `calls` calls in a row (the router's grid-wide count resets every
// launch); and the output at the fp64 reference for the routing it chose.
struct RouterCfg {
  rs::cuda::RouterScoring scoring;
  rs::cuda::RouterTopk method;
  int n_group, topk_group;
  bool bias, normalize;
  float scaling;
};

void compare_routed(WeightType type, Shape sh, RouterCfg rc, uint64_t seed, int calls = 2) {
  Rng rng(seed);
  const Experts f(type, sh, rng);
  const int H = sh.hidden, E = sh.E, K = sh.top_k;
  const size_t ws_bytes = rs::cuda::moe_workspace_bytes(1, K, f.experts);
  DeviceBuf<uint8_t> ws(ws_bytes);
  std::vector<uint16_t> wr(size_t(E) * H);
  for (auto& v : wr) v = float_to_bf16(rng.uniform(-0.06f, 0.06f));
  std::vector<float> g(H), bias(E);
  for (auto& v : g) v = rng.uniform(0.5f, 1.5f);
  for (auto& v : bias) v = rng.uniform(-0.05f, 0.05f);
  DeviceBuf<uint16_t> dwr(wr), ddelta(H);
  DeviceBuf<float> dg(g), dbias(bias), dres(H);
  DeviceBuf<int> counters(1);
  cuda_ok(cudaMemset(counters.ptr, 0, sizeof(int)), "zero counters");
  const int ffn_mode = rs::kern::expert_ffn(), route_mode = rs::kern::route_in_experts();
  rs::kern::set_route_in_experts(2);
  // Measured here (as the backend does when it starts), so that the cluster router writes its
  // copies of x and the routing on each L2 side where the part has two.
  const bool sides = rs::kern::l2_sides().valid;
  for (int c = 0; c < calls; ++c) {
    std::vector<float> res(H);
    for (auto& v : res) v = rng.uniform(-3.f, 3.f);
    dres.upload(res);
    ddelta.upload(rng.bf16(H));
    for (int mode : {2, 0}) {  // the whole FFN in one launch; the streamed gate_up + register down
      rs::kern::set_expert_ffn(mode);
      // Router kernel + moe_experts (x and the routing read from the cluster router's copies on
      // each L2 side, where it wrote them); the router folded in; the two launches again reading
      // the router's own outputs.
      std::vector<uint16_t> xn[3], out[3];
      std::vector<float> logits[3], wts[3], margins[3];
      std::vector<int> ids[3];
      for (int path = 0; path < 3; ++path) {
        rs::kern::set_xs_l2_inputs(path != 2);
        DeviceBuf<uint16_t> dxn(H), dout(H);
        DeviceBuf<float> dlog(E), dwt(K), dmargin(1);
        DeviceBuf<int> dids(K);
        for (auto* b : {&dxn, &dout}) b->poison();
        for (auto* b : {&dlog, &dwt, &dmargin}) b->poison();
        dids.poison();
        rs::cuda::LmHeadParams lg;
        lg.x = reinterpret_cast<const __nv_bfloat16*>(dxn.ptr);
        lg.w = reinterpret_cast<const __nv_bfloat16*>(dwr.ptr);
        lg.logits = dlog.ptr;
        lg.n = 1;
        lg.hidden = H;
        lg.vocab = E;
        rs::cuda::MoeRouterParams r;
        r.logits = dlog.ptr;
        r.bias = rc.bias ? dbias.ptr : nullptr;
        r.n = 1;
        r.experts = E;
        r.top_k = K;
        r.n_group = rc.n_group;
        r.topk_group = rc.topk_group;
        r.scoring = rc.scoring;
        r.method = rc.method;
        r.normalize = rc.normalize;
        r.scale_after_normalize = rc.method == rs::cuda::RouterTopk::NoauxTc;
        r.routed_scaling = rc.scaling;
        r.topk_ids = dids.ptr;
        r.topk_weights = dwt.ptr;
        r.margins = dmargin.ptr;
        rs::cuda::RouterNormIn nin;
        nin.residual = dres.ptr;
        nin.delta = reinterpret_cast<const __nv_bfloat16*>(ddelta.ptr);
        nin.weight = dg.ptr;
        nin.out = reinterpret_cast<__nv_bfloat16*>(dxn.ptr);
        nin.eps = 1e-6f;
        auto* o = reinterpret_cast<__nv_bfloat16*>(dout.ptr);
        const uint64_t sided_before = rs::kern::xs_l2_input_launches();
        if (path != 1) {
          rs::cuda::launch_moe_router_fused(lg, r, counters.ptr, nullptr, &nin);
          rs::cuda::moe_experts(f.experts, nin.out, 1, K, dids.ptr, dwt.ptr, o, {ws.ptr, ws_bytes}, nullptr);
          // The copies are read only with the switch on (never on path 2); on a two-sided part at
          // V2-Lite's router shape (the cluster router, then a streamed expert launch) path 0 reads them.
          if (path == 2) CHECK(rs::kern::xs_l2_input_launches() == sided_before);
          if (path == 0 && sides && H == 2048 && E == 64) CHECK(rs::kern::xs_l2_input_launches() > sided_before);
        } else {
          REQUIRE(rs::cuda::moe_experts_routed(f.experts, rs::kern::ExpertRouteParams{lg, r, nin}, o, {ws.ptr, ws_bytes},
                                               nullptr));
        }
        cuda_ok(cudaDeviceSynchronize(), path == 0 ? "router + moe_experts" : "moe_experts_routed");
        xn[path] = dxn.download();
        out[path] = dout.download();
        logits[path] = dlog.download();
        wts[path] = dwt.download();
        margins[path] = dmargin.download();
        ids[path] = dids.download();
      }
      const auto st = relative_error(out[1], f.reference(1, xn[1], ids[1], wts[1]));
      INFO((type == WeightType::BF16 ? "bf16" : "fp8") << " E=" << E << " hidden=" << H << " inter=" << sh.inter
                                                       << " top_k=" << K << " n_shared=" << sh.n_shared << " ffn mode "
                                                       << mode << " call " << c << " rel=" << st.rel);
      CHECK(st.nan == 0);
      CHECK(st.rel <= kTolerance);
      CHECK(xn[0] == xn[1]);
      CHECK(logits[0] == logits[1]);
      CHECK(ids[0] == ids[1]);
      CHECK(wts[0] == wts[1]);
      CHECK(margins[0] == margins[1]);
      CHECK(out[0] == out[1]);
      CHECK(out[0] == out[2]);
    }
  }
  rs::kern::set_xs_l2_inputs(true);
  rs::kern::set_expert_ffn(ffn_mode);
  rs::kern::set_route_in_experts(route_mode);
}

}  // namespace

TEST_SUITE("gpu.experts") {
TEST_CASE("one token's router inside the streamed expert launch gives the router kernel's and moe_experts' bits") {
  if (skip_without_gpu("router in the expert launch")) return;
  using rs::cuda::RouterScoring;
  using rs::cuda::RouterTopk;
  const RouterCfg v2{RouterScoring::Softmax, RouterTopk::Greedy, 1, 1, false, false, 1.f};
  const RouterCfg v2_groups{RouterScoring::Softmax, RouterTopk::GroupLimitedGreedy, 4, 2, false, true, 1.f};
  const RouterCfg v3{RouterScoring::Sigmoid, RouterTopk::NoauxTc, 8, 4, true, true, 2.5f};
  uint64_t seed = 9900;
  for (WeightType type : {WeightType::BF16, WeightType::FP8_E4M3_BLOCK}) {
    compare_routed(type, {64, 2048, 256, 6, 2}, v2, seed++, 3);  // V2-Lite's router, narrower experts
    compare_routed(type, {64, 2048, 256, 6, 2}, v2_groups, seed++);
    // More experts than blocks (two router rows a block on 132 SMs; three on the 128 blocks of inter 128).
    compare_routed(type, {160, 1024, 256, 8, 1}, v3, seed++);
    compare_routed(type, {264, 1024, 128, 8, 0}, v3, seed++);
  }
  compare_routed(WeightType::BF16, {64, 2048, 1408, 6, 2}, v2, seed++);  // V2-Lite itself
}

TEST_CASE("few-token expert kernels match the fp64 reference, bf16 and FP8, 1..8 tokens") {
  if (skip_without_gpu("few-token experts")) return;
  FewTokenScope scope;
  uint64_t seed = 9100;
  // bf16: hidden 272 / inter 176 fill no load batch evenly (34 / 22 chunks of 8); hidden 1040
  // takes two load batches a row, the second partial.
  for (int ns : {0, 1, 2})
    for (int m = 1; m <= 8; ++m) check(WeightType::BF16, {12, 272, 176, 4, ns}, m, seed++);
  for (int m : {1, 2, 7}) check(WeightType::BF16, {12, 1040, 176, 4, 2}, m, seed++);
  // FP8: inter a multiple of the 128 scale blocks (shared views); hidden 272 leaves a partial
  // scale block and a partial batch.
  for (int ns : {0, 2})
    for (int m = 1; m <= 8; ++m) check(WeightType::FP8_E4M3_BLOCK, {12, 272, 256, 4, ns}, m, seed++);
  check(WeightType::FP8_E4M3_BLOCK, {12, 272, 256, 4, 1}, 1, seed++);
  check(WeightType::FP8_E4M3_BLOCK, {12, 2064, 256, 4, 2}, 2, seed++);
}

TEST_CASE("few-token expert kernels at DeepSeek-V2-Lite shapes (hidden 2048, inter 1408, top-6, 2 shared), many calls in a row") {
  if (skip_without_gpu("experts v2-lite")) return;
  FewTokenScope scope;
  // 8 routed experts instead of 64 keep the host reference small; the kernels see the same
  // slots (6 routed + 2 shared), rows and grid as at 64.
  const Shape v2{8, 2048, 1408, 6, 2};
  for (WeightType type : {WeightType::BF16, WeightType::FP8_E4M3_BLOCK}) {
    Rng rng(type == WeightType::BF16 ? 9300 : 9301);
    const Experts f(type, v2, rng);
    check_calls(f, 1, rng, 4);  // several calls in a row
    check_calls(f, 2, rng, 2);
  }
}

// The workspace sized for m alone (moe_workspace_bytes(m)), then for 16 tokens as a forward
// pass sizes it for its largest batch. Sized for m alone it used to be too small at m = 3 with
// shared experts ("workspace of 12288 bytes is below the 15360 needed for m=3").
TEST_CASE("expert kernels with the default thresholds, 1..16 tokens, with and without shared experts") {
  if (skip_without_gpu("experts 1..16")) return;
  uint64_t seed = 9400;
  for (int ws_m : {0, 16})
    for (int m = 1; m <= 16; ++m) {
      check(WeightType::BF16, {16, 256, 128, 4, (m % 2) * 2}, m, seed++, 1, ws_m);
      check(WeightType::FP8_E4M3_BLOCK, {16, 256, 256, 4, (m % 2) * 2}, m, seed++, 1, ws_m);
    }
}

TEST_CASE("few-token expert kernels replay from a CUDA graph with changing routing") {
  if (skip_without_gpu("experts graph")) return;
  FewTokenScope scope;
  for (WeightType type : {WeightType::BF16, WeightType::FP8_E4M3_BLOCK})
    for (int m : {1, 2}) {
      Rng rng(9500 + m + (type == WeightType::BF16 ? 0 : 10));
      const Shape sh{16, 512, 256, 4, 2};
      Experts f(type, sh, rng);
      const size_t ws_bytes = rs::cuda::moe_workspace_bytes(m, sh.top_k, f.experts);
      DeviceBuf<uint8_t> ws(ws_bytes);
      DeviceBuf<uint16_t> x(size_t(m) * sh.hidden), out(size_t(m) * sh.hidden);
      DeviceBuf<int> dids(size_t(m) * sh.top_k);
      DeviceBuf<float> dw(size_t(m) * sh.top_k);
      std::vector<int> ids;
      std::vector<float> w;
      f.route(m, rng, ids, w, false);
      auto xh = rng.bf16(size_t(m) * sh.hidden);
      x.upload(xh);
      dids.upload(ids);
      dw.upload(w);
      cudaStream_t s;
      cuda_ok(cudaStreamCreate(&s), "stream");
      auto call = [&] {
        rs::cuda::moe_experts(f.experts, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, sh.top_k, dids.ptr, dw.ptr,
                              reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, ws_bytes}, s);
      };
      call();  // outside capture: one-time setup
      cudaGraph_t g;
      cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
      call();
      call();  // two calls back to back in one graph (two layers)
      cuda_ok(cudaStreamEndCapture(s, &g), "end capture");
      cudaGraphExec_t ge;
      cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
      for (int round = 0; round < 3; ++round) {
        f.route(m, rng, ids, w, false);
        xh = rng.bf16(size_t(m) * sh.hidden);
        dids.upload(ids);
        dw.upload(w);
        x.upload(xh);
        out.poison();
        cuda_ok(cudaGraphLaunch(ge, s), "replay");
        cuda_ok(cudaStreamSynchronize(s), "replay sync");
        const auto st = relative_error(out.download(), f.reference(m, xh, ids, w));
        INFO("graph m=" << m << " fp8=" << (type != WeightType::BF16) << " round " << round << " rel=" << st.rel);
        CHECK(st.nan == 0);
        CHECK(st.rel <= kTolerance);
      }
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      cudaStreamDestroy(s);
    }
}

// One token through the paths: the whole FFN in one streaming launch (expert_stream_ffn.cuh),
// the streamed gate_up with the register down (FP8: its three routing modes), and both register
// kernels: the same bits, and at the fp64 reference; with 0-2 shared experts, rows that fill no
// stage evenly, an invalid routed id (its slot gets no bytes), and the V2-Lite shape. `calls`
// calls in a row with new routing and x each (the FFN's grid-wide counters reset every launch).
void compare_stream_paths(WeightType type, Shape sh, uint64_t seed, bool with_invalid, int calls = 1) {
  Rng rng(seed);
  const Experts f(type, sh, rng);
  const size_t ws_bytes = rs::cuda::moe_workspace_bytes(1, sh.top_k, f.experts);
  DeviceBuf<uint8_t> ws(ws_bytes);
  DeviceBuf<uint16_t> x(sh.hidden), out(sh.hidden);
  DeviceBuf<int> dids(sh.top_k);
  DeviceBuf<float> dw(sh.top_k);
  const int ffn_mode = rs::kern::expert_ffn();
  for (int c = 0; c < calls; ++c) {
    std::vector<int> ids;
    std::vector<float> w;
    f.route(1, rng, ids, w, with_invalid);
    const auto xh = rng.bf16(sh.hidden);
    x.upload(xh);
    dids.upload(ids);
    dw.upload(w);
    // Whole FFN streamed, streamed gate_up (then the register down: FP8 one token with its
    // routing read on speculation, right, wrong, and after the wait), register kernels.
    // Path 5: the whole FFN again with one grid-wide counter instead of a copy on each L2 side.
    std::vector<uint16_t> got[6];
    const int spec_mode = rs::kern::down_spec();
    for (int path = 0; path < 6; ++path) {
      rs::kern::set_expert_stream(path != 4);
      rs::kern::set_expert_ffn(path == 0 || path == 5 ? 2 : 0);
      rs::kern::set_xs_l2_sides(path != 5);
      rs::kern::set_down_spec(path == 2 ? 2 : path == 3 ? 0 : 1);
      out.poison();
      const uint64_t spec_before = rs::kern::down_spec_launches();
      rs::cuda::moe_experts(f.experts, reinterpret_cast<const __nv_bfloat16*>(x.ptr), 1, sh.top_k, dids.ptr, dw.ptr,
                            reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, ws_bytes}, nullptr);
      cuda_ok(cudaDeviceSynchronize(), "moe_experts");
      got[path] = out.download();
      // FP8: the guessing down is what ran on the paths that ask for it (not a silent fallback).
      if (type != WeightType::BF16 && (path == 1 || path == 2 || path == 4))
        CHECK(rs::kern::down_spec_launches() == spec_before + 1);
      if (path == 0 || path == 3 || path == 5) CHECK(rs::kern::down_spec_launches() == spec_before);
    }
    rs::kern::set_xs_l2_sides(true);
    rs::kern::set_expert_stream(true);
    rs::kern::set_expert_ffn(ffn_mode);
    rs::kern::set_down_spec(spec_mode);
    const auto ref = f.reference(1, xh, ids, w);
    const auto st = relative_error(got[0], ref);
    INFO((type == WeightType::BF16 ? "bf16" : "fp8") << " hidden=" << sh.hidden << " inter=" << sh.inter
                                                     << " n_shared=" << sh.n_shared << " invalid=" << with_invalid
                                                     << " call " << c << " rel=" << st.rel);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
    CHECK(got[0] == got[1]);
    CHECK(got[1] == got[2]);
    CHECK(got[1] == got[3]);
    CHECK(got[0] == got[5]);
    // FP8 rows of whole 64-column groups: the streamed gate_up sums each lane's four chunks in its
    // own order (xs_gate_up_rows), not the register kernel's; the register path is then held to
    // the reference alone.
    const auto st4 = relative_error(got[4], ref);
    CHECK(st4.nan == 0);
    CHECK(st4.rel <= kTolerance);
    if (type == WeightType::BF16 || sh.hidden % 64 != 0) CHECK(got[1] == got[4]);
  }
}

TEST_CASE("the L2 sides of a Hopper part: two non-empty SM sides, a counter page homed on each") {
  if (skip_without_gpu("L2 sides")) return;
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "device properties");
  if (prop.major != 9 || prop.multiProcessorCount < 100) {
    MESSAGE("not a full Hopper part (" << prop.name << "): the two-sided L2 is not expected; skipped");
    return;
  }
  const rs::kern::L2Sides& s = rs::kern::l2_sides();
  REQUIRE(s.valid);
  std::vector<uint8_t> side(rs::kern::kL2SideMaxSms);
  cuda_ok(cudaMemcpy(side.data(), s.sm_side, side.size(), cudaMemcpyDeviceToHost), "side table");
  int n1 = 0;
  for (int sm = 0; sm < prop.multiProcessorCount; ++sm) n1 += side[sm];
  INFO("SMs on side 1: " << n1 << " of " << prop.multiProcessorCount);
  CHECK(n1 > prop.multiProcessorCount / 4);
  CHECK(n1 < prop.multiProcessorCount * 3 / 4);
  for (int side = 0; side < 2; ++side)
    for (int k = 0; k < rs::kern::kL2SidePages; ++k) {
      CHECK(s.page[side][k] != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(s.page[side][k]) % 4096 == 0);
      CHECK(s.page[side][k] != s.page[1 - side][k]);
    }
}

TEST_CASE("streaming expert kernels (one token: the whole FFN, or gate_up) give the register kernels' bits and match the fp64 reference") {
  if (skip_without_gpu("streaming experts")) return;
  uint64_t seed = 9600;
  for (WeightType type : {WeightType::BF16, WeightType::FP8_E4M3_BLOCK}) {
    const int inter = type == WeightType::BF16 ? 176 : 256;
    for (int ns : {0, 1, 2})
      for (bool invalid : {false, true}) compare_stream_paths(type, {12, 272, inter, 4, ns}, seed++, invalid);
    compare_stream_paths(type, {12, type == WeightType::BF16 ? 1040 : 2064, inter, 4, 2}, seed++, false);
    compare_stream_paths(type, {8, 2048, 1408, 6, 2}, seed++, false);  // V2-Lite's slots and rows
    compare_stream_paths(type, {8, 2048, 1408, 6, 2}, seed++, true);
    compare_stream_paths(type, {8, 2048, 1408, 6, 2}, seed++, false, 5);
    // More than 16 down rows a block on a 132-SM part (two rows for some consumer warps).
    compare_stream_paths(type, {12, 4112, inter, 4, 2}, seed++, false);
    // FP8 rows of 64-column groups with more than one group a lane (hidden 3072: 48 groups).
    compare_stream_paths(type, {12, 3072, inter, 4, 1}, seed++, false);
  }
  // A grid of 64 blocks (inter 64), fewer than the SMs.
  compare_stream_paths(WeightType::BF16, {12, 272, 64, 4, 2}, seed++, false, 3);
}
}
