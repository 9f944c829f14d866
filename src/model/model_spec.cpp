#include "model/model_spec.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/rope.h"

namespace rs {

namespace {

using nlohmann::json;

// Reads config fields with one-line errors naming the file and the field.
struct ConfigReader {
  const json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(source + ": field '" + field + "': " + what);
  }
  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  int integer(const char* key) const {
    if (!has(key)) fail(key, "missing");
    const json& v = j.at(key);
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    int64_t x = v.get<int64_t>();
    if (x < 0 || x > (int64_t(1) << 31) - 1) fail(key, "out of range: " + v.dump());
    return static_cast<int>(x);
  }
  int integer_or(const char* key, int def) const { return has(key) ? integer(key) : def; }
  double number_or(const json& obj, const char* key, double def) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return def;
    const json& v = obj.at(key);
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  double number_or(const char* key, double def) const { return number_or(j, key, def); }
  bool boolean_or(const char* key, bool def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string_or(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
};

void parse_rope(const ConfigReader& r, ModelSpec& s) {
  // Real DeepSeek checkpoints: top-level rope_theta + rope_scaling{type: yarn, ...}.
  // transformers 5: rope_parameters{rope_type, rope_theta, ...}.
  const json* params = nullptr;
  const char* params_key = "rope_parameters";
  if (r.has("rope_parameters")) {
    params = &r.j.at("rope_parameters");
  } else if (r.has("rope_scaling")) {
    params = &r.j.at("rope_scaling");
    params_key = "rope_scaling";
  }
  s.rope_theta = r.number_or("rope_theta", 10000.0);
  if (!params) return;
  if (!params->is_object()) r.fail(params_key, "expected an object, got " + params->dump());
  s.rope_theta = r.number_or(*params, "rope_theta", s.rope_theta);
  std::string type = "default";
  if (params->contains("rope_type") && (*params)["rope_type"].is_string())
    type = (*params)["rope_type"].get<std::string>();
  else if (params->contains("type") && (*params)["type"].is_string())
    type = (*params)["type"].get<std::string>();
  if (type == "default") return;
  if (type != "yarn")
    r.fail(std::string(params_key) + ".type", "unsupported rope type '" + type + "' (default or yarn)");
  YarnSpec& y = s.yarn;
  y.enabled = true;
  y.original_max_position_embeddings =
      r.number_or(*params, "original_max_position_embeddings", 0.0);
  if (y.original_max_position_embeddings <= 0)
    r.fail(std::string(params_key) + ".original_max_position_embeddings", "missing or not positive");
  // HF: a missing factor is max_position_embeddings / original_max_position_embeddings.
  y.factor = r.number_or(*params, "factor",
                         s.max_position_embeddings / y.original_max_position_embeddings);
  if (!(y.factor > 0)) r.fail(std::string(params_key) + ".factor", "must be positive");
  y.beta_fast = r.number_or(*params, "beta_fast", 32.0);
  y.beta_slow = r.number_or(*params, "beta_slow", 1.0);
  if (y.beta_fast == 0) y.beta_fast = 32;  // HF: `or 32`
  if (y.beta_slow == 0) y.beta_slow = 1;
  y.mscale = r.number_or(*params, "mscale", 1.0);
  y.mscale_all_dim = r.number_or(*params, "mscale_all_dim", 0.0);
  if (params->contains("truncate") && (*params)["truncate"].is_boolean())
    y.truncate = (*params)["truncate"].get<bool>();
}

void parse_quant(const ConfigReader& r, ModelSpec& s) {
  if (!r.has("quantization_config")) return;
  const json& q = r.j.at("quantization_config");
  if (!q.is_object()) r.fail("quantization_config", "expected an object");
  std::string method = q.value("quant_method", std::string());
  if (method != "fp8")
    r.fail("quantization_config.quant_method", "unsupported '" + method + "' (only fp8)");
  std::string fmt = q.value("fmt", std::string("e4m3"));
  if (fmt != "e4m3") r.fail("quantization_config.fmt", "unsupported '" + fmt + "' (only e4m3)");
  s.quant.fp8_block = true;
  if (q.contains("weight_block_size")) {
    const json& b = q.at("weight_block_size");
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int>() <= 0 || b[1].get<int>() <= 0)
      r.fail("quantization_config.weight_block_size", "expected [rows, cols], got " + b.dump());
    s.quant.block_rows = b[0].get<int>();
    s.quant.block_cols = b[1].get<int>();
  }
}

void validate(const ConfigReader& r, const ModelSpec& s) {
  auto positive = [&](const char* f, int v) { if (v <= 0) r.fail(f, "must be positive"); };
  positive("vocab_size", s.vocab_size);
  positive("hidden_size", s.hidden_size);
  positive("num_hidden_layers", s.num_hidden_layers);
  positive("num_attention_heads", s.num_attention_heads);
  positive("kv_lora_rank", s.kv_lora_rank);
  positive("qk_nope_head_dim", s.qk_nope_head_dim);
  positive("qk_rope_head_dim", s.qk_rope_head_dim);
  positive("v_head_dim", s.v_head_dim);
  positive("moe_layer_freq", s.moe_layer_freq);
  if (s.qk_rope_head_dim % 2) r.fail("qk_rope_head_dim", "must be even");
  bool any_dense = s.n_routed_experts == 0 || s.first_k_dense_replace > 0 || s.moe_layer_freq > 1;
  if (any_dense) positive("intermediate_size", s.intermediate_size);
  if (s.n_routed_experts > 0) {
    positive("moe_intermediate_size", s.moe_intermediate_size);
    positive("num_experts_per_tok", s.num_experts_per_tok);
    positive("n_group", s.n_group);
    positive("topk_group", s.topk_group);
    if (s.num_experts_per_tok > s.n_routed_experts)
      r.fail("num_experts_per_tok", "larger than n_routed_experts");
    if (s.n_routed_experts % s.n_group)
      r.fail("n_group", std::to_string(s.n_group) + " does not divide n_routed_experts");
    if (s.topk_group > s.n_group) r.fail("topk_group", "larger than n_group");
    int per_group = s.n_routed_experts / s.n_group;
    if (s.topk_method != TopkMethod::Greedy &&
        s.topk_group * per_group < s.num_experts_per_tok)
      r.fail("topk_group", "the chosen groups hold fewer experts than num_experts_per_tok");
    if (s.topk_method == TopkMethod::NoauxTc && per_group < 2)
      r.fail("n_group", "noaux_tc ranks groups by their two best experts: needs >= 2 per group");
  }
  if (!(s.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be positive");
  if (!(s.rope_theta > 0)) r.fail("rope_theta", "must be positive");
}

}  // namespace

double ModelSpec::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (yarn.enabled && yarn.mscale_all_dim != 0.0) {
    double m = yarn_get_mscale(yarn.factor, yarn.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

ModelSpec parse_model_spec(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  ConfigReader r{j, source};
  ModelSpec s;
  s.model_type_name = r.string_or("model_type", "");
  if (s.model_type_name == "deepseek_v3") {
    s.model_type = ModelType::DeepseekV3;
  } else if (s.model_type_name == "deepseek_v2") {
    s.model_type = ModelType::DeepseekV2;
  } else if (s.model_type_name.empty()) {
    r.fail("model_type", "missing");
  } else {
    r.fail("model_type", "unknown model_type '" + s.model_type_name +
                             "' (supported: deepseek_v2, deepseek_v3)");
  }
  bool v3 = s.model_type == ModelType::DeepseekV3;

  std::string act = r.string_or("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", "unsupported '" + act + "' (only silu)");
  if (r.boolean_or("attention_bias", false)) r.fail("attention_bias", "true is not supported");
  if (r.boolean_or("mlp_bias", false)) r.fail("mlp_bias", "true is not supported");

  s.vocab_size = r.integer("vocab_size");
  s.hidden_size = r.integer("hidden_size");
  s.intermediate_size = r.integer_or("intermediate_size", 0);
  s.moe_intermediate_size = r.integer_or("moe_intermediate_size", 0);
  s.num_hidden_layers = r.integer("num_hidden_layers");
  s.num_attention_heads = r.integer("num_attention_heads");
  s.q_lora_rank = r.integer_or("q_lora_rank", 0);
  s.kv_lora_rank = r.integer("kv_lora_rank");
  s.qk_nope_head_dim = r.integer("qk_nope_head_dim");
  s.qk_rope_head_dim = r.integer("qk_rope_head_dim");
  s.v_head_dim = r.integer("v_head_dim");
  s.first_k_dense_replace = r.integer_or("first_k_dense_replace", 0);
  s.moe_layer_freq = r.integer_or("moe_layer_freq", 1);
  s.n_routed_experts = r.integer_or("n_routed_experts", 0);
  s.n_shared_experts = r.integer_or("n_shared_experts", 0);
  s.num_experts_per_tok = r.integer_or("num_experts_per_tok", 0);
  s.n_group = r.integer_or("n_group", 1);
  s.topk_group = r.integer_or("topk_group", 1);

  // transformers' V3 config has neither field: its router is always noaux_tc over sigmoid
  // scores. V2 defaults to DeepSeek-V2's softmax + greedy.
  std::string topk = r.string_or("topk_method", v3 ? "noaux_tc" : "greedy");
  if (topk == "greedy") s.topk_method = TopkMethod::Greedy;
  else if (topk == "group_limited_greedy") s.topk_method = TopkMethod::GroupLimitedGreedy;
  else if (topk == "noaux_tc") s.topk_method = TopkMethod::NoauxTc;
  else r.fail("topk_method", "unsupported '" + topk + "' (greedy, group_limited_greedy, noaux_tc)");
  std::string scoring = r.string_or("scoring_func", v3 ? "sigmoid" : "softmax");
  if (scoring == "softmax") s.scoring_func = ScoringFunc::Softmax;
  else if (scoring == "sigmoid") s.scoring_func = ScoringFunc::Sigmoid;
  else r.fail("scoring_func", "unsupported '" + scoring + "' (softmax, sigmoid)");

  s.norm_topk_prob = r.boolean_or("norm_topk_prob", v3);
  s.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
  s.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  s.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  s.max_position_embeddings = r.integer_or("max_position_embeddings", 4096);
  s.num_nextn_predict_layers = r.integer_or("num_nextn_predict_layers", 0);
  s.rope_interleave = r.boolean_or("rope_interleave", true);
  if (r.has("bos_token_id")) s.bos_token_id = r.integer("bos_token_id");
  if (r.has("eos_token_id")) {
    const json& e = j.at("eos_token_id");
    if (e.is_number_integer()) {
      s.eos_token_ids.push_back(e.get<int>());
    } else if (e.is_array()) {
      for (const json& x : e) {
        if (!x.is_number_integer()) r.fail("eos_token_id", "expected integers, got " + e.dump());
        s.eos_token_ids.push_back(x.get<int>());
      }
    } else {
      r.fail("eos_token_id", "expected an integer or a list, got " + e.dump());
    }
  }
  parse_rope(r, s);
  parse_quant(r, s);
  validate(r, s);
  return s;
}

ModelSpec load_model_spec(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (is --model a HF model directory?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_spec(ss.str(), path);
}

}  // namespace rs
