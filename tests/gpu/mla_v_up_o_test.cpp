// One token's split merge + W_UV + o_proj in one launch (kernels/ops/mla_v_up_o.cuh) against
// the two-launch path (merged v_up to bf16, then W_o on the host) and an fp64 host reference,
// bf16 and block-scaled FP8 o_proj; repeated launches give the same bits and leave the chunk
// counters zero; and the whole decode step at DeepSeek-V2-Lite's shapes with and without it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/mla_v_up_o_params.h"
#include "model/model_spec.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/linear_test_util.h"

using namespace rs::cudatest;
namespace cu = rs::cuda;

namespace {

constexpr int kHeads = 16, kLora = 512, kRope = 64, kNope = 128, kV = 128, kHidden = 2048, kSplits = 64;

void run_v_up_o_case(int len, cu::WeightType otype, uint64_t seed) {
  INFO("len " << len << " fp8 " << (otype == cu::WeightType::FP8_E4M3_BLOCK));
  Rand rng(seed);
  const int kvd = kLora + kRope, bs = 16, nblocks = (len + bs - 1) / bs + 1;
  std::vector<float> cache_f, q_f, kvb_f;
  auto cache_b = rng.bf16(size_t(nblocks) * bs * kvd, -1.f, 1.f, &cache_f);
  auto q_b = rng.bf16(size_t(kHeads) * kvd, -1.f, 1.f, &q_f);
  auto kvb_b = rng.bf16(size_t(kHeads) * (kNope + kV) * kLora, -0.1f, 0.1f, &kvb_f);
  std::vector<int32_t> bt(nblocks - 1);
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), rng.g);
  rs::test::Rng wrng(seed + 1);
  rs::test::TestMatrix wo(otype, kHidden, int64_t(kHeads) * kV, wrng);

  Dev<uint16_t> dq(q_b), dcache(cache_b), dkvb(kvb_b), attn_v(size_t(kHeads) * kV), out(kHidden);
  Dev<int32_t> dbt(bt), dlen(std::vector<int32_t>{len});
  Dev<float> part_o(size_t(kHeads) * kSplits * kLora), part_lse(size_t(kHeads) * kSplits);
  Dev<float> partials(size_t(kHeads) * kHidden);
  Dev<int> counters(cu::kVUpOCluster);
  ok(cudaMemset(part_o.ptr, 0xff, part_o.n * 4), "poison partials");  // empty splits' must never be read
  cu::MlaDecodeParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(dq.ptr);
  p.cache = reinterpret_cast<const __nv_bfloat16*>(dcache.ptr);
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
  p.kv_dim = kvd;
  p.scale = 0.07f;
  cu::launch_mla_decode(p, 0);
  ok(cudaGetLastError(), "launch split attention");

  // The two-launch path's v_up (merging the splits, its output rounded to bf16), and from it the
  // fused launch's parameters.
  cu::MlaVUpParams v;
  v.kv_b = reinterpret_cast<const __nv_bfloat16*>(dkvb.ptr);
  v.out = reinterpret_cast<__nv_bfloat16*>(attn_v.ptr);
  v.n = 1;
  v.heads = kHeads;
  v.nope = kNope;
  v.vdim = kV;
  v.kv_lora = kLora;
  v.part_o = part_o.ptr;
  v.part_lse = part_lse.ptr;
  v.splits = kSplits;
  const cu::MlaVUpOParams f{v, wo.dm, reinterpret_cast<__nv_bfloat16*>(out.ptr), partials.ptr, counters.ptr};
  REQUIRE(cu::mla_v_up_o_supported(f));
  std::vector<uint16_t> got[3];
  for (auto& g : got) {  // the chunk counters must be back at zero after every launch
    ok(cudaMemset(out.ptr, 0xff, out.n * 2), "poison out");
    cu::launch_mla_v_up_o(f, 0);
    ok(cudaGetLastError(), "launch v_up + o_proj");
    g = out.host();
    for (int c : counters.host()) CHECK(c == 0);
  }
  CHECK(got[0] == got[1]);
  CHECK(got[0] == got[2]);

  // The fixed-point head sum (MlaVUpOParams::fixed, what the cluster router reads): exact integer
  // adds, so the same words on every launch whatever order the blocks finish in, and rounded to
  // bf16 at most one bf16 step from the ticket's fp32 sum in head order.
  Dev<unsigned long long> fixed(kHidden);
  cu::MlaVUpOParams ff = f;
  ff.fixed = fixed.ptr;
  REQUIRE(cu::mla_v_up_o_supported(ff));
  std::vector<unsigned long long> words[3];
  for (auto& w : words) {
    ok(cudaMemset(fixed.ptr, 0, fixed.n * 8), "zero the sums (the router's job)");
    cu::launch_mla_v_up_o(ff, 0);
    ok(cudaGetLastError(), "launch v_up + o_proj, fixed-point sum");
    w = fixed.host();
  }
  CHECK(words[0] == words[1]);
  CHECK(words[0] == words[2]);
  std::vector<float> fixed_out(kHidden);
  int off_by_more = 0;
  for (int r = 0; r < kHidden; ++r) {
    const uint16_t b = float_to_bf16_bits(float(double(static_cast<long long>(words[0][r])) * 0x1p-32));
    fixed_out[r] = bf16_bits_to_float(b);
    if (std::abs(int(b) - int(got[0][r])) > 1) ++off_by_more;
  }
  CHECK(off_by_more == 0);

  // The two-launch path's attention output, through W_o here.
  cu::launch_mla_v_up(v, 0);
  ok(cudaGetLastError(), "launch v_up");
  std::vector<double> v_gpu(size_t(kHeads) * kV), v_ref(v_gpu.size());
  auto vb = attn_v.host();
  for (size_t i = 0; i < vb.size(); ++i) v_gpu[i] = bf16_bits_to_float(vb[i]);

  // fp64 host: attention over the cache, W_UV, bf16 rounding (as both GPU paths), W_o.
  auto row = [&](int t) { return &cache_f[(size_t(bt[t / bs]) * bs + t % bs) * kvd]; };
  for (int h = 0; h < kHeads; ++h) {
    const float* qv = &q_f[size_t(h) * kvd];
    std::vector<double> sc(len);
    double mx = -1e300, sum = 0;
    for (int t = 0; t < len; ++t) {
      double d = 0;
      for (int i = 0; i < kvd; ++i) d += double(qv[i]) * row(t)[i];
      mx = std::max(mx, sc[t] = d * 0.07);
    }
    for (auto& x : sc) sum += x = std::exp(x - mx);
    std::vector<double> o(kLora, 0.0);
    for (int t = 0; t < len; ++t)
      for (int i = 0; i < kLora; ++i) o[i] += sc[t] / sum * row(t)[i];
    for (int j = 0; j < kV; ++j) {
      const float* wr = &kvb_f[(size_t(h) * (kNope + kV) + kNope + j) * kLora];
      double acc = 0;
      for (int i = 0; i < kLora; ++i) acc += o[i] * wr[i];
      v_ref[size_t(h) * kV + j] = round_bf16(float(acc));
    }
  }
  std::vector<float> fused(kHidden), two_launch(kHidden), ref(kHidden);
  for (int r = 0; r < kHidden; ++r) {
    fused[r] = bf16_bits_to_float(got[0][r]);
    two_launch[r] = float(wo.dot(r, v_gpu, 0));
    ref[r] = float(wo.dot(r, v_ref, 0));
  }
  CHECK(rel_err(fused, ref) < 1e-2);
  CHECK(rel_err(fixed_out, ref) < 1e-2);
  // Against the two-launch path: the same bf16 attention output up to a rounding flip or two,
  // then sums in another order and the output's bf16 rounding.
  CHECK(rel_err(fused, two_launch) < 4e-3);
}

}  // namespace

