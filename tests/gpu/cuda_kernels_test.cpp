// The CUDA executor's kernels against small host references: MLA decode (absorbed, split over the
// KV length, paged) and prefill (expanded, causal, cached prefix), RoPE/YaRN, the MoE router, the
// sampler, and GPU dummy weights against Weights::dummy.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <utility>

#include "backend/cpu/moe_routing.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/gpu_sampler.h"
#include "backend/sampling.h"
#include "kernels/bench/boundary_chain.h"
#include "kernels/bench/fanout_read.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/mla_prefill_params.h"
#include "kernels/ops/moe_router_params.h"
#include "kernels/ops/rope_params.h"
#include "kernels/ops/sampling_params.h"
#include "model/model_spec.h"
#include "model/rope.h"
#include "model/weights.h"
#include "tests/gpu/cuda_test_util.h"

using namespace rs::cudatest;
namespace cu = rs::cuda;

namespace {

struct DecodeCase {
  int heads, kv_lora, rope, batch, splits;
  std::vector<int> lens;
};

void run_decode_case(const DecodeCase& c, uint64_t seed) {
  Rand rng(seed);
  const int kvd = c.kv_lora + c.rope, bs = 16;
  int max_blocks = 0;
  for (int l : c.lens) max_blocks = std::max(max_blocks, (l + bs - 1) / bs);
  const int nblocks = c.batch * max_blocks + 3;
  std::vector<float> cache_f;
  auto cache_b = rng.bf16(size_t(nblocks) * bs * kvd, -1.f, 1.f, &cache_f);
  std::vector<float> q_f;
  auto q_b = rng.bf16(size_t(c.batch) * c.heads * kvd, -1.f, 1.f, &q_f);
  // Block tables: a permutation, so pages are not contiguous.
  std::vector<int> perm(nblocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.g);
  std::vector<int32_t> bt(size_t(c.batch) * max_blocks);
  for (int b = 0; b < c.batch; ++b)
    for (int k = 0; k < max_blocks; ++k) bt[size_t(b) * max_blocks + k] = perm[b * max_blocks + k];
  const float scale = 0.07f;
  Dev<uint16_t> dq(q_b), dcache(cache_b);
  Dev<int32_t> dbt(bt), dlens(std::vector<int32_t>(c.lens.begin(), c.lens.end()));
  Dev<float> part_o(size_t(c.batch) * c.heads * c.splits * c.kv_lora), part_lse(size_t(c.batch) * c.heads * c.splits);
  Dev<uint16_t> out(size_t(c.batch) * c.heads * c.kv_lora);
  cu::MlaDecodeParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(dq.ptr);
  p.cache = reinterpret_cast<const __nv_bfloat16*>(dcache.ptr);
  p.block_tables = dbt.ptr;
  p.bt_stride = max_blocks;
  p.block_size = bs;
  p.seq_lens = dlens.ptr;
  p.part_o = part_o.ptr;
  p.part_lse = part_lse.ptr;
  p.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);
  p.batch = c.batch;
  p.heads = c.heads;
  p.splits = c.splits;
  p.kv_lora = c.kv_lora;
  p.kv_dim = kvd;
  p.scale = scale;
  cu::launch_mla_decode(p, 0);
  ok(cudaGetLastError(), "launch");
  auto got_b = out.host();
  std::vector<float> got(got_b.size()), ref(got_b.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_bits_to_float(got_b[i]);
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.heads; ++h) {
      const float* qv = &q_f[(size_t(b) * c.heads + h) * kvd];
      std::vector<double> s(c.lens[b]);
      double mx = -1e300;
      for (int t = 0; t < c.lens[b]; ++t) {
        const float* kv = &cache_f[(size_t(bt[size_t(b) * max_blocks + t / bs]) * bs + t % bs) * kvd];
        double d = 0;
        for (int i = 0; i < kvd; ++i) d += double(qv[i]) * kv[i];
        s[t] = d * scale;
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (auto& v : s) sum += v = std::exp(v - mx);
      for (int i = 0; i < c.kv_lora; ++i) {
        double o = 0;
        for (int t = 0; t < c.lens[b]; ++t)
          o += s[t] * cache_f[(size_t(bt[size_t(b) * max_blocks + t / bs]) * bs + t % bs) * kvd + i];
        ref[(size_t(b) * c.heads + h) * c.kv_lora + i] = float(o / sum);
      }
    }
  const double err = rel_err(got, ref);
  INFO("heads " << c.heads << " kv_lora " << c.kv_lora << " batch " << c.batch << " splits " << c.splits);
  CHECK(err < 2e-2);
}

}  // namespace

