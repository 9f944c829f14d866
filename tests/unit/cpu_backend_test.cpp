// CPU backend pieces: thread pool, MoE routing rules, KV sizing, errors, thread-count
// independence, and the generate CLI contract end to end.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/moe_routing.h"
#include "backend/cpu/thread_pool.h"
#include "common/error.h"
#include "model/model_spec.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace {
std::string fixture(const std::string& m) { return std::string(RS_FIXTURES_DIR) + "/models/" + m; }

rs::ModelSpec routing_spec(rs::ModelType type, rs::ScoringFunc f, rs::TopkMethod m, int groups,
                           int keep, bool norm, double rsf) {
  rs::ModelSpec s;
  s.model_type = type;
  s.n_routed_experts = 8;
  s.num_experts_per_tok = 2;
  s.scoring_func = f;
  s.topk_method = m;
  s.n_group = groups;
  s.topk_group = keep;
  s.norm_topk_prob = norm;
  s.routed_scaling_factor = rsf;
  return s;
}
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}
}  // namespace

TEST_SUITE("unit.cpu") {
TEST_CASE("thread pool covers every index once, and nested loops run inline") {
  rs::cpu::ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(100000);
  pool.parallel_for(100000, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) hits[i]++;
    pool.parallel_for(3, [&](int64_t, int64_t) {});  // must not deadlock
  });
  for (auto& h : hits) REQUIRE(h.load() == 1);
}

TEST_CASE("noaux_tc: bias picks the groups and experts, weights come from unbiased scores") {
  auto s = routing_spec(rs::ModelType::DeepseekV3, rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 4, 2, true, 2.5);
  // groups {0,1} {2,3} {4,5} {6,7}
  float logits[8] = {3, 2.9f, 0, 0, 0, 0, -1, -1};
  float bias[8] = {0, 0, 0, 0, 0, 0, 3, 3};  // makes group 3 the best by far
  rs::cpu::Route r = rs::cpu::route_token(s, logits, bias);
  REQUIRE(r.experts.size() == 2);
  // group 3 (6, 7: biased 3.27 each) beats group 0 (0.95 + 0.95): experts 6 and 7
  CHECK(r.experts[0] == 6);
  CHECK(r.experts[1] == 7);
  CHECK(r.weights[0] == doctest::Approx(2.5 * 0.5));  // equal unbiased scores, normalised, x2.5
  CHECK(r.weights[0] + r.weights[1] == doctest::Approx(2.5));
  // No bias: group 0 has the best two.
  rs::cpu::Route r2 = rs::cpu::route_token(s, logits, nullptr);
  CHECK(r2.experts[0] == 0);
  CHECK(r2.experts[1] == 1);
  // Without normalisation the weights are the sigmoid scores times the scaling factor.
  s.norm_topk_prob = false;
  rs::cpu::Route r3 = rs::cpu::route_token(s, logits, nullptr);
  CHECK(r3.weights[0] == doctest::Approx(2.5 * sigmoid(3)));
}