TEST_SUITE("gpu.cuda") {

// V2-Lite is the shape the fused launch is written for (the fixture models are too small for
// it): two backends of the same dummy weights, with and without it, fed the same tokens. The
// switch is read when a backend captures its decode graph (its first decode step). The two
// paths round the attention output to bf16 from sums in different orders, so a few elements a
// layer land one bf16 step apart; through 27 layers of random weights that leaves the logits at
// cosine 0.9997-0.9998 (H200, 2026-12-01), hence the 0.999 bar (the bar against the CPU
// reference), with the argmax equal wherever the margin is above bf16 noise.
TEST_CASE("mla v up + o_proj: V2-Lite decode steps with the fused launch match the two-launch path, bf16 and FP8") {
  if (skip_without_gpu("mla v up + o_proj at V2-Lite shapes")) return;
  if (!v2lite_decode_fits("gpu.cuda", "mla v up + o_proj at V2-Lite shapes")) return;
  for (bool fp8 : {false, true}) {
    INFO("fp8 " << fp8);
    const PathCompare r = compare_v2lite_decode(fp8, [](int path) { cu::set_mla_v_up_o(path == 0); }, 0.999,
                                                fp8 ? 0.1f : 0.05f);
    cu::set_mla_v_up_o(true);
    for (const std::string& f : r.failures) FAIL_CHECK(f);
    std::printf("[gpu.cuda] v2-lite %s: 6 decode steps, min logits cosine fused vs two launches %.7f, %d argmax flips\n",
                fp8 ? "fp8" : "bf16", r.worst_cosine, r.flips);
  }
}

// The head sum as fixed-point words read by the cluster router (every MoE layer of a V2-Lite
// step) against the ticket's bf16 sum: the same rounding-flip level of difference as above;
// and two backends with it on give the same bits (integer adds: the order the blocks' adds land
// in cannot show).
TEST_CASE("mla v up + o_proj: V2-Lite decode steps with the fixed-point head sum match the ticket's, bit-reproducibly") {
  if (skip_without_gpu("mla v up + o_proj fixed-point sum at V2-Lite shapes")) return;
  if (!v2lite_decode_fits("gpu.cuda", "mla v up + o_proj fixed-point sum at V2-Lite shapes")) return;
  for (bool fp8 : {false, true}) {
    INFO("fp8 " << fp8);
    const PathCompare r = compare_v2lite_decode(fp8, [](int path) { cu::set_mla_v_up_o_fixed_sum(path == 0); }, 0.999,
                                                fp8 ? 0.1f : 0.05f);
    for (const std::string& f : r.failures) FAIL_CHECK(f);
    std::printf("[gpu.cuda] v2-lite %s: 6 decode steps, min logits cosine fixed-point vs ticket head sum %.7f, %d argmax flips\n",
                fp8 ? "fp8" : "bf16", r.worst_cosine, r.flips);
  }
  const PathCompare same = compare_v2lite_decode(false, [](int) { cu::set_mla_v_up_o_fixed_sum(true); }, 0.999, 0.f);
  CHECK(same.differing_steps == 0);
  CHECK(same.flips == 0);
  cu::set_mla_v_up_o_fixed_sum(true);
}

TEST_CASE("mla v up + o_proj: one token's merge, W_UV and o_proj in one launch equal the two-launch path") {
  if (skip_without_gpu("mla v up + o_proj")) return;
  uint64_t seed = 40;
  // 1 of 64 splits holds tokens, 2, 33 (1K context), all 64 (two tiles each).
  for (int len : {5, 40, 1025, 4096})
    for (cu::WeightType t : {cu::WeightType::BF16, cu::WeightType::FP8_E4M3_BLOCK}) run_v_up_o_case(len, t, ++seed);
}

TEST_CASE("mla v up + o_proj: shapes it is not written for go to the two-launch path") {
  if (skip_without_gpu("mla v up + o_proj shapes")) return;  // Dev needs a device
  cu::MlaVUpOParams f;
  Dev<float> dummy(16);
  f.vu.part_o = f.vu.part_lse = f.partials = dummy.ptr;
  f.counters = reinterpret_cast<int*>(dummy.ptr);
  f.vu.kv_b = reinterpret_cast<const __nv_bfloat16*>(dummy.ptr);
  f.out = reinterpret_cast<__nv_bfloat16*>(dummy.ptr);
  f.o.data = dummy.ptr;
  f.vu.splits = kSplits;
  f.vu.heads = kHeads;
  f.vu.nope = kNope;
  f.vu.vdim = kV;
  f.vu.kv_lora = kLora;
  f.o.rows = kHidden;
  f.o.cols = int64_t(kHeads) * kV;
  CHECK(cu::mla_v_up_o_supported(f));
  auto off = [&](auto change) {
    cu::MlaVUpOParams g = f;
    change(g);
    return !cu::mla_v_up_o_supported(g);
  };
  CHECK(off([](cu::MlaVUpOParams& g) { g.vu.vdim = 64; }));
  CHECK(off([](cu::MlaVUpOParams& g) { g.vu.kv_lora = 256; }));
  CHECK(off([](cu::MlaVUpOParams& g) { g.o.rows = 7168; }));
  CHECK(off([](cu::MlaVUpOParams& g) { g.o.cols = 1024; }));
  CHECK(off([](cu::MlaVUpOParams& g) { g.vu.splits = 65; }));
  CHECK(off([](cu::MlaVUpOParams& g) { g.o.type = cu::WeightType::FP8_E4M3_BLOCK; }));  // no scales
  cu::set_mla_v_up_o(false);
  CHECK(!cu::mla_v_up_o_supported(f));
  cu::set_mla_v_up_o(true);
}
}