TEST_SUITE("gpu.cuda") {

TEST_CASE("bench boundary: every kind of dependency step runs, passes its values on, and refuses a grid that cannot be resident") {
  if (skip_without_gpu("bench boundary")) return;
  using rs::kern::BoundaryMode;
  for (BoundaryMode m : {BoundaryMode::kStreamOrder, BoundaryMode::kPdl, BoundaryMode::kFlag, BoundaryMode::kGridBarrier})
    for (int grid : {1, 16, 132}) {
      rs::kern::BoundaryTiming t;
      const char* err = nullptr;
      INFO(rs::kern::boundary_mode_name(m) << " grid " << grid);
      // The steps' values: every step adds one to what the previous stored, checked by the call.
      REQUIRE(rs::kern::measure_boundary(m, grid, 256, 20, 2, &t, &err));
      CHECK(err == nullptr);
      CHECK(t.median_us > 0.0);
      CHECK(t.p90_us >= t.median_us);
    }
  rs::kern::BoundaryTiming t;
  const char* err = nullptr;
  CHECK_FALSE(rs::kern::measure_boundary(BoundaryMode::kGridBarrier, 1 << 16, 1024, 20, 2, &t, &err));
  CHECK(err != nullptr);
}

TEST_CASE("bench fanout: every block's copy lands the region's bytes, cold and warm; oversized parts are refused") {
  if (skip_without_gpu("bench fanout")) return;
  for (bool cold : {true, false})
    for (auto [slices, fanout] : {std::pair{32, 1}, std::pair{8, 16}, std::pair{6, 3}}) {
      INFO("slices " << slices << " fanout " << fanout << (cold ? " cold" : " warm"));
      rs::kern::FanoutTiming t;
      const char* err = nullptr;
      // The kernel compares each landed word with the region's (its own index) and fails the call.
      REQUIRE(rs::kern::measure_fanout_read(int64_t(1024) * 1152, slices, fanout, cold, 3, &t, &err));
      CHECK(err == nullptr);
      CHECK(t.median_us > 0.0);
    }
  rs::kern::FanoutTiming t;
  const char* err = nullptr;
  CHECK_FALSE(rs::kern::measure_fanout_read(int64_t(2048) * 1152, 6, 1, false, 3, &t, &err));  // 384 KB a block
  CHECK(err != nullptr);
  err = nullptr;
  CHECK_FALSE(rs::kern::measure_fanout_read(8000, 8, 1, false, 3, &t, &err));  // 1000-byte parts: not 16-byte multiples
  CHECK(err != nullptr);
  err = nullptr;
  CHECK_FALSE(rs::kern::measure_fanout_read(1000, 3, 1, false, 3, &t, &err));  // no equal parts
  CHECK(err != nullptr);
}

TEST_CASE("mla decode: absorbed MQA over a paged latent cache equals host attention (splits, batches, heads)") {
  if (skip_without_gpu("mla decode")) return;
  run_decode_case({4, 64, 16, 1, 1, {1}}, 1);
  run_decode_case({4, 64, 16, 3, 4, {5, 64, 130}}, 2);
  run_decode_case({16, 512, 64, 1, 16, {1000}}, 3);
  run_decode_case({16, 512, 64, 5, 3, {1, 17, 64, 65, 700}}, 4);
  run_decode_case({20, 512, 64, 2, 2, {300, 33}}, 5);  // two head groups, the second partial
  run_decode_case({16, 512, 64, 2, 64, {3000, 40}}, 6);  // the most splits; most of the second row's are empty
}

TEST_CASE("rope: YaRN interleaved rotation on the GPU equals the host RopeTable (V2-Lite and V3 configs)") {
  if (skip_without_gpu("rope")) return;
  for (const char* cfg : {"model-shapes/deepseek-v2-lite/config.json", "model-shapes/deepseek-v3/config.json"}) {
    rs::ModelSpec spec = rs::load_model_spec(std::string(RS_FIXTURES_DIR) + "/" + std::string(cfg).substr(0, std::string(cfg).rfind('/')));
    rs::RopeTable rt = rs::make_rope_table(spec);
    const int heads = 3, qk = spec.qk_head_dim(), rope = spec.qk_rope_head_dim;
    const std::vector<int32_t> pos = {0, 1, 17, 4095, 4096, 33000, 160000};
    Rand rng(7);
    std::vector<float> qf;
    auto qb = rng.bf16(pos.size() * heads * qk, -1.f, 1.f, &qf);
    Dev<uint16_t> dq(qb);
    Dev<int32_t> dpos(pos);
    Dev<float> inv(rt.inv_freq);
    cu::RopeQParams p;
    p.q = reinterpret_cast<__nv_bfloat16*>(dq.ptr);
    p.positions = dpos.ptr;
    p.n = int(pos.size());
    p.heads = heads;
    p.head_dim = qk;
    p.rope.inv_freq = inv.ptr;
    p.rope.mscale = rt.attention_factor;
    p.rope.rope_dim = rope;
    p.rope.interleave = rt.interleave;
    cu::launch_rope_q(p, 0);
    auto gb = dq.host();
    double worst = 0;
    for (size_t t = 0; t < pos.size(); ++t)
      for (int h = 0; h < heads; ++h) {
        float* x = &qf[(t * heads + h) * qk + (qk - rope)];
        rt.apply(x, pos[t]);
        for (int i = 0; i < rope; ++i)
          worst = std::max(worst, double(std::fabs(bf16_bits_to_float(gb[(t * heads + h) * qk + (qk - rope) + i]) - x[i])));
      }
    INFO(cfg);
    CHECK(worst < 1.5e-2);  // bf16 rounding of values up to ~1.4 (attention factor)
  }
}

TEST_CASE("moe router: softmax/sigmoid x greedy/group_limited/noaux_tc select as the CPU routing does") {
  if (skip_without_gpu("moe router")) return;
  const RouterCase cases[] = {
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 6, 1, 1, 0, false, 1.0, false},
      {rs::ScoringFunc::Softmax, rs::TopkMethod::GroupLimitedGreedy, 160, 6, 8, 3, 0, false, 16.0, false},
      {rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 256, 8, 8, 4, 0, true, 2.5, true},
      {rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 16, 4, 4, 2, 0, true, 2.5, true},
  };
  for (const RouterCase& c : cases) {
    rs::ModelSpec s = router_spec(c);
    const int n = 40;
    Rand rng(c.E * 7 + c.k);
    std::vector<float> logits(size_t(n) * c.E), bias(c.E);
    for (auto& v : logits) v = rng.normal(1.0f);
    for (auto& v : bias) v = rng.normal(0.05f);
    Dev<float> dlog(logits), dbias(bias), dwt(size_t(n) * c.k);
    Dev<int32_t> dids(size_t(n) * c.k);
    cu::MoeRouterParams p = router_params(c, dlog.ptr, dbias.ptr, n, dids.ptr, dwt.ptr);
    cu::launch_moe_router(p, 0);
    auto ids = dids.host();
    auto wts = dwt.host();
    int compared = 0;
    for (int t = 0; t < n; ++t) {
      rs::cpu::Route r = rs::cpu::route_token(s, &logits[size_t(t) * c.E], bias.data());
      std::map<int, float> ref, got;
      for (int i = 0; i < c.k; ++i) {
        ref[r.experts[i]] = r.weights[i];
        got[ids[size_t(t) * c.k + i]] = wts[size_t(t) * c.k + i];
      }
      INFO("E " << c.E << " k " << c.k << " token " << t);
      REQUIRE(got.size() == ref.size());
      for (auto [e, wv] : ref) {
        REQUIRE(got.count(e) == 1);
        CHECK(std::fabs(got[e] - wv) <= 1e-4 * std::max(1.f, std::fabs(wv)));
      }
      ++compared;
    }
    CHECK(compared == n);
  }
}

