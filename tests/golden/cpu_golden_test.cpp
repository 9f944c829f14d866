// The CPU reference against HF transformers' outputs for every fixture model
// (tests/fixtures/models/*/expected.safetensors, made by /work/shared/fixtures/gen.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/model_spec.h"
#include "model/numerics.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace {

std::string fixture(const std::string& name) { return std::string(RS_FIXTURES_DIR) + "/models/" + name; }

template <typename T>
std::vector<T> read_tensor(const rs::SafetensorsFile& f, const std::string& name) {
  const rs::SafetensorsEntry* e = f.find(name);
  REQUIRE_MESSAGE(e != nullptr, name);
  std::vector<T> v(e->nbytes / sizeof(T));
  std::memcpy(v.data(), e->data, e->nbytes);
  return v;
}

struct Model {
  rs::ModelSpec spec;
  std::unique_ptr<rs::Weights> weights;
  std::unique_ptr<rs::Backend> backend;
  explicit Model(const std::string& dir, bool bf16_rope = false, int threads = 2) {
    spec = rs::load_model_spec(dir);
    weights = rs::Weights::load(dir, spec);
    rs::RopeTable rope = rs::make_rope_table(spec);
    if (bf16_rope)
      for (float& f : rope.inv_freq) f = rs::bf16_to_f32(rs::f32_to_bf16(f));
    backend = rs::make_cpu_backend_with_rope(spec, *weights, threads, rope);
    backend->init_kv(rs::KvConfig{16, 64});
  }
};

// Worst position: max |got - want| over its vocab row, relative to that row's max |want|.
double rel_err(const std::vector<float>& got, const std::vector<float>& want, size_t vocab = 512) {
  double worst = 0;
  for (size_t r = 0; r + vocab <= want.size(); r += vocab) {
    double maxref = 0, maxdiff = 0;
    for (size_t i = r; i < r + vocab; ++i) {
      maxref = std::max(maxref, std::fabs(double(want[i])));
      maxdiff = std::max(maxdiff, std::fabs(double(got[i]) - want[i]));
    }
    worst = std::max(worst, maxdiff / maxref);
  }
  return worst;
}

std::vector<int32_t> blocks_from(int first, int n) {
  std::vector<int32_t> b(n);
  for (int i = 0; i < n; ++i) b[i] = first + i;
  return b;
}

// `prompts`: how many of p0..p3 to check.
void check_fixture(const std::string& name, int prompts = 4, bool bf16_rope = false) {
  Model m(fixture(name), bf16_rope);
  auto expected = rs::SafetensorsFile::open(fixture(name) + "/expected.safetensors");
  const int V = m.spec.vocab_size;
  for (int p = 0; p < prompts; ++p) {
    const std::string key = "p" + std::to_string(p);
    CAPTURE(name);
    CAPTURE(key);
    std::vector<int32_t> ids = read_tensor<int32_t>(*expected, key + ".input_ids");
    std::vector<float> want = read_tensor<float>(*expected, key + ".logits");
    std::vector<int32_t> blocks = blocks_from(0, 16);

    // Teacher-forced prefill: every position's logits.
    rs::SamplingParams greedy;
    greedy.temperature = 0.0f;
    rs::SeqStep step;
    step.seq_id = 1;
    step.tokens = ids;
    step.start_pos = 0;
    step.block_table = blocks;
    step.return_logits = true;
    step.sample = true;
    step.sampling.params = &greedy;
    step.sampling.prompt_tokens = ids;
    rs::Batch batch;
    batch.seqs.push_back(step);
    std::vector<rs::SeqResult> r = m.backend->execute(batch);
    REQUIRE(r.size() == 1);
    REQUIRE(r[0].logits.size() == ids.size() * size_t(V));
    double err = rel_err(r[0].logits, want, V);
    CHECK_MESSAGE(err < 1e-3, "worst position: max |logit diff| / max |ref| = " << err);
    MESSAGE(name << " " << key << ": max rel logit error " << err);

    // Greedy continuation through the KV cache, one decode step at a time.
    if (!expected->find(key + ".greedy")) continue;
    std::vector<int32_t> want_greedy = read_tensor<int32_t>(*expected, key + ".greedy");
    std::vector<int32_t> got;
    REQUIRE(r[0].token.has_value());
    got.push_back(r[0].token->id);
    while (got.size() < want_greedy.size()) {
      rs::SeqStep d;
      d.seq_id = 1;
      d.tokens = std::span<const int32_t>(&got.back(), 1);
      d.start_pos = static_cast<int32_t>(ids.size() + got.size() - 1);
      d.block_table = blocks;
      d.sample = true;
      d.sampling.params = &greedy;
      d.sampling.draw_index = got.size();
      rs::Batch b;
      b.seqs.push_back(d);
      auto rr = m.backend->execute(b);
      REQUIRE(rr[0].token.has_value());
      got.push_back(rr[0].token->id);
    }
    CHECK(got == want_greedy);
  }
}

}  // namespace

