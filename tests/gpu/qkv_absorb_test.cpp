// One decode token's norm + q/kv GEMV + query absorption in one clustered launch
// (kernels/ops/qkv_absorb.cuh) against the grouped streaming GEMV followed by the absorb + cache
// write launch: the same bits in q, kv_a, the absorbed query, the residual and the normed x; the
// decode attention forming each sequence's newest cache row itself in a split of its own
// (launch_mla_decode's new_kv) against the row written by the absorb launch first and read from
// the cache, both against an fp64 attention; and whole V2-Lite decode steps with and without it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "kernels/common/sm_count.h"

#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/qkv_absorb_params.h"
#include "model/model_spec.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/linear_test_util.h"

using namespace rs::cudatest;
namespace cu = rs::cuda;

namespace {

constexpr int kHeads = 16, kLora = 512, kRope = 64, kNope = 128, kV = 128, kHidden = 2048, kSplits = 64;
constexpr int kQdim = kNope + kRope, kKvd = kLora + kRope;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A YaRN-free rope table on the device (the kernels only read inv_freq and mscale).
struct RopeTable {
  Dev<float> inv_freq;
  cu::RopeSpec spec;
  RopeTable() : inv_freq(make()) {
    spec.inv_freq = inv_freq.ptr;
    spec.mscale = 1.1f;
    spec.rope_dim = kRope;
    spec.interleave = true;
  }
  static std::vector<float> make() {
    std::vector<float> f(kRope / 2);
    for (int i = 0; i < kRope / 2; ++i) f[i] = std::pow(10000.f, -2.f * i / kRope);
    return f;
  }
};

// One token's absorption of q at V2-Lite's head shape, rotating q's rope part at *pos.
cu::MlaAbsorbQParams absorb_params(const uint16_t* q, const uint16_t* kv_b, uint16_t* out, const int32_t* pos,
                                   const cu::RopeSpec& rope) {
  cu::MlaAbsorbQParams a;
  a.q = reinterpret_cast<const __nv_bfloat16*>(q);
  a.kv_b = reinterpret_cast<const __nv_bfloat16*>(kv_b);
  a.out = reinterpret_cast<__nv_bfloat16*>(out);
  a.n = 1;
  a.heads = kHeads;
  a.nope = kNope;
  a.rope = kRope;
  a.vdim = kV;
  a.kv_lora = kLora;
  a.positions = pos;
  a.rotate = rope;
  return a;
}

void run_qkv_absorb_case(uint64_t seed, int position) {
  INFO("seed " << seed << " position " << position);
  Rand rng(seed);
  rs::test::Rng wrng(seed + 1);
  rs::test::TestMatrix wq(cu::WeightType::BF16, int64_t(kHeads) * kQdim, kHidden, wrng);
  rs::test::TestMatrix wkv(cu::WeightType::BF16, kKvd, kHidden, wrng);
  std::vector<float> f;
  auto kvb_b = rng.bf16(size_t(kHeads) * (kNope + kV) * kLora, -0.1f, 0.1f, &f);
  auto d0_b = rng.bf16(kHidden, -1.f, 1.f, &f), d1_b = rng.bf16(kHidden, -1.f, 1.f, &f);
  std::vector<float> resid(kHidden), nw(kHidden);
  for (float& v : resid) v = rng.uniform(-2.f, 2.f);
  for (float& v : nw) v = rng.uniform(0.5f, 1.5f);
  Dev<uint16_t> dkvb(kvb_b), d0(d0_b), d1(d1_b);
  Dev<float> dnw(nw);
  Dev<int32_t> dpos(std::vector<int32_t>{position});
  RopeTable rope;

  struct Out {
    std::vector<uint16_t> q, kv, qabs, xn;
    std::vector<float> resid;
  };
  auto run = [&](bool fused) {
    Dev<float> dres(resid);
    Dev<uint16_t> q(size_t(kHeads) * kQdim), kv(kKvd), qabs(size_t(kHeads) * kKvd), xn(kHidden);
    ok(cudaMemset(qabs.ptr, 0xff, qabs.n * 2), "poison qabs");
    rs::kern::DenseGemvParams g;
    g.w[0] = wq.dm;
    g.w[1] = wkv.dm;
    g.y[0] = q.ptr;
    g.y[1] = kv.ptr;
    g.jobs = 2;
    g.x = reinterpret_cast<const __nv_bfloat16*>(xn.ptr);
    g.m = 1;
    g.norm_residual = dres.ptr;
    g.norm_out = reinterpret_cast<__nv_bfloat16*>(xn.ptr);
    g.norm_delta[0] = reinterpret_cast<const __nv_bfloat16*>(d0.ptr);
    g.norm_delta[1] = reinterpret_cast<const __nv_bfloat16*>(d1.ptr);
    g.norm_weight = dnw.ptr;
    g.norm_eps = 1e-6f;
    const cu::MlaAbsorbQParams a = absorb_params(q.ptr, dkvb.ptr, qabs.ptr, dpos.ptr, rope.spec);
    if (fused) {
      const uint64_t before = cu::qkv_absorb_launches();
      const bool launched = cu::launch_qkv_absorb(cu::QkvAbsorbParams{g, a}, rs::kern::current_sm_count(), nullptr);
      INFO("refused: " << cu::qkv_absorb_refusal());
      REQUIRE(launched);
      CHECK(cu::qkv_absorb_launches() == before + 1);
    } else {
      const uint64_t before = rs::kern::gemv_stream_launches();
      REQUIRE(rs::kern::launch_gemv_stream(g, rs::kern::current_sm_count(), nullptr));
      CHECK(rs::kern::gemv_stream_launches() == before + 1);
      cu::launch_mla_absorb_q(a, nullptr);
    }
    ok(cudaGetLastError(), fused ? "fused launch" : "two launches");
    return Out{q.host(), kv.host(), qabs.host(), xn.host(), dres.host()};
  };
  const Out two = run(false), one = run(true), again = run(true);
  CHECK(same_bits(one.q, two.q));
  CHECK(same_bits(one.kv, two.kv));
  CHECK(same_bits(one.qabs, two.qabs));
  CHECK(same_bits(one.xn, two.xn));
  CHECK(same_bits(one.resid, two.resid));
  CHECK(same_bits(again.qabs, one.qabs));  // the norm ticket was left at zero
  CHECK(same_bits(again.resid, one.resid));
  // Not vacuous: the absorbed query is not the poison, and rotation moved q's rope part.
  int poison = 0;
  for (uint16_t b : one.qabs) poison += b == 0xffff;
  CHECK(poison == 0);
  int moved = 0;
  for (int h = 0; h < kHeads; ++h)
    for (int i = 0; i < kRope; ++i) moved += one.qabs[size_t(h) * kKvd + kLora + i] != one.q[size_t(h) * kQdim + kNope + i];
  CHECK(moved > kHeads * kRope / 2);
}

// The decode attention with new_kv (the newest row formed in a split of its own) against the absorb
// launch's cache write before it (the row read from the cache like any other): the same cache
// bits; and each path's splits, merged as the merge + W_UV launch merges them, within bf16's
// rounding of an fp64 attention over the rows as left in the cache. At 5 and 40 rows one row
// missed or counted twice moves a head's context by ~2.5-20%, far above the tolerance.
void run_new_row_case(int len, uint64_t seed) {
  INFO("len " << len);
  constexpr float kScale = 0.07f;
  Rand rng(seed);
  const int bs = 16, nblocks = (len + bs - 1) / bs + 1;
  std::vector<float> f;
  auto cache_b = rng.bf16(size_t(nblocks) * bs * kKvd, -1.f, 1.f, &f);
  auto q_b = rng.bf16(size_t(kHeads) * kQdim, -1.f, 1.f, &f);
  auto kva_b = rng.bf16(kKvd, -2.f, 2.f, &f);
  auto kvb_b = rng.bf16(size_t(kHeads) * (kNope + kV) * kLora, -0.1f, 0.1f, &f);
  std::vector<float> nw(kLora);
  for (float& v : nw) v = rng.uniform(0.5f, 1.5f);
  std::vector<int32_t> bt(nblocks - 1);
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), rng.g);
  const int32_t slot = bt[(len - 1) / bs] * bs + (len - 1) % bs;
  Dev<uint16_t> dq(q_b), dkva(kva_b), dkvb(kvb_b);
  Dev<float> dnw(nw);
  Dev<int32_t> dbt(bt), dlen(std::vector<int32_t>{len}), dpos(std::vector<int32_t>{len - 1}),
      dslot(std::vector<int32_t>{slot});
  RopeTable rope;

  struct Out {
    std::vector<uint16_t> cache, qabs;
    std::vector<float> part_o, part_lse;
  };
  auto run = [&](bool form_here) {
    Dev<uint16_t> dcache(cache_b), qabs(size_t(kHeads) * kKvd);
    // The newest row holds garbage until someone writes it.
    ok(cudaMemset(dcache.ptr + size_t(slot) * kKvd, 0x7f, kKvd * 2), "poison newest row");
    Dev<float> part_o(size_t(kHeads) * kSplits * kLora), part_lse(size_t(kHeads) * kSplits);
    cu::KvWriteParams kw;
    kw.kv_a = reinterpret_cast<const __nv_bfloat16*>(dkva.ptr);
    kw.kv_a_stride = kKvd;
    kw.norm_weight = dnw.ptr;
    kw.positions = dpos.ptr;
    kw.slots = dslot.ptr;
    kw.cache = reinterpret_cast<__nv_bfloat16*>(dcache.ptr);
    kw.n = 1;
    kw.kv_lora = kLora;
    kw.rope = rope.spec;
    const cu::MlaAbsorbQParams a = absorb_params(dq.ptr, dkvb.ptr, qabs.ptr, dpos.ptr, rope.spec);
    if (form_here) cu::launch_mla_absorb_q(a, nullptr);
    else cu::launch_mla_absorb_q_kv_write(a, kw, nullptr);
    cu::MlaDecodeParams p;
    p.q = a.out;
    p.cache = kw.cache;
    p.block_tables = dbt.ptr;
    p.bt_stride = nblocks - 1;
    p.block_size = bs;
    p.seq_lens = dlen.ptr;
    p.part_o = part_o.ptr;
    p.part_lse = part_lse.ptr;
    p.batch = 1;
    p.heads = kHeads;
    p.splits = kSplits;
    p.kv_lora = kLora;
    p.kv_dim = kKvd;
    p.scale = kScale;
    cu::launch_mla_decode(p, nullptr, form_here ? &kw : nullptr);
    ok(cudaGetLastError(), "attention");
    return Out{dcache.host(), qabs.host(), part_o.host(), part_lse.host()};
  };
  const Out written = run(false), formed = run(true);
  CHECK(same_bits(formed.cache, written.cache));  // the newest row written, nothing else touched
  CHECK(same_bits(formed.qabs, written.qabs));
  for (const Out* o : {&written, &formed}) {
    INFO((o == &formed ? "formed in its own split" : "written first"));
    double worst_ctx = 0, worst_lse = 0;
    for (int h = 0; h < kHeads; ++h) {
      std::vector<double> sc(len);
      double mx = -1e300;
      for (int t = 0; t < len; ++t) {
        const uint16_t* row = o->cache.data() + (size_t(bt[t / bs]) * bs + t % bs) * kKvd;
        double d = 0;
        for (int i = 0; i < kKvd; ++i) d += double(bf16_bits_to_float(o->qabs[size_t(h) * kKvd + i])) * bf16_bits_to_float(row[i]);
        sc[t] = d * kScale;
        mx = std::max(mx, sc[t]);
      }
      std::vector<double> ctx(kLora, 0.0);
      double z = 0;
      for (int t = 0; t < len; ++t) {
        const uint16_t* row = o->cache.data() + (size_t(bt[t / bs]) * bs + t % bs) * kKvd;
        const double w = std::exp(sc[t] - mx);
        z += w;
        for (int i = 0; i < kLora; ++i) ctx[i] += w * bf16_bits_to_float(row[i]);
      }
      double lmx = -1e300;
      for (int sp = 0; sp < kSplits; ++sp) lmx = std::max(lmx, double(o->part_lse[size_t(h) * kSplits + sp]));
      double wz = 0, cmax = 0, dmax = 0;
      std::vector<double> got(kLora, 0.0);
      for (int sp = 0; sp < kSplits; ++sp) {
        const float l = o->part_lse[size_t(h) * kSplits + sp];
        if (l == -INFINITY) continue;
        const double w = std::exp2(l - lmx);
        wz += w;
        for (int i = 0; i < kLora; ++i) got[i] += w * o->part_o[(size_t(h) * kSplits + sp) * kLora + i];
      }
      for (int i = 0; i < kLora; ++i) {
        cmax = std::max(cmax, std::fabs(ctx[i] / z));
        dmax = std::max(dmax, std::fabs(got[i] / wz - ctx[i] / z));
      }
      worst_ctx = std::max(worst_ctx, dmax / cmax);
      worst_lse = std::max(worst_lse, std::fabs(lmx + std::log2(wz) - (mx + std::log(z)) / std::log(2.0)));
    }
    // The split kernel rounds each tile's probabilities to bf16 (2^-9 relative).
    CHECK(worst_ctx < 5e-3);
    CHECK(worst_lse < 5e-3);
  }
  bool row_written = false;
  for (int i = 0; i < kKvd; ++i) row_written |= written.cache[size_t(slot) * kKvd + i] != 0x7f7f;
  CHECK(row_written);
}

}  // namespace