// The compact selection (softmax, no groups, <= 64 experts) promises the general path's bits:
// the same ids in the same order, weights and margins, ties to the lower index; and the same ids
// and weights without margins (one round fewer). Logits drawn from a few values, so rows carry
// ties, also across the top-k cut.
TEST_CASE("moe router: the compact selection gives the general path's ids, weights and margins") {
  if (skip_without_gpu("moe router, compact selection")) return;
  const RouterCase cases[] = {
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 6, 1, 1, 0, false, 1.0, false},
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 6, 1, 1, 0, true, 1.0, false},
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 33, 8, 1, 1, 0, true, 2.5, false},
      {rs::ScoringFunc::Softmax, rs::TopkMethod::GroupLimitedGreedy, 20, 1, 1, 1, 0, false, 16.0, false},
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 8, 8, 1, 1, 0, true, 1.0, true},
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 31, 1, 1, 0, true, 1.0, false},
  };
  for (const RouterCase& c : cases) {
    const int n = 96;
    Rand rng(c.E * 13 + c.k);
    std::vector<float> logits(size_t(n) * c.E), bias(c.E, 0.f);
    for (size_t i = 0; i < logits.size(); ++i)
      logits[i] = i < size_t(n / 2) * c.E ? std::round(rng.normal(2.0f)) * 0.5f : rng.normal(1.0f);
    Dev<float> dlog(logits), dbias(bias);
    constexpr int kVariants = 3;  // general, compact, compact without margins
    std::vector<int32_t> ids[kVariants];
    std::vector<float> wts[kVariants], margins[kVariants];
    for (int v = 0; v < kVariants; ++v) {
      Dev<float> dwt(size_t(n) * c.k), dmar{size_t(n)};
      Dev<int32_t> dids(size_t(n) * c.k);
      cu::MoeRouterParams p = router_params(c, dlog.ptr, dbias.ptr, n, dids.ptr, dwt.ptr);
      p.margins = v == 2 ? nullptr : dmar.ptr;
      p.compact_select = v >= 1;
      cu::launch_moe_router(p, 0);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      ids[v] = dids.host();
      wts[v] = dwt.host();
      margins[v] = dmar.host();
    }
    for (int v = 1; v < kVariants; ++v) {
      INFO("E " << c.E << " k " << c.k << " variant " << v);
      CHECK(ids[v] == ids[0]);
      for (size_t i = 0; i < wts[0].size(); ++i) CHECK(std::memcmp(&wts[v][i], &wts[0][i], 4) == 0);
      if (v != 2)
        for (int t = 0; t < n; ++t) CHECK(std::memcmp(&margins[v][t], &margins[0][t], 4) == 0);
    }
  }
}

