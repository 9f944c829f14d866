// MLA prefill attention (expanded form, causal, with a cached prefix) against a host attention
// in double precision over the same bf16 inputs: lengths that are not multiples of the query
// block (256 rows for V2/V3 dims, 64 for the fixture dims) or of the key tile (32 / 64),
// prefixes that put the diagonal at many offsets inside a key tile, a chunk of one token, several
// query blocks with and without a prefix, sharp and flat softmaxes; and unsupported head dims
// rejected.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/ops/mla_prefill_params.h"
#include "model/model_spec.h"
#include "tests/gpu/cuda_test_util.h"

using namespace rs::cudatest;
namespace cu = rs::cuda;

namespace {

struct PrefillCase {
  int heads, nope, rope, v, T, start;
  float scale;  // 0: 1 / sqrt(qk head dim)
};

// out[i, h, :] = softmax_j<=start+i (q_i . k_j * scale) v_j, k_j = [k_nope_j,h | k_pe_j].
std::vector<float> host_attention(const PrefillCase& c, float scale, const std::vector<float>& q,
                                  const std::vector<float>& kv, const std::vector<float>& pe) {
  const int dk = c.nope + c.rope, kvs = c.heads * (c.nope + c.v);
  std::vector<float> out(size_t(c.T) * c.heads * c.v);
  std::vector<double> s, o(c.v);
  for (int i = 0; i < c.T; ++i)
    for (int h = 0; h < c.heads; ++h) {
      const float* qi = &q[(size_t(i) * c.heads + h) * dk];
      const int n = c.start + i + 1;
      s.assign(n, 0.0);
      double mx = -1e300;
      for (int j = 0; j < n; ++j) {
        const float* k = &kv[size_t(j) * kvs + size_t(h) * (c.nope + c.v)];
        double d = 0;
        for (int e = 0; e < c.nope; ++e) d += double(qi[e]) * k[e];
        for (int e = 0; e < c.rope; ++e) d += double(qi[c.nope + e]) * pe[size_t(j) * c.rope + e];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - mx);
      std::fill(o.begin(), o.end(), 0.0);
      for (int j = 0; j < n; ++j) {
        const float* vj = &kv[size_t(j) * kvs + size_t(h) * (c.nope + c.v) + c.nope];
        for (int e = 0; e < c.v; ++e) o[e] += s[j] * vj[e];
      }
      for (int e = 0; e < c.v; ++e) out[(size_t(i) * c.heads + h) * c.v + e] = float(o[e] / sum);
    }
  return out;
}

// Runs one case on the GPU; returns ||gpu - host|| / ||host|| and the worst row's cosine.
void run_prefill_case(const PrefillCase& c, uint64_t seed) {
  Rand rng(seed);
  const int L = c.start + c.T, dk = c.nope + c.rope;
  const float scale = c.scale > 0 ? c.scale : 1.f / std::sqrt(float(dk));
  std::vector<float> qf, kvf, pef;
  auto qb = rng.bf16(size_t(c.T) * c.heads * dk, -1.f, 1.f, &qf);
  auto kvb = rng.bf16(size_t(L) * c.heads * (c.nope + c.v), -1.f, 1.f, &kvf);
  auto peb = rng.bf16(size_t(L) * c.rope, -1.f, 1.f, &pef);
  // A sentinel row past the chunk: the kernel must not write outside [0, T).
  const size_t out_n = size_t(c.T) * c.heads * c.v;
  Dev<uint16_t> dq(qb), dkv(kvb), dpe(peb), dout(std::vector<uint16_t>(out_n + size_t(c.heads) * c.v, 0x7fc0));
  cu::MlaPrefillParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(dq.ptr);
  p.kv = reinterpret_cast<const __nv_bfloat16*>(dkv.ptr);
  p.kpe = reinterpret_cast<const __nv_bfloat16*>(dpe.ptr);
  p.out = reinterpret_cast<__nv_bfloat16*>(dout.ptr);
  p.T = c.T;
  p.start = c.start;
  p.heads = c.heads;
  p.nope = c.nope;
  p.rope = c.rope;
  p.vdim = c.v;
  p.scale = scale;
  cu::launch_mla_prefill(p, 0);
  ok(cudaGetLastError(), "launch");
  const auto gb = dout.host();
  std::vector<float> got(out_n);
  for (size_t i = 0; i < out_n; ++i) got[i] = bf16_bits_to_float(gb[i]);
  const std::vector<float> ref = host_attention(c, scale, qf, kvf, pef);
  double worst_cos = 1.0;
  int worst_row = -1;
  for (int i = 0; i < c.T; ++i)
    for (int h = 0; h < c.heads; ++h) {
      const size_t o = (size_t(i) * c.heads + h) * c.v;
      const double cs = cosine(&got[o], &ref[o], c.v);
      if (!(cs >= worst_cos)) { worst_cos = cs; worst_row = i; }
    }
  bool sentinel_kept = true;
  for (size_t i = out_n; i < gb.size(); ++i) sentinel_kept = sentinel_kept && gb[i] == 0x7fc0;
  INFO("heads " << c.heads << " dims " << c.nope << "/" << c.rope << "/" << c.v << " T " << c.T << " start "
                << c.start << " scale " << scale << ": worst row " << worst_row << " cosine " << worst_cos);
  CHECK(rel_err(got, ref) < 1e-2);
  CHECK(worst_cos > 0.9995);
  CHECK(sentinel_kept);
}

}  // namespace