TEST_CASE("noaux_tc masks dropped groups with 0.0 as HF does, so a negative kept score can lose to them") {
  auto s = routing_spec(rs::ModelType::DeepseekV3, rs::ScoringFunc::Sigmoid, rs::TopkMethod::NoauxTc, 4, 1, false, 1.0);
  s.num_experts_per_tok = 2;
  s.topk_group = 2;
  // Biases push every choice score below zero; groups 0 and 1 are kept (least negative pairs).
  float logits[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float bias[8] = {-0.6f, -0.7f, -0.6f, -0.9f, -2, -2, -2, -2};
  rs::cpu::Route r = rs::cpu::route_token(s, logits, bias);
  // Kept: 0 (-0.1), 2 (-0.1), 1 (-0.2), 3 (-0.4); dropped experts sit at 0.0 and win: 4 and 5
  // (lowest ids among the ties at 0.0).
  CHECK(r.experts[0] == 4);
  CHECK(r.experts[1] == 5);
}

TEST_CASE("group_limited_greedy (V2): groups ranked by their best expert") {
  auto s = routing_spec(rs::ModelType::DeepseekV2, rs::ScoringFunc::Softmax, rs::TopkMethod::GroupLimitedGreedy, 4, 1, false, 16.0);
  // group 1 has the single best expert; group 0 has the two second-best.
  float logits[8] = {2, 2, 3, -5, 0, 0, 0, 0};
  rs::cpu::Route r = rs::cpu::route_token(s, logits, nullptr);
  CHECK(r.experts[0] == 2);
  CHECK(r.experts[1] == 3);  // only group 1 is kept: its weak expert beats group 0's strong ones
  double z = 0;
  for (float l : logits) z += std::exp(l);
  CHECK(r.weights[0] == doctest::Approx(16.0 * std::exp(3.0) / z));
}

TEST_CASE("V2 renormalised weights are not scaled (DeepSeek-V2 MoEGate); V2 greedy otherwise scales") {
  auto s = routing_spec(rs::ModelType::DeepseekV2, rs::ScoringFunc::Softmax, rs::TopkMethod::Greedy, 1, 1, true, 16.0);
  float logits[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rs::cpu::Route r = rs::cpu::route_token(s, logits, nullptr);
  CHECK(r.experts[0] == 7);
  CHECK(r.experts[1] == 6);
  CHECK(r.weights[0] + r.weights[1] == doctest::Approx(1.0));
  s.norm_topk_prob = false;
  rs::cpu::Route r2 = rs::cpu::route_token(s, logits, nullptr);
  CHECK(r2.weights[0] + r2.weights[1] > 1.0);
}

TEST_CASE("KV sizing is real, bad steps are errors, results do not depend on the thread count") {
  rs::ModelSpec spec = rs::load_model_spec(fixture("tiny-v3"));
  auto w = rs::Weights::load(fixture("tiny-v3"), spec);
  auto one = rs::make_cpu_backend(spec, *w, 1);
  auto three = rs::make_cpu_backend(spec, *w, 3);
  CHECK(one->kv_bytes_per_token() == 3u * (64 + 16) * 4);
  CHECK(one->max_kv_blocks(16, 1u << 20) == int((1u << 20) / (16 * 960)));
  CHECK(one->max_kv_blocks(16, 0) > 0);
  one->init_kv({16, 8});
  three->init_kv({16, 8});
  std::vector<int32_t> toks(40), table = {3, 1, 7};
  std::iota(toks.begin(), toks.end(), 2);
  rs::SeqStep s;
  s.tokens = toks;
  s.block_table = table;
  s.return_logits = true;
  rs::Batch b;
  b.seqs.push_back(s);
  auto r1 = one->execute(b);
  auto r3 = three->execute(b);
  REQUIRE(r1[0].logits.size() == 40u * 512);
  CHECK(std::memcmp(r1[0].logits.data(), r3[0].logits.data(), r1[0].logits.size() * 4) == 0);
  CHECK_FALSE(r1[0].token.has_value());

  std::vector<int32_t> short_table = {0, 1};
  b.seqs[0].block_table = short_table;  // 32 positions for 40 tokens
  CHECK_THROWS_AS(one->execute(b), rs::Error);
  std::vector<int32_t> bad_block = {0, 1, 99};
  b.seqs[0].block_table = bad_block;
  CHECK_THROWS_AS(one->execute(b), rs::Error);
  std::vector<int32_t> bad_tok = {600};
  b.seqs[0].block_table = table;
  b.seqs[0].tokens = bad_tok;
  CHECK_THROWS_AS(one->execute(b), rs::Error);
}

TEST_CASE("generate CLI: --logits-out and --print-ids reproduce the HF fixture") {
  const std::string dir = fixture("tiny-v3");
  auto expected = rs::SafetensorsFile::open(dir + "/expected.safetensors");
  const rs::SafetensorsEntry* ids = expected->find("p1.input_ids");
  const rs::SafetensorsEntry* greedy = expected->find("p1.greedy");
  const rs::SafetensorsEntry* logits = expected->find("p1.logits");
  REQUIRE(ids);
  std::string id_list, want_ids;
  for (size_t i = 0; i < ids->nbytes / 4; ++i)
    id_list += (i ? "," : "") + std::to_string(static_cast<const int32_t*>(ids->data)[i]);
  for (size_t i = 0; i < greedy->nbytes / 4; ++i)
    want_ids += (i ? "," : "") + std::to_string(static_cast<const int32_t*>(greedy->data)[i]);
  std::string out_file = (std::filesystem::temp_directory_path() / ("rs_logits_" + std::to_string(getpid()) + ".safetensors")).string();
  std::string stdout_text = run(std::string(RS_BINARY) + " generate --model " + dir + " --prompt-ids " + id_list +
                                " --max-tokens 10 --print-ids --ignore-eos --device cpu --threads 2 --logits-out " +
                                out_file + " 2>/dev/null");
  CHECK(stdout_text == want_ids + "\n");
  auto got = rs::SafetensorsFile::open(out_file);
  const rs::SafetensorsEntry* gl = got->find("logits");
  REQUIRE(gl);
  CHECK(gl->dtype == rs::DType::F32);
  CHECK(gl->shape == logits->shape);
  REQUIRE(gl->nbytes == logits->nbytes);
  const float* a = static_cast<const float*>(gl->data);
  const float* e = static_cast<const float*>(logits->data);
  double maxref = 0, maxdiff = 0;
  for (size_t i = 0; i < gl->nbytes / 4; ++i) {
    maxref = std::max(maxref, std::fabs(double(e[i])));
    maxdiff = std::max(maxdiff, std::fabs(double(a[i]) - e[i]));
  }
  CHECK(maxdiff / maxref < 1e-3);
  std::filesystem::remove(out_file);
  // Bad input: a clear one-line error and a failing exit status.
  std::string err = run(std::string(RS_BINARY) + " generate --model " + dir +
                        " --prompt-ids 1,x --max-tokens 1 --device cpu 2>&1; echo rc=$?");
  CHECK(err.find("--prompt-ids: 'x'") != std::string::npos);
  CHECK(err.find("rc=1") != std::string::npos);
}
}
