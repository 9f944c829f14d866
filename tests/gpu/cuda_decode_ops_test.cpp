// The decode step's small kernels against host references: the fused router (logits GEMV +
// selection in one launch, last-block-done), W_UV with the attention splits merged on the way in,
// the W_UK absorption, and the register-resident add + RMSNorm.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "backend/cpu/moe_routing.h"
#include "kernels/ops/lm_head_params.h"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/moe_router_params.h"
#include "kernels/ops/rmsnorm_params.h"
#include "model/model_spec.h"
#include "tests/gpu/cuda_test_util.h"

using namespace rs::cudatest;
namespace cu = rs::cuda;

namespace {

const __nv_bfloat16* bf(const Dev<uint16_t>& d) { return reinterpret_cast<const __nv_bfloat16*>(d.ptr); }
__nv_bfloat16* bf_mut(Dev<uint16_t>& d) { return reinterpret_cast<__nv_bfloat16*>(d.ptr); }

// The router logits GEMV of case c over n rows of x.
cu::LmHeadParams router_logits_params(const RouterCase& c, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                      float* logits, int n) {
  cu::LmHeadParams lg;
  lg.x = x;
  lg.w = w;
  lg.logits = logits;
  lg.n = n;
  lg.hidden = c.hidden;
  lg.vocab = c.E;
  return lg;
}

void run_fused_router_case(const RouterCase& c, int n, uint64_t seed, bool with_norm = false) {
  rs::ModelSpec s = router_spec(c);
  Rand rng(seed);
  std::vector<float> xf, wf;
  auto xb = rng.bf16(size_t(n) * c.hidden, -1.f, 1.f, &xf);
  auto wb = rng.bf16(size_t(c.E) * c.hidden, -0.06f, 0.06f, &wf);
  std::vector<float> bias(c.E);
  for (auto& v : bias) v = rng.normal(0.05f);
  Dev<uint16_t> dx(xb), dw(wb);
  Dev<float> dbias(bias), dlog(size_t(n) * c.E), dwt(size_t(n) * c.k), dwt2(size_t(n) * c.k), dmargin(n);
  Dev<int32_t> dids(size_t(n) * c.k), dids2(size_t(n) * c.k), dcount(cu::moe_router_fused_counters(n));
  cu::LmHeadParams lg = router_logits_params(c, bf(dx), bf(dw), dlog.ptr, n);
  cu::MoeRouterParams p = router_params(c, dlog.ptr, dbias.ptr, n, dids.ptr, dwt.ptr);
  p.margins = dmargin.ptr;
  INFO("E " << c.E << " k " << c.k << " hidden " << c.hidden << " n " << n << " norm " << with_norm);
  REQUIRE(cu::moe_router_fused_supported(lg, p));
  // With the norm: the input rows are RMSNorm(residual + delta) * g, computed by the kernel into
  // dx (which then holds what the experts read); the residual must stay untouched.
  std::vector<float> res(size_t(n) * c.hidden), g(c.hidden), df;
  for (auto& v : res) v = rng.normal(1.5f);
  for (auto& v : g) v = rng.uniform(0.5f, 1.5f);
  auto db = rng.bf16(size_t(n) * c.hidden, -1.f, 1.f, &df);
  Dev<float> dres(res), dg(g);
  Dev<uint16_t> ddelta(db);
  cu::RouterNormIn nin;
  nin.residual = dres.ptr;
  nin.delta = bf(ddelta);
  nin.weight = dg.ptr;
  nin.out = bf_mut(dx);
  nin.eps = 1e-6f;
  // Twice: the second launch finds the chunk counters the first one left (they must be zero again).
  for (int rep = 0; rep < 2; ++rep) {
    ok(cudaMemset(dids.ptr, 0xff, dids.n * 4), "memset");
    cu::launch_moe_router_fused(lg, p, dcount.ptr, 0, with_norm ? &nin : nullptr);
    ok(cudaGetLastError(), "launch fused router");
    auto counters = dcount.host();
    for (int v : counters) CHECK(v == 0);
  }
  if (with_norm) {
    CHECK(dres.host() == res);
    auto xb_gpu = dx.host();
    double worst = 0;
    for (int t = 0; t < n; ++t) {
      std::vector<float> v(c.hidden);
      double ss = 0;
      for (int i = 0; i < c.hidden; ++i) {
        v[i] = res[size_t(t) * c.hidden + i] + df[size_t(t) * c.hidden + i];
        ss += double(v[i]) * v[i];
      }
      const double inv = 1.0 / std::sqrt(ss / c.hidden + 1e-6);
      for (int i = 0; i < c.hidden; ++i) {
        const double ref = v[i] * inv * g[i];
        const float got = bf16_bits_to_float(xb_gpu[size_t(t) * c.hidden + i]);
        worst = std::max(worst, std::fabs(got - ref) / (std::fabs(ref) + 1e-3));
        xf[size_t(t) * c.hidden + i] = got;  // the host logits below use the rows the kernel wrote
      }
    }
    CHECK(worst < 8e-3);
  }
  auto logits = dlog.host();
  auto ids = dids.host();
  auto wts = dwt.host();
  // Logits against a double-precision host GEMV over the same bf16 values.
  double worst = 0;
  for (int t = 0; t < n; ++t)
    for (int e = 0; e < c.E; ++e) {
      double ref = 0;
      for (int i = 0; i < c.hidden; ++i) ref += double(xf[size_t(t) * c.hidden + i]) * wf[size_t(e) * c.hidden + i];
      worst = std::max(worst, std::fabs(logits[size_t(t) * c.E + e] - ref));
    }
  CHECK(worst < 2e-5 * std::sqrt(double(c.hidden)));
  // Selection: the standalone router over the same logits gives the same bits, and both agree
  // with the CPU routing of those logits.
  p.topk_ids = dids2.ptr;
  p.topk_weights = dwt2.ptr;
  p.margins = nullptr;
  cu::launch_moe_router(p, 0);
  ok(cudaGetLastError(), "launch router");
  auto ids2 = dids2.host();
  auto wts2 = dwt2.host();
  CHECK(ids == ids2);
  CHECK(wts == wts2);
  for (int t = 0; t < n; ++t) {
    rs::cpu::Route r = rs::cpu::route_token(s, &logits[size_t(t) * c.E], bias.data());
    std::map<int, float> ref, got;
    for (int i = 0; i < c.k; ++i) {
      ref[r.experts[i]] = r.weights[i];
      got[ids[size_t(t) * c.k + i]] = wts[size_t(t) * c.k + i];
    }
    INFO("token " << t);
    REQUIRE(got.size() == ref.size());
    for (auto [e, wv] : ref) {
      REQUIRE(got.count(e) == 1);
      CHECK(std::fabs(got[e] - wv) <= 1e-4 * std::max(1.f, std::fabs(wv)));
    }
  }
}

// Absorbed attention over a paged latent cache, then W_UV: host in double.
struct VUpCase {
  int heads, kv_lora, rope, nope, vdim, batch, splits;
  std::vector<int> lens;
};

void run_v_up_case(VUpCase c, uint64_t seed) {
  Rand rng(seed);
  if (c.lens.empty())  // random lengths, several empty splits among them
    for (int b = 0; b < c.batch; ++b) c.lens.push_back(1 + int(rng.uniform(0.f, 1.f) * 299.f));
  const int kvd = c.kv_lora + c.rope, bs = 16;
  int max_blocks = 0;
  for (int l : c.lens) max_blocks = std::max(max_blocks, (l + bs - 1) / bs);
  const int nblocks = c.batch * max_blocks + 1;
  std::vector<float> cache_f, q_f, kvb_f;
  auto cache_b = rng.bf16(size_t(nblocks) * bs * kvd, -1.f, 1.f, &cache_f);
  auto q_b = rng.bf16(size_t(c.batch) * c.heads * kvd, -1.f, 1.f, &q_f);
  auto kvb_b = rng.bf16(size_t(c.heads) * (c.nope + c.vdim) * c.kv_lora, -0.1f, 0.1f, &kvb_f);
  std::vector<int> perm(nblocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.g);
  std::vector<int32_t> bt(size_t(c.batch) * max_blocks);
  for (size_t i = 0; i < bt.size(); ++i) bt[i] = perm[i];
  const float scale = 0.07f;
  Dev<uint16_t> dq(q_b), dcache(cache_b), dkvb(kvb_b), dolat(size_t(c.batch) * c.heads * c.kv_lora);
  Dev<uint16_t> out_fused(size_t(c.batch) * c.heads * c.vdim), out_plain(size_t(c.batch) * c.heads * c.vdim);
  Dev<int32_t> dbt(bt), dlens(std::vector<int32_t>(c.lens.begin(), c.lens.end()));
  Dev<float> part_o(size_t(c.batch) * c.heads * c.splits * c.kv_lora), part_lse(size_t(c.batch) * c.heads * c.splits);
  // Garbage in the partials of empty splits must never be read.
  ok(cudaMemset(part_o.ptr, 0xff, part_o.n * 4), "memset");
  cu::MlaDecodeParams p;
  p.q = bf(dq);
  p.cache = bf(dcache);
  p.block_tables = dbt.ptr;
  p.bt_stride = max_blocks;
  p.block_size = bs;
  p.seq_lens = dlens.ptr;
  p.part_o = part_o.ptr;
  p.part_lse = part_lse.ptr;
  p.out = nullptr;  // no combine kernel: v_up merges
  p.batch = c.batch;
  p.heads = c.heads;
  p.splits = c.splits;
  p.kv_lora = c.kv_lora;
  p.kv_dim = kvd;
  p.scale = scale;
  cu::launch_mla_decode(p, 0);
  ok(cudaGetLastError(), "launch split");
  cu::MlaVUpParams v;
  v.kv_b = bf(dkvb);
  v.out = bf_mut(out_fused);
  v.n = c.batch;
  v.heads = c.heads;
  v.nope = c.nope;
  v.vdim = c.vdim;
  v.kv_lora = c.kv_lora;
  v.part_o = part_o.ptr;
  v.part_lse = part_lse.ptr;
  v.splits = c.splits;
  cu::launch_mla_v_up(v, 0);
  ok(cudaGetLastError(), "launch v_up merged");
  // The unfused path: combine kernel to bf16, then v_up from the bf16 latent rows.
  p.out = bf_mut(dolat);
  cu::launch_mla_decode(p, 0);
  cu::MlaVUpParams v2 = v;
  v2.part_o = nullptr;
  v2.part_lse = nullptr;
  v2.o_latent = bf(dolat);
  v2.out = bf_mut(out_plain);
  cu::launch_mla_v_up(v2, 0);
  ok(cudaGetLastError(), "launch v_up plain");
  auto gf = out_fused.host(), gp = out_plain.host();
  std::vector<float> got(gf.size()), got_plain(gp.size()), ref(gf.size());
  for (size_t i = 0; i < gf.size(); ++i) {
    got[i] = bf16_bits_to_float(gf[i]);
    got_plain[i] = bf16_bits_to_float(gp[i]);
  }
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h) {
      const float* qv = &q_f[(size_t(b) * c.heads + h) * kvd];
      auto row = [&](int t) { return &cache_f[(size_t(bt[size_t(b) * max_blocks + t / bs]) * bs + t % bs) * kvd]; };
      std::vector<double> sc(c.lens[b]);
      double mx = -1e300;
      for (int t = 0; t < c.lens[b]; ++t) {
        double d = 0;
        for (int i = 0; i < kvd; ++i) d += double(qv[i]) * row(t)[i];
        sc[t] = d * scale;
        mx = std::max(mx, sc[t]);
      }
      double sum = 0;
      for (auto& x : sc) sum += x = std::exp(x - mx);
      std::vector<double> o(c.kv_lora, 0.0);
      for (int t = 0; t < c.lens[b]; ++t)
        for (int i = 0; i < c.kv_lora; ++i) o[i] += sc[t] * row(t)[i];
      for (int j = 0; j < c.vdim; ++j) {
        const float* wr = &kvb_f[(size_t(h) * (c.nope + c.vdim) + c.nope + j) * c.kv_lora];
        double acc = 0;
        for (int i = 0; i < c.kv_lora; ++i) acc += o[i] / sum * wr[i];
        ref[(size_t(b) * c.heads + h) * c.vdim + j] = float(acc);
      }
    }
  INFO("heads " << c.heads << " kv_lora " << c.kv_lora << " vdim " << c.vdim << " batch " << c.batch << " splits "
                << c.splits);
  const double err = rel_err(got, ref), err_plain = rel_err(got_plain, ref);
  CHECK(err < 1e-2);
  CHECK(err_plain < 2e-2);
  // Merging in fp32 skips the bf16 rounding of the latent output: never worse than the old path
  // by more than noise.
  CHECK(err <= err_plain * 1.25 + 1e-4);
}

}  // namespace