TEST_SUITE("golden.cpu") {
TEST_CASE("tiny-v3 (q_lora, sigmoid noaux_tc groups, YaRN) matches HF") { check_fixture("tiny-v3"); }
// tiny-v3-fp8's expected.safetensors was computed (gen.py, fp8_variant) by a model that had been
// through model.to(bfloat16) and back: its rotary inv_freq buffer is bf16-rounded, unlike every
// other fixture. p0 (position 0: no rotation) and the short prompts still match the true-fp32
// forward within tolerance; p3's 77 positions do not (the rounded frequencies flip a routing
// decision). With the same bf16-rounded frequencies every position matches to ~1e-6, which shows
// the FP8 path itself is exact. Reported to the lead; regenerate the fixture to drop the second case.
TEST_CASE("tiny-v3-fp8 (e4m3 128x128 block scales, rope_scaling config): p0-p2 match HF") {
  check_fixture("tiny-v3-fp8", 3);
}
TEST_CASE("tiny-v3-fp8: every prompt matches HF's reference with its bf16-rounded rope frequencies") {
  check_fixture("tiny-v3-fp8", 4, /*bf16_rope=*/true);
}
TEST_CASE("tiny-v3-noqlora (q_proj, no YaRN, no groups) matches HF") { check_fixture("tiny-v3-noqlora"); }
TEST_CASE("tiny-v2-softmax (V2 softmax greedy, 2 shared experts) matches HF") {
  check_fixture("tiny-v2-softmax");
}

TEST_CASE("chunked prefill in a mixed batch gives the same logits as one pass") {
  // Two sequences share a batch: one prefills p3 in 3 chunks while the other decodes; a KV block
  // copy (prefix sharing) runs before a step. Every position's logits must match HF's.
  const std::string name = "tiny-v3";
  Model m(fixture(name));
  auto expected = rs::SafetensorsFile::open(fixture(name) + "/expected.safetensors");
  const int V = m.spec.vocab_size;
  std::vector<int32_t> a = read_tensor<int32_t>(*expected, "p3.input_ids");
  std::vector<float> want_a = read_tensor<float>(*expected, "p3.logits");
  std::vector<int32_t> b = read_tensor<int32_t>(*expected, "p2.input_ids");
  std::vector<float> want_b = read_tensor<float>(*expected, "p2.logits");
  std::vector<int32_t> blocks_a = blocks_from(10, 6), blocks_b = {40, 41};

  std::vector<float> got_a, got_b;
  // Step 1: sequence b's whole prompt into blocks {30, 31}; then copied to {40, 41} (as a
  // copy-on-write fork would) and continued from there.
  {
    std::vector<int32_t> tmp_blocks = {30, 31};
    rs::SeqStep s;
    s.seq_id = 2;
    s.tokens = std::span<const int32_t>(b.data(), b.size() - 1);
    s.block_table = tmp_blocks;
    s.return_logits = true;
    rs::Batch batch;
    batch.seqs.push_back(s);
    auto r = m.backend->execute(batch);
    got_b = r[0].logits;
  }
  size_t done_a = 0;
  bool b_done = false;
  while (done_a < a.size()) {
    size_t n = std::min<size_t>(30, a.size() - done_a);
    rs::Batch batch;
    if (!b_done) batch.block_copies = {{30, 40}, {31, 41}};
    rs::SeqStep s;
    s.seq_id = 1;
    s.tokens = std::span<const int32_t>(a.data() + done_a, n);
    s.start_pos = static_cast<int32_t>(done_a);
    s.block_table = blocks_a;
    s.return_logits = true;
    batch.seqs.push_back(s);
    if (!b_done) {
      rs::SeqStep d;
      d.seq_id = 2;
      d.tokens = std::span<const int32_t>(&b.back(), 1);
      d.start_pos = static_cast<int32_t>(b.size() - 1);
      d.block_table = blocks_b;
      d.return_logits = true;
      batch.seqs.push_back(d);
    }
    auto r = m.backend->execute(batch);
    got_a.insert(got_a.end(), r[0].logits.begin(), r[0].logits.end());
    if (!b_done) {
      got_b.insert(got_b.end(), r[1].logits.begin(), r[1].logits.end());
      b_done = true;
    }
    done_a += n;
  }
  REQUIRE(got_a.size() == a.size() * size_t(V));
  REQUIRE(got_b.size() == b.size() * size_t(V));
  CHECK(rel_err(got_a, want_a, V) < 1e-3);
  CHECK(rel_err(got_b, want_b, V) < 1e-3);
}
}