TEST_SUITE("gpu.cuda") {

TEST_CASE("mla prefill: V2/V3 head dims (128/64/128), causal tiles, cached prefixes, ragged lengths vs host attention") {
  if (skip_without_gpu("mla prefill (V2 dims)")) return;
  uint64_t seed = 100;
  // T around the 64-row query tile; prefixes that put the diagonal at offsets 0, 1, 37, 63 inside
  // a 64-key tile; a one-token chunk deep into a prefix (decode-like).
  for (PrefillCase c : {PrefillCase{2, 128, 64, 128, 1, 0, 0}, PrefillCase{2, 128, 64, 128, 63, 0, 0},
                        PrefillCase{2, 128, 64, 128, 64, 0, 0}, PrefillCase{2, 128, 64, 128, 65, 0, 0},
                        PrefillCase{3, 128, 64, 128, 200, 0, 0}, PrefillCase{2, 128, 64, 128, 129, 37, 0},
                        PrefillCase{2, 128, 64, 128, 100, 64, 0}, PrefillCase{2, 128, 64, 128, 70, 1, 0},
                        PrefillCase{2, 128, 64, 128, 77, 500, 0}, PrefillCase{2, 128, 64, 128, 1, 300, 0},
                        PrefillCase{2, 128, 64, 128, 90, 63, 0}})
    run_prefill_case(c, ++seed);
  // A sharp softmax (large scale): the running max moves a lot between tiles.
  run_prefill_case({2, 128, 64, 128, 150, 20, 0.5f}, ++seed);
  // Many query blocks and a long key walk (35 key tiles for the last rows).
  run_prefill_case({1, 128, 64, 128, 1100, 0, 0}, ++seed);
  // Several query blocks behind a prefix that is not a multiple of the key tile.
  run_prefill_case({2, 128, 64, 128, 300, 45, 0}, ++seed);
}

TEST_CASE("mla prefill: fixture head dims (32/16/32) vs host attention") {
  if (skip_without_gpu("mla prefill (fixture dims)")) return;
  uint64_t seed = 200;
  for (PrefillCase c : {PrefillCase{4, 32, 16, 32, 70, 0, 0}, PrefillCase{4, 32, 16, 32, 29, 37, 0},
                        PrefillCase{4, 32, 16, 32, 1, 5, 0}, PrefillCase{4, 32, 16, 32, 130, 0, 0},
                        PrefillCase{3, 32, 16, 32, 64, 64, 0}})
    run_prefill_case(c, ++seed);
}

TEST_CASE("mla prefill: head dims without a compiled kernel are a clear error, not a launch") {
  CHECK(cu::mla_prefill_supported(128, 64, 128));
  CHECK(cu::mla_prefill_supported(32, 16, 32));
  CHECK_FALSE(cu::mla_prefill_supported(64, 32, 64));
  cu::MlaPrefillParams p;
  p.T = 4;
  p.heads = 2;
  p.nope = 64;
  p.rope = 32;
  p.vdim = 64;
  CHECK_THROWS_WITH_AS(cu::launch_mla_prefill(p, 0), doctest::Contains("qk_nope_head_dim 64"), rs::Error);
}

TEST_CASE("mla prefill: a config with other head dims is refused when the CUDA backend loads it") {
  if (skip_without_gpu("cuda backend head-dim check")) return;
  rs::ModelSpec spec = rs::load_model_spec(std::string(RS_FIXTURES_DIR) + "/models/tiny-v3");
  spec.qk_nope_head_dim = 64;
  spec.qk_rope_head_dim = 32;
  spec.v_head_dim = 64;
  CHECK_THROWS_WITH_AS(rs::make_cuda_backend_dummy(spec, 1), doctest::Contains("(64, 32, 64)"), rs::Error);
}

}  // TEST_SUITE
