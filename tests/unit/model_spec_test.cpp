// Config parsing, derived numbers (inspect), dummy weights and the weight-format conversions.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "kernels/common/dummy_init.h"
#include "model/model_spec.h"
#include "model/numerics.h"
#include "model/param_count.h"
#include "model/rope.h"
#include "model/weights.h"

namespace {
std::string shapes(const std::string& m) { return std::string(RS_FIXTURES_DIR) + "/model-shapes/" + m; }
std::string fixture(const std::string& m) { return std::string(RS_FIXTURES_DIR) + "/models/" + m; }
std::string read(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_SUITE("unit.model") {
TEST_CASE("inspect numbers: DeepSeek-V3 671B / ~37B, V2-Lite 15.7B / 2.4B") {
  rs::ParamCounts v3 = rs::count_params(rs::load_model_spec(shapes("deepseek-v3")));
  CHECK(std::fabs(v3.total / 671e9 - 1) < 0.01);
  CHECK(std::fabs(v3.active / 37e9 - 1) < 0.02);
  CHECK(v3.mtp > 11e9);  // the MTP layer: one MoE layer + eh_proj + its own embedding and head
  CHECK(v3.kv_elements_per_token == 61u * (512 + 64));
  rs::ParamCounts lite = rs::count_params(rs::load_model_spec(shapes("deepseek-v2-lite")));
  CHECK(std::fabs(lite.total / 15.7e9 - 1) < 0.01);
  CHECK(std::fabs(lite.active / 2.4e9 - 1) < 0.03);
  CHECK(lite.mtp == 0);
  // FP8 V3 reads about a byte per active parameter per decoded token (plus bf16 lm_head).
  CHECK(v3.bytes_per_decoded_token > 35e9);
  CHECK(v3.bytes_per_decoded_token < 40e9);
}

TEST_CASE("rope_parameters (transformers 5) and rope_scaling (DeepSeek release) parse alike") {
  rs::ModelSpec a = rs::load_model_spec(fixture("tiny-v3"));
  rs::ModelSpec b = rs::load_model_spec(fixture("tiny-v3-fp8"));
  CHECK(a.yarn.enabled);
  CHECK(b.yarn.enabled);
  CHECK(a.yarn.factor == b.yarn.factor);
  CHECK(a.yarn.original_max_position_embeddings == 1024);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.softmax_scale() == doctest::Approx(b.softmax_scale()));
  CHECK(b.quant.fp8_block);
  CHECK_FALSE(a.quant.fp8_block);
  // mscale(4, 1)^2 / sqrt(48)
  double m = 0.1 * std::log(4.0) + 1.0;
  CHECK(a.softmax_scale() == doctest::Approx(m * m / std::sqrt(48.0)).epsilon(1e-12));
}

TEST_CASE("defaults by model_type when routing fields are absent") {
  rs::ModelSpec v3 = rs::load_model_spec(fixture("tiny-v3"));  // no scoring_func / topk_method
  CHECK(v3.scoring_func == rs::ScoringFunc::Sigmoid);
  CHECK(v3.topk_method == rs::TopkMethod::NoauxTc);
  std::string v2text = read(fixture("tiny-v2-softmax") + "/config.json");
  for (const char* key : {"\"scoring_func\": \"softmax\",", "\"topk_method\": \"greedy\","}) {
    auto p = v2text.find(key);
    REQUIRE(p != std::string::npos);
    v2text.erase(p, std::strlen(key));
  }
  rs::ModelSpec v2 = rs::parse_model_spec(v2text, "v2.json");
  CHECK(v2.scoring_func == rs::ScoringFunc::Softmax);
  CHECK(v2.topk_method == rs::TopkMethod::Greedy);
  CHECK(v2.q_lora_rank == 0);  // null -> single q_proj
  CHECK_FALSE(v2.yarn.enabled);
}

TEST_CASE("YaRN frequencies: low dims extrapolate, high dims interpolate by the factor") {
  rs::ModelSpec s = rs::load_model_spec(shapes("deepseek-v3"));
  rs::RopeTable t = rs::make_rope_table(s);
  REQUIRE(t.inv_freq.size() == 32);
  CHECK(t.inv_freq[0] == doctest::Approx(1.0));
  double base_last = std::pow(10000.0, -62.0 / 64);
  CHECK(t.inv_freq[31] == doctest::Approx(base_last / 40).epsilon(1e-5));
  CHECK(t.attention_factor == doctest::Approx(1.0));  // mscale == mscale_all_dim
  // Rotation keeps the norm times attention_factor^2 and pairs (2i, 2i+1).
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f;
  t.apply(x.data(), 3);
  CHECK(x[0] == doctest::Approx(std::cos(3.0)));
  CHECK(x[1] == doctest::Approx(std::sin(3.0)));
}

TEST_CASE("e4m3 and bf16 conversions round-trip every code") {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    float v = rs::e4m3_to_f32(static_cast<uint8_t>(b));
    CAPTURE(b);
    CHECK(rs::f32_to_e4m3(v) == (b == 0x80 ? 0x80 : b));
  }
  CHECK(rs::f32_to_e4m3(1000.0f) == 0x7e);   // saturates to 448
  CHECK(rs::f32_to_e4m3(-1000.0f) == 0xfe);
  CHECK(rs::e4m3_to_f32(rs::f32_to_e4m3(1.0625f)) == 1.0f);   // tie -> even mantissa
  CHECK(rs::e4m3_to_f32(rs::f32_to_e4m3(1.1875f)) == 1.25f);  // tie -> even mantissa
  CHECK(rs::bf16_to_f32(rs::f32_to_bf16(1.00390625f)) == 1.0f);  // tie -> even
  CHECK(rs::bf16_to_f32(rs::f32_to_bf16(3.14159f)) == doctest::Approx(3.14159).epsilon(4e-3));
}

TEST_CASE("dummy weights follow the dummy_init.h formula, in bf16 and FP8") {
  rs::ModelSpec s = rs::load_model_spec(fixture("tiny-v3-fp8"));
  auto w = rs::Weights::dummy(s, 42);
  auto w2 = rs::Weights::dummy(s, 42);
  for (const rs::TensorInfo& info : rs::expected_tensors(s)) {
    const rs::Tensor& t = w->get(info.name);
    REQUIRE(t.shape == info.shape);
    REQUIRE(t.dtype == info.dtype);
    CHECK(std::memcmp(t.data, w2->get(info.name).data, t.nbytes) == 0);  // deterministic
  }
  const std::string n = "model.layers.0.self_attn.q_b_proj.weight";  // FP8 [192, 96]
  const rs::Tensor& q = w->get(n);
  REQUIRE(q.dtype == rs::DType::F8_E4M3);
  REQUIRE(q.scale_inv != nullptr);
  const float amp = std::sqrt(3.0f / 96);
  const float scale = static_cast<const float*>(q.scale_inv->data)[1];
  CHECK(scale == amp / 448.0f);
  const uint64_t id = rs::dummy::name_hash(n.c_str());
  for (int64_t i : {0L, 1L, 5000L, 192L * 96 - 1}) {
    float v = rs::dummy::uniform_pm1(42, id, i) * amp;
    CHECK(static_cast<const uint8_t*>(q.data)[i] == rs::f32_to_e4m3(v / scale));
  }
  const rs::Tensor& norm = w->get("model.norm.weight");
  CHECK(rs::bf16_to_f32(static_cast<const uint16_t*>(norm.data)[7]) == 1.0f);
  const rs::Tensor& emb = w->get("model.embed_tokens.weight");
  CHECK(rs::bf16_to_f32(static_cast<const uint16_t*>(emb.data)[3]) ==
        rs::bf16_to_f32(rs::f32_to_bf16(rs::dummy::uniform_pm1(42, rs::dummy::name_hash("model.embed_tokens.weight"), 3))));
  auto other = rs::Weights::dummy(s, 43);
  CHECK(std::memcmp(other->get(n).data, q.data, q.nbytes) != 0);
}

TEST_CASE("dummy weights stay sane through 61 layers of a shrunk DeepSeek-V3 shape") {
  // deepseek-v3's config with every per-layer width cut down (61 layers, 3 dense, FP8, YaRN,
  // noaux_tc groups all kept): a few decode steps must give finite, non-degenerate logits.
  std::string text = read(shapes("deepseek-v3") + "/config.json");
  auto set = [&](const std::string& key, const std::string& value) {
    auto p = text.find("\"" + key + "\":");
    REQUIRE(p != std::string::npos);
    auto e = text.find_first_of(",}", p);
    text.replace(p, e - p, "\"" + key + "\": " + value);
  };
  set("hidden_size", "128");
  set("intermediate_size", "256");
  set("moe_intermediate_size", "32");
  set("n_routed_experts", "16");
  set("num_attention_heads", "2");
  set("q_lora_rank", "64");
  set("kv_lora_rank", "64");
  set("vocab_size", "512");
  rs::ModelSpec s = rs::parse_model_spec(text, "shrunk-v3");
  REQUIRE(s.num_hidden_layers == 61);
  auto w = rs::Weights::dummy(s, 7);
  auto backend = rs::make_cpu_backend(s, *w, 2);
  backend->init_kv(rs::KvConfig{16, 4});
  std::vector<int32_t> prompt = {0, 17, 404, 499, 3}, table = {0, 1, 2, 3};
  rs::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> out;
  for (int step = 0; step < 4; ++step) {
    rs::SeqStep st;
    st.tokens = step == 0 ? std::span<const int32_t>(prompt) : std::span<const int32_t>(&out.back(), 1);
    st.start_pos = step == 0 ? 0 : static_cast<int32_t>(prompt.size() + out.size() - 1);
    st.block_table = table;
    st.sample = true;
    st.return_logits = true;
    st.sampling.params = &greedy;
    rs::Batch b;
    b.seqs.push_back(st);
    auto r = backend->execute(b);
    double mx = 0, mean = 0, var = 0;
    for (float v : r[0].logits) {
      REQUIRE(std::isfinite(v));
      mx = std::max(mx, std::fabs(double(v)));
      mean += v;
    }
    mean /= r[0].logits.size();
    for (float v : r[0].logits) var += (v - mean) * (v - mean);
    var /= r[0].logits.size();
    CHECK(mx < 1e3);
    CHECK(var > 1e-4);  // not collapsed to a constant
    out.push_back(r[0].token->id);
  }
}
}