TEST_SUITE("gpu.cuda") {

TEST_CASE("qkv absorb: one clustered launch equals the grouped GEMV + absorb launches bit for bit") {
  if (skip_without_gpu("qkv absorb")) return;
  uint64_t seed = 900;
  for (int pos : {0, 37, 4095}) run_qkv_absorb_case(++seed, pos);
}

TEST_CASE("qkv absorb: the decode attention forms the newest cache row as the cache write would") {
  if (skip_without_gpu("qkv absorb new row")) return;
  uint64_t seed = 950;
  // The newest row alone in its split (5), in a one-tile split (40, 1025), in a split's second tile (4096).
  for (int len : {5, 40, 1025, 4096}) run_new_row_case(len, ++seed);
}

TEST_CASE("qkv absorb: calls it is not written for are refused with a reason, nothing launched") {
  if (skip_without_gpu("qkv absorb refusals")) return;
  rs::test::Rng wrng(77);
  rs::test::TestMatrix wq(cu::WeightType::BF16, int64_t(kHeads) * kQdim, kHidden, wrng);
  rs::test::TestMatrix wkv(cu::WeightType::BF16, kKvd, kHidden, wrng);
  rs::test::TestMatrix wq8(cu::WeightType::FP8_E4M3_BLOCK, int64_t(kHeads) * kQdim, kHidden, wrng);
  Dev<uint16_t> q(size_t(2) * kHeads * kQdim), kv(2 * kKvd), qabs(size_t(kHeads) * kKvd), xn(2 * kHidden), kvb(16);
  Dev<float> res(2 * kHidden), nw(kHidden);
  Dev<int32_t> pos(2);
  RopeTable rope;
  cu::QkvAbsorbParams f;
  f.gemv.w[0] = wq.dm;
  f.gemv.w[1] = wkv.dm;
  f.gemv.y[0] = q.ptr;
  f.gemv.y[1] = kv.ptr;
  f.gemv.jobs = 2;
  f.gemv.x = reinterpret_cast<const __nv_bfloat16*>(xn.ptr);
  f.gemv.m = 1;
  f.gemv.norm_residual = res.ptr;
  f.gemv.norm_out = reinterpret_cast<__nv_bfloat16*>(xn.ptr);
  f.gemv.norm_weight = nw.ptr;
  f.absorb = absorb_params(q.ptr, kvb.ptr, qabs.ptr, pos.ptr, rope.spec);
  const uint64_t before = cu::qkv_absorb_launches();
  auto refused = [&](auto change, const char* why) {
    cu::QkvAbsorbParams g = f;
    change(g);
    const bool launched = cu::launch_qkv_absorb(g, rs::kern::current_sm_count(), nullptr);
    INFO(why << ": " << cu::qkv_absorb_refusal());
    CHECK_FALSE(launched);
    CHECK(cu::qkv_absorb_refusal().find(why) != std::string::npos);
  };
  refused([](cu::QkvAbsorbParams& g) { g.gemv.m = g.absorb.n = 2; }, "not one token");
  refused([](cu::QkvAbsorbParams& g) { g.gemv.norm_residual = nullptr; }, "not one token");
  refused([&](cu::QkvAbsorbParams& g) { g.gemv.w[0] = wq8.dm; }, "not bf16");
  refused([](cu::QkvAbsorbParams& g) { g.absorb.nope = 64; }, "head shape");
  refused([](cu::QkvAbsorbParams& g) { g.absorb.kv_lora = 256; }, "head shape");
  cu::set_qkv_absorb(false);
  refused([](cu::QkvAbsorbParams&) {}, "switched off");
  cu::set_qkv_absorb(true);
  CHECK(cu::qkv_absorb_launches() == before);
  ok(cudaGetLastError(), "no launch error");
}

TEST_CASE("qkv absorb: V2-Lite decode steps with the clustered launch match the two-launch path") {
  if (skip_without_gpu("qkv absorb at V2-Lite shapes")) return;
  if (!v2lite_decode_fits("gpu.cuda", "qkv absorb at V2-Lite shapes")) return;
  const uint64_t before = cu::qkv_absorb_launches();
  uint64_t fused_launches = 0;
  const PathCompare r = compare_v2lite_decode(
      false,
      [&](int path) {
        if (path == 1) fused_launches = cu::qkv_absorb_launches() - before;
        cu::set_qkv_absorb(path == 0);
      },
      0.999, 0.02f);
  cu::set_qkv_absorb(true);
  CHECK(fused_launches > 0);  // path 0 took it (counted where launched: eagerly or into a graph)
  // Not the same bits: the clustered launch leaves the newest row to a split of its own (weight 1
  // there, its score's probability not rounded to bf16 inside a tile); q, kv_a and the absorbed q
  // are the same bits (the first test case).
  for (const std::string& f : r.failures) FAIL_CHECK(f);
  std::printf("[gpu.cuda] v2-lite bf16: 6 decode steps, clustered q/kv + absorb launches %llu (clusters of %d), logits differing in %d steps, min cosine %.7f, %d flips\n",
              static_cast<unsigned long long>(fused_launches), cu::qkv_absorb_cluster_size(), r.differing_steps,
              r.worst_cosine, r.flips);
}

}  // TEST_SUITE