TEST_CASE("moe router: rows of NaN or -inf logits (a broken checkpoint) select ids inside the row, no fault") {
  if (skip_without_gpu("moe router, non-finite logits")) return;
  const RouterCase cases[] = {
      {rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 64, 6, 1, 1, 0, false, 1.0, false},
      {rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 256, 8, 8, 4, 0, true, 2.5, true},
  };
  for (const RouterCase& c : cases) {
    const int n = 3;  // a NaN row, a -inf row, a row with one NaN among finite logits
    std::vector<float> logits(size_t(n) * c.E, std::nanf("")), bias(c.E, 0.f);
    for (int e = 0; e < c.E; ++e) logits[size_t(c.E) + e] = -INFINITY;
    for (int e = 0; e < c.E; ++e) logits[size_t(2) * c.E + e] = e == 3 ? std::nanf("") : 0.01f * float(e);
    Dev<float> dlog(logits), dbias(bias), dwt(size_t(n) * c.k);
    Dev<int32_t> dids(size_t(n) * c.k);
    cu::MoeRouterParams p = router_params(c, dlog.ptr, dbias.ptr, n, dids.ptr, dwt.ptr);
    cu::launch_moe_router(p, 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // an index past the row would fault here
    const auto ids = dids.host();
    INFO("E " << c.E << " k " << c.k);
    for (int32_t id : ids) {
      CHECK(id >= 0);
      CHECK(id < c.E);
    }
  }
}

// Runs the GPU sampler (logit pre-pass + per-row kernel) over rows of `logits`; also checks that
// the penalty scratch is left zero, as the kernel promises its next caller.
static std::vector<cu::SampleResult> sample_on_gpu(const std::vector<float>& logits, const std::vector<cu::SampleRow>& rows,
                                            const std::vector<int32_t>& pool, int V) {
  const size_t R = rows.size();
  Dev<float> dl(logits), work(R * V);
  Dev<int32_t> flags(R * V), counts(R * V), dpool(pool);
  Dev<cu::SampleRow> drows(rows);
  Dev<cu::SampleResult> dout(R);
  Dev<cu::LogitStats> dstats(R * cu::logit_stats_segments(V));
  cu::SamplingParamsDev d;
  d.logits = dl.ptr;
  d.vocab = V;
  d.n = int(R);
  d.rows = drows.ptr;
  d.tokens = dpool.ptr;
  d.work = work.ptr;
  d.flags = flags.ptr;
  d.counts = counts.ptr;
  d.out = dout.ptr;
  d.stats = dstats.ptr;
  cu::launch_sampling(d, 0);
  ok(cudaGetLastError(), "launch");
  auto got = dout.host();
  auto f = flags.host(), cn = counts.host();
  CHECK(std::all_of(f.begin(), f.end(), [](int v) { return v == 0; }));
  CHECK(std::all_of(cn.begin(), cn.end(), [](int v) { return v == 0; }));
  return got;
}

TEST_CASE("sampler: the GPU sampler picks the host sampler's token and logprobs for every option") {
  if (skip_without_gpu("sampler")) return;
  const int V = 5000;
  std::vector<rs::SamplingParams> ps;
  auto add = [&](auto f) { rs::SamplingParams p; f(p); ps.push_back(p); };
  add([](auto& p) { p.temperature = 0; });
  add([](auto& p) { p.temperature = 0; p.logprobs = 5; });
  add([](auto& p) { p.temperature = 1.0f; p.seed = 1; });
  add([](auto& p) { p.temperature = 0.7f; p.top_k = 50; p.seed = 2; p.logprobs = 3; });
  add([](auto& p) { p.temperature = 1.3f; p.top_p = 0.9f; p.seed = 3; });
  add([](auto& p) { p.temperature = 1.0f; p.min_p = 0.05f; p.seed = 4; });
  add([](auto& p) { p.temperature = 0.9f; p.top_k = 20; p.top_p = 0.5f; p.min_p = 0.01f; p.seed = 5; });
  add([](auto& p) { p.temperature = 0; p.repetition_penalty = 1.5f; p.presence_penalty = 0.7f; p.frequency_penalty = 0.4f; });
  add([](auto& p) { p.temperature = 0.8f; p.repetition_penalty = 0.8f; p.frequency_penalty = -0.3f; p.seed = 6; p.logprobs = 20; });
  add([](auto& p) { p.temperature = 1.0f; p.top_k = 1; p.seed = 7; });
  // Bias that moves the argmax (onto 7), bans the top tokens, and meets the penalties.
  add([](auto& p) { p.temperature = 0; p.logprobs = 2; p.logit_bias = {{7, 30.f}, {4998, -5.f}}; });
  add([](auto& p) { p.temperature = 0.9f; p.seed = 8; p.logit_bias = {{17, -100.f}, {42, -100.f}, {400, -100.f}}; });
  add([](auto& p) { p.temperature = 0; p.repetition_penalty = 1.5f; p.logit_bias = {{17, 1.5f}, {42, 0.25f}}; });
  // Guided decoding: the last two parameter sets also get an allowed-token mask (ids = 3 mod 7,
  // which excludes the boosted 17, 42 and 400).
  const size_t first_masked = ps.size();
  add([](auto& p) { p.temperature = 0; p.logprobs = 3; });
  add([](auto& p) { p.temperature = 0.8f; p.top_p = 0.9f; p.seed = 9; p.logit_bias = {{10, 5.f}}; });
  std::vector<uint32_t> mask((V + 31) / 32, 0u);
  for (int id = 3; id < V; id += 7) mask[id / 32] |= 1u << (id % 32);
  Rand rng(11);
  const int R = int(ps.size()) * 4;  // each parameter set with four draws
  std::vector<float> logits(size_t(R) * V);
  for (auto& v : logits) v = rng.normal(3.0f);
  std::vector<int32_t> prompt = {5, 17, 17, 400, 4999, 0}, output = {17, 42, 42, 42, 3000};
  for (int r = 0; r < R; ++r) {  // the penalised tokens near the top, so penalties matter
    for (int t : {17, 42, 400}) logits[size_t(r) * V + t] = 9.0f + 0.1f * t / 400.f;
  }
  std::vector<rs::SamplingState> states(R);
  std::vector<rs::cuda::SampleRow> rows(R);
  std::vector<int32_t> pool;
  pool.insert(pool.end(), prompt.begin(), prompt.end());
  pool.insert(pool.end(), output.begin(), output.end());
  for (int r = 0; r < R; ++r) {
    const rs::SamplingParams& p = ps[r % ps.size()];
    states[r].params = &p;
    states[r].prompt_tokens = prompt;
    states[r].output_tokens = output;
    states[r].draw_index = uint64_t(r / ps.size()) * 13;
    if (r % ps.size() >= first_masked) states[r].allowed = mask;
    rs::cuda::SampleRow& row = rows[r];
    row = rs::cuda::sample_row_of(p, states[r].draw_index, r);
    row.prompt_off = 0;
    row.prompt_len = int(prompt.size());
    row.output_off = int(prompt.size());
    row.output_len = int(output.size());
    if (!states[r].allowed.empty()) {
      row.mask_off = int(pool.size());
      for (uint32_t w : mask) pool.push_back(int32_t(w));
    }
    row.bias_off = int(pool.size());
    row.bias_len = int(p.logit_bias.size());
    for (auto [t, b] : p.logit_bias) {
      int32_t bits;
      std::memcpy(&bits, &b, 4);
      pool.push_back(t);
      pool.push_back(bits);
    }
  }
  auto got = sample_on_gpu(logits, rows, pool, V);
  for (int r = 0; r < R; ++r) {
    rs::SampledToken ref = rs::sample_token(std::span<const float>(&logits[size_t(r) * V], V), states[r]);
    INFO("row " << r << " params " << r % ps.size());
    CHECK(got[r].id == ref.id);
    if (!states[r].allowed.empty()) CHECK(ref.id % 7 == 3);
    CHECK(std::fabs(got[r].logprob - ref.logprob) < 1e-3);
    const int ntop = std::max(0, ps[r % ps.size()].logprobs);
    REQUIRE(ref.top.size() == size_t(ntop));
    for (int k = 0; k < ntop; ++k) {
      CHECK(got[r].top_ids[k] == ref.top[k].first);
      CHECK(std::fabs(got[r].top_logprobs[k] - ref.top[k].second) < 1e-3);
    }
  }
}

// Rows r = 0..R-1 with parameter set ps[r % ps.size()], draw index r and logits row r, no penalty
// tokens: the host sampler's states and the GPU sampler's rows.
static void plain_sample_rows(const std::vector<rs::SamplingParams>& ps, int R, std::vector<rs::SamplingState>& states,
                              std::vector<cu::SampleRow>& rows) {
  states.assign(R, {});
  rows.assign(R, {});
  for (int r = 0; r < R; ++r) {
    const rs::SamplingParams& p = ps[r % ps.size()];
    states[r].params = &p;
    states[r].draw_index = uint64_t(r);
    rows[r] = cu::sample_row_of(p, states[r].draw_index, r);
  }
}

TEST_CASE("sampler: rows of NaN logits (a broken checkpoint) give ids inside the vocabulary, greedy as the host sampler") {
  if (skip_without_gpu("sampler, NaN logits")) return;
  const int V = 3000;
  std::vector<rs::SamplingParams> ps(5);
  ps[0].temperature = 0;           // plain greedy: the pre-pass's argmax
  ps[1].temperature = 0;           // greedy through the penalties
  ps[1].repetition_penalty = 1.3f;
  ps[1].logprobs = 3;
  ps[2].temperature = 0.9f;        // sampling, nothing truncated
  ps[2].seed = 7;
  ps[3].temperature = 0.8f;        // sampling with top-p and top-k
  ps[3].top_p = 0.9f;
  ps[3].top_k = 20;
  ps[3].seed = 8;
  ps[3].logprobs = 2;
  ps[4].temperature = 1.0f;
  ps[4].min_p = 0.1f;
  ps[4].seed = 9;
  const int R = int(ps.size());
  const std::vector<float> logits(size_t(R) * V, std::nanf(""));
  std::vector<rs::SamplingState> states;
  std::vector<cu::SampleRow> rows;
  plain_sample_rows(ps, R, states, rows);
  auto got = sample_on_gpu(logits, rows, {0}, V);  // an index past the row would fault in here
  for (int r = 0; r < R; ++r) {
    rs::SampledToken ref = rs::sample_token(std::span<const float>(&logits[size_t(r) * V], V), states[r]);
    INFO("row " << r);
    CHECK(got[r].id >= 0);
    CHECK(got[r].id < V);
    // Greedy takes the first id on both. Sampling keeps no token on the GPU (no probability
    // compares >= 0) and falls back to the raw argmax, the first id; the host's cumulative walk
    // never passes its NaN target and ends on the last token it kept: both inside the row, which
    // is all a NaN row can ask for.
    if (ps[r].temperature == 0) CHECK(got[r].id == ref.id);
    for (int k = 0; k < std::min(ps[r].logprobs, cu::kMaxTopLogprobs); ++k) {
      CHECK(got[r].top_ids[k] >= 0);
      CHECK(got[r].top_ids[k] < V);
    }
  }
}

TEST_CASE("sampler: a real-size vocabulary through the segment pre-pass (ties across segments, -inf segments)") {
  if (skip_without_gpu("sampler at V = 102403")) return;
  const int V = 102403;  // not a multiple of the segment length: the last segment is short
  REQUIRE(cu::logit_stats_segments(V) > 1);
  std::vector<rs::SamplingParams> ps(5);
  ps[0].temperature = 0;
  ps[1].temperature = 0;
  ps[1].logprobs = 5;
  ps[2].temperature = 1.0f;  // nothing truncated: the sampler skips its threshold search
  ps[2].seed = 3;
  ps[3].temperature = 0.8f;
  ps[3].top_p = 0.95f;
  ps[3].seed = 4;
  ps[4].temperature = 0.7f;
  ps[4].top_k = 40;
  ps[4].seed = 5;
  const int R = int(ps.size()) * 3;
  Rand rng(21);
  std::vector<float> logits(size_t(R) * V);
  for (auto& v : logits) v = rng.normal(2.0f);
  for (int r = 0; r < R; ++r) {
    float* row = &logits[size_t(r) * V];
    const int kind = r / int(ps.size());
    if (kind == 1) {  // the max twice, in different segments: the lower id wins
      row[90001] = 40.f;
      row[7000] = 40.f;
    } else if (kind == 2) {  // the first two segments all -inf, the max in the last (short) one
      for (int i = 0; i < 2 * 1024 + 5; ++i) row[i] = -INFINITY;
      row[V - 1] = 30.f;
    }
  }
  std::vector<rs::SamplingState> states;
  std::vector<cu::SampleRow> rows;
  plain_sample_rows(ps, R, states, rows);
  auto got = sample_on_gpu(logits, rows, {0}, V);
  for (int r = 0; r < R; ++r) {
    rs::SampledToken ref = rs::sample_token(std::span<const float>(&logits[size_t(r) * V], V), states[r]);
    INFO("row " << r << " params " << r % ps.size());
    CHECK(got[r].id == ref.id);
    CHECK(std::fabs(got[r].logprob - ref.logprob) < 1e-3);
    if (r / int(ps.size()) == 1 && ps[r % ps.size()].temperature == 0) CHECK(got[r].id == 7000);
    if (r / int(ps.size()) == 2 && ps[r % ps.size()].temperature == 0) CHECK(got[r].id == V - 1);
    for (int k = 0; k < std::max(0, ps[r % ps.size()].logprobs); ++k) {
      CHECK(got[r].top_ids[k] == ref.top[k].first);
      CHECK(std::fabs(got[r].top_logprobs[k] - ref.top[k].second) < 1e-3);
    }
  }
}

TEST_CASE("dummy weights: created on the GPU they equal Weights::dummy byte for byte (bf16 and FP8); experts at one stride") {
  if (skip_without_gpu("dummy weights")) return;
  for (const char* m : {"tiny-v3", "tiny-v3-fp8", "tiny-v2-softmax"}) {
    rs::ModelSpec spec = rs::load_model_spec(std::string(RS_FIXTURES_DIR) + "/models/" + m);
    auto host = rs::Weights::dummy(spec, 42);
    auto dev = rs::cuda::dummy_device_weights(spec, 42);
    INFO(m);
    // embedding (bf16)
    const rs::Tensor& emb = host->get("model.embed_tokens.weight");
    std::vector<uint16_t> e(emb.numel());
    ok(cudaMemcpy(e.data(), dev->embed, e.size() * 2, cudaMemcpyDeviceToHost), "D2H");
    CHECK(std::memcmp(e.data(), emb.data, e.size() * 2) == 0);
    // a norm (fp32 on the device from the bf16 value)
    const rs::Tensor& nrm = host->get("model.layers.1.post_attention_layernorm.weight");
    std::vector<float> nv(nrm.numel());
    ok(cudaMemcpy(nv.data(), dev->layers[1].post_norm, nv.size() * 4, cudaMemcpyDeviceToHost), "D2H");
    for (size_t i = 0; i < nv.size(); ++i)
      CHECK(nv[i] == bf16_bits_to_float(static_cast<const uint16_t*>(nrm.data)[i]));
    // an expert matrix: bf16 bytes, or e4m3 bytes + scales
    const rs::Tensor& ex = host->get("model.layers.1.mlp.experts.3.down_proj.weight");
    std::vector<rs::cuda::DeviceMatrix> mats(3 * spec.n_routed_experts);
    ok(cudaMemcpy(mats.data(), dev->layers[1].experts.gate, mats.size() * sizeof(mats[0]), cudaMemcpyDeviceToHost), "D2H");
    const rs::cuda::DeviceMatrix& dm = mats[2 * spec.n_routed_experts + 3];
    std::vector<uint8_t> bytes(ex.nbytes);
    ok(cudaMemcpy(bytes.data(), dm.data, bytes.size(), cudaMemcpyDeviceToHost), "D2H");
    CHECK(std::memcmp(bytes.data(), ex.data, bytes.size()) == 0);
    if (ex.scale_inv) {
      std::vector<float> sc(ex.scale_inv->numel());
      ok(cudaMemcpy(sc.data(), dm.scale_inv, sc.size() * 4, cudaMemcpyDeviceToHost), "D2H");
      CHECK(std::memcmp(sc.data(), ex.scale_inv->data, sc.size() * 4) == 0);
    }
    // The loader lays the routed experts out at one byte stride, created here or uploaded from host
    // tensors, so the kernels compute their views (MoeExperts::stride; validate_moe_experts, run at
    // load, checks every entry): the same view as the table's.
    const auto upl = rs::cuda::upload_weights(spec, *host);
    for (const rs::cuda::DeviceWeights* w : {dev.get(), upl.get()})
      for (const auto& L : w->layers) {
        if (!L.moe) continue;
        REQUIRE(L.experts.stride > 0);
        rs::cuda::DeviceMatrix g1;
        ok(cudaMemcpy(&g1, L.experts.gate + 1, sizeof(g1), cudaMemcpyDeviceToHost), "D2H");
        CHECK(static_cast<const uint8_t*>(g1.data) ==
              static_cast<const uint8_t*>(L.experts.first[0].data) + L.experts.stride);
      }
  }
}

}  // TEST_SUITE