TEST_SUITE("gpu.cuda") {

TEST_CASE("moe router fused: (add + RMSNorm +) logits GEMV + selection in one launch equal the host and CPU routing") {
  if (skip_without_gpu("moe router fused")) return;
  const RouterCase v2lite{rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 6, 1, 1, 2048, false, 1.0, false};
  const RouterCase v2{rs::ScoringFunc::Softmax, rs::TopkMethod::GroupLimitedGreedy, 160, 6, 8, 3, 5120, false, 16.0, false};
  const RouterCase v3{rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 256, 8, 8, 4, 7168, true, 2.5, true};
  const RouterCase tiny{rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 16, 4, 4, 2, 256, true, 2.5, true};
  for (int n : {1, 5, 64}) run_fused_router_case(v2lite, n, 100 + n);
  run_fused_router_case(v2, 3, 7);
  run_fused_router_case(v3, 1, 8);
  run_fused_router_case(v3, 17, 9);
  run_fused_router_case(tiny, 200, 10);
  // The post-attention add + RMSNorm folded in (decode batches up to 16).
  for (int n : {1, 16}) run_fused_router_case(v2lite, n, 200 + n, true);
  run_fused_router_case(v3, 9, 11, true);
  run_fused_router_case(tiny, 3, 12, true);
  // One and two tokens of V2-Lite and the tiny model take the 8-block cluster kernel; the same
  // cases on the 64-block kernel.
  for (bool cluster : {true, false}) {
    cu::set_router_cluster(cluster);
    for (int n : {1, 2}) {
      run_fused_router_case(v2lite, n, 300 + n, true);
      run_fused_router_case(tiny, n, 310 + n, true);
      run_fused_router_case(tiny, n, 320 + n, false);
    }
  }
  cu::set_router_cluster(true);
}

// Path 2: the cluster kernel reading the attention output as mla_v_up_o's fixed-point head sums
// (RouterNormIn::delta_fixed) that equal the bf16 delta exactly: the same bits again, the bf16
// delta written back to delta_out, and the sums zeroed for the next layer.
TEST_CASE("moe router fused: the cluster kernel gives the 64-block kernel's bits, from bf16 or fixed-point deltas") {
  if (skip_without_gpu("moe router cluster")) return;
  const RouterCase v2lite{rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 6, 1, 1, 2048, false, 1.0, false};
  const RouterCase tiny{rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 16, 4, 4, 2, 256, true, 2.5, true};
  for (const RouterCase& c : {v2lite, tiny})
    for (int n : {1, 2}) {
      INFO("E " << c.E << " n " << n);
      REQUIRE(cu::moe_router_cluster_fits(n, c.hidden, c.E, c.groups, c.k));
      Rand rng(400 + n + c.E);
      std::vector<float> res(size_t(n) * c.hidden), g(c.hidden), bias(c.E);
      for (auto& v : res) v = rng.normal(1.5f);
      for (auto& v : g) v = rng.uniform(0.5f, 1.5f);
      for (auto& v : bias) v = rng.normal(0.05f);
      std::vector<float> unused;
      auto wb = rng.bf16(size_t(c.E) * c.hidden, -0.06f, 0.06f, &unused);
      auto db = rng.bf16(size_t(n) * c.hidden, -1.f, 1.f, &unused);
      // Values below 2^-20 to zero: every delta is then a whole number of 2^-32.
      for (auto& b : db)
        if (std::fabs(bf16_bits_to_float(b)) < 0x1p-20f) b = 0;
      std::vector<unsigned long long> fixed(db.size());
      for (size_t i = 0; i < db.size(); ++i)
        fixed[i] = static_cast<unsigned long long>(std::llround(double(bf16_bits_to_float(db[i])) * 0x1p32));
      Dev<uint16_t> dw(wb), ddelta(db), ddelta_out(db.size());
      Dev<unsigned long long> dfixed(fixed);
      Dev<float> dres(res), dg(g), dbias(bias);
      std::vector<uint16_t> xn[3];
      std::vector<float> logits[3], wts[3], margins[3];
      std::vector<int32_t> ids[3];
      for (int path = 0; path < 3; ++path) {
        cu::set_router_cluster(path != 1);
        Dev<uint16_t> dx(size_t(n) * c.hidden);
        Dev<float> dlog(size_t(n) * c.E), dwt(size_t(n) * c.k), dmargin(n);
        Dev<int32_t> dids(size_t(n) * c.k), dcount(cu::moe_router_fused_counters(n));
        ok(cudaMemset(dcount.ptr, 0, dcount.n * 4), "memset");
        cu::LmHeadParams lg = router_logits_params(c, bf(dx), bf(dw), dlog.ptr, n);
        cu::MoeRouterParams p = router_params(c, dlog.ptr, dbias.ptr, n, dids.ptr, dwt.ptr);
        p.margins = dmargin.ptr;
        cu::RouterNormIn nin;
        nin.residual = dres.ptr;
        nin.delta = path == 2 ? nullptr : bf(ddelta);
        if (path == 2) {
          REQUIRE(cu::moe_router_cluster_takes(n, c.hidden, c.E, c.groups, c.k));
          nin.delta_fixed = dfixed.ptr;
          nin.delta_out = bf_mut(ddelta_out);
        }
        nin.weight = dg.ptr;
        nin.out = bf_mut(dx);
        cu::launch_moe_router_fused(lg, p, dcount.ptr, 0, &nin);
        ok(cudaGetLastError(), "launch fused router");
        xn[path] = dx.host();
        logits[path] = dlog.host();
        ids[path] = dids.host();
        wts[path] = dwt.host();
        margins[path] = dmargin.host();
      }
      for (int path : {0, 2}) {
        INFO("path " << path);
        CHECK(xn[path] == xn[1]);
        CHECK(logits[path] == logits[1]);
        CHECK(ids[path] == ids[1]);
        CHECK(wts[path] == wts[1]);
        CHECK(margins[path] == margins[1]);
      }
      CHECK(ddelta_out.host() == db);
      const auto left = dfixed.host();
      CHECK(std::all_of(left.begin(), left.end(), [](unsigned long long w) { return w == 0; }));
    }
  cu::set_router_cluster(true);
}

TEST_CASE("mla v up: splits merged in fp32 on the way in equal host attention through W_UV") {
  if (skip_without_gpu("mla v up merged")) return;
  run_v_up_case({4, 64, 16, 32, 32, 1, 1, {1}}, 1);
  run_v_up_case({4, 64, 16, 32, 32, 3, 4, {5, 64, 130}}, 2);
  // Split kernel shapes: grids of at most one block per SM (the first four) run 8 warps a block,
  // the batch-64 grid (256 blocks) 4 warps.
  run_v_up_case({16, 512, 64, 128, 128, 1, 64, {1000}}, 3);           // 32 of 64 splits hold tokens
  run_v_up_case({16, 512, 64, 128, 128, 5, 20, {1, 17, 64, 65, 700}}, 4);
  run_v_up_case({16, 512, 64, 128, 128, 64, 4, {}}, 5);                // batch 64: 8 token chunks, 4 rows a warp
}

TEST_CASE("mla absorb: q_nope . W_UK (16-byte weight pieces, token chunks) equals the host product") {
  if (skip_without_gpu("mla absorb")) return;
  struct C { int heads, nope, rope, vdim, kv_lora, n; };
  for (C c : {C{4, 32, 16, 32, 64, 1}, C{4, 32, 16, 32, 64, 19}, C{16, 128, 64, 128, 512, 1}, C{16, 128, 64, 128, 512, 13}}) {
    Rand rng(c.heads * 31 + c.n);
    const int qdim = c.nope + c.rope, odim = c.kv_lora + c.rope;
    std::vector<float> qf, wf;
    auto qb = rng.bf16(size_t(c.n) * c.heads * qdim, -1.f, 1.f, &qf);
    auto wb = rng.bf16(size_t(c.heads) * (c.nope + c.vdim) * c.kv_lora, -0.2f, 0.2f, &wf);
    Dev<uint16_t> dq(qb), dw(wb), dout(size_t(c.n) * c.heads * odim);
    cu::MlaAbsorbQParams p;
    p.q = bf(dq);
    p.kv_b = bf(dw);
    p.out = bf_mut(dout);
    p.n = c.n;
    p.heads = c.heads;
    p.nope = c.nope;
    p.rope = c.rope;
    p.vdim = c.vdim;
    p.kv_lora = c.kv_lora;
    cu::launch_mla_absorb_q(p, 0);
    ok(cudaGetLastError(), "launch absorb");
    auto got = dout.host();
    double worst = 0;
    bool rope_exact = true;
    for (int t = 0; t < c.n; ++t)
      for (int h = 0; h < c.heads; ++h) {
        const float* qv = &qf[(size_t(t) * c.heads + h) * qdim];
        for (int i = 0; i < c.kv_lora; ++i) {
          double ref = 0;
          for (int d = 0; d < c.nope; ++d) ref += double(qv[d]) * wf[(size_t(h) * (c.nope + c.vdim) + d) * c.kv_lora + i];
          const float g = bf16_bits_to_float(got[(size_t(t) * c.heads + h) * odim + i]);
          worst = std::max(worst, std::fabs(g - ref) / (std::fabs(ref) + 0.05));
        }
        for (int i = 0; i < c.rope; ++i)
          rope_exact &= got[(size_t(t) * c.heads + h) * odim + c.kv_lora + i] == qb[(size_t(t) * c.heads + h) * qdim + c.nope + i];
      }
    INFO("heads " << c.heads << " nope " << c.nope << " kv_lora " << c.kv_lora << " n " << c.n);
    CHECK(worst < 1e-2);  // bf16 output rounding
    CHECK(rope_exact);
  }
}

TEST_CASE("add + rmsnorm: register-resident rows equal the host residual update and norm") {
  if (skip_without_gpu("add rmsnorm")) return;
  for (int hidden : {256, 2048, 7168, 1001}) {
    for (int nd : {0, 1, 2}) {
      const int n = 3;
      Rand rng(hidden + nd);
      std::vector<float> res(size_t(n) * hidden), wt(hidden), d0f, d1f;
      for (auto& v : res) v = rng.normal(2.f);
      for (auto& v : wt) v = rng.uniform(0.5f, 1.5f);
      auto d0b = rng.bf16(size_t(n) * hidden, -1.f, 1.f, &d0f);
      auto d1b = rng.bf16(size_t(n) * hidden, -1.f, 1.f, &d1f);
      Dev<float> dres(res), dwt(wt);
      Dev<uint16_t> dd0(d0b), dd1(d1b), dout(size_t(n) * hidden);
      cu::AddRmsNormParams p;
      p.residual = dres.ptr;
      p.delta0 = nd >= 1 ? bf(dd0) : nullptr;
      p.delta1 = nd >= 2 ? bf(dd1) : nullptr;
      p.weight = dwt.ptr;
      p.out = bf_mut(dout);
      p.n = n;
      p.hidden = hidden;
      p.eps = 1e-6f;
      cu::launch_add_rmsnorm(p, 0);
      ok(cudaGetLastError(), "launch add_rmsnorm");
      auto gres = dres.host();
      auto gout = dout.host();
      double worst_res = 0, worst_out = 0;
      for (int r = 0; r < n; ++r) {
        double ss = 0;
        std::vector<float> v(hidden);
        for (int i = 0; i < hidden; ++i) {
          float x = res[size_t(r) * hidden + i];
          if (nd >= 1) x += d0f[size_t(r) * hidden + i];
          if (nd >= 2) x += d1f[size_t(r) * hidden + i];
          v[i] = x;
          ss += double(x) * x;
          worst_res = std::max(worst_res, double(std::fabs(gres[size_t(r) * hidden + i] - x)));
        }
        const double inv = 1.0 / std::sqrt(ss / hidden + 1e-6);
        for (int i = 0; i < hidden; ++i) {
          const double ref = v[i] * inv * wt[i];
          const double g = bf16_bits_to_float(gout[size_t(r) * hidden + i]);
          worst_out = std::max(worst_out, std::fabs(g - ref) / (std::fabs(ref) + 1e-3));
        }
      }
      INFO("hidden " << hidden << " deltas " << nd);
      CHECK(worst_res == 0.0);  // the same fp32 additions in the same order
      CHECK(worst_out < 8e-3);  // bf16 output rounding
    }
  }
}

}  // TEST_SUITE
