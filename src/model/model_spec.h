#pragma once
// Every config.json field that changes the math of a DeepSeek V2/V3 forward pass.
#include <cstdint>
#include <string>
#include <vector>

namespace rs {

enum class ModelType : uint8_t { DeepseekV2, DeepseekV3 };
enum class ScoringFunc : uint8_t { Softmax, Sigmoid };
// greedy: plain top-k; group_limited_greedy (V2): groups ranked by their best expert;
// noaux_tc (V3): groups ranked by the sum of their two best biased scores.
enum class TopkMethod : uint8_t { Greedy, GroupLimitedGreedy, NoauxTc };

struct YarnSpec {
  bool enabled = false;
  double factor = 1.0;
  double original_max_position_embeddings = 4096;
  double beta_fast = 32, beta_slow = 1;
  double mscale = 1.0, mscale_all_dim = 0.0;
  bool truncate = true;  // HF: floor/ceil the correction range (rope_parameters "truncate")
};

struct QuantSpec {
  bool fp8_block = false;  // e4m3 weights with fp32 block scales ("weight_scale_inv")
  int block_rows = 128, block_cols = 128;
};

struct ModelSpec {
  ModelType model_type = ModelType::DeepseekV3;
  std::string model_type_name;  // as written in config.json
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense MLP
  int moe_intermediate_size = 0;  // one routed or shared expert
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int q_lora_rank = 0;  // 0: single q_proj (config null)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int n_routed_experts = 0, n_shared_experts = 0, num_experts_per_tok = 0;
  ScoringFunc scoring_func = ScoringFunc::Sigmoid;
  TopkMethod topk_method = TopkMethod::NoauxTc;
  int n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  YarnSpec yarn;
  // Rotary pairs are (2i, 2i+1) as DeepSeek trains them; false (HF V3 "rope_interleave": false)
  // rotates (i, i + d/2) instead.
  bool rope_interleave = true;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 4096;
  int num_nextn_predict_layers = 0;  // MTP layers, stored at index num_hidden_layers
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  QuantSpec quant;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int kv_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // latent | rope key
  bool is_moe_layer(int layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // 1/sqrt(qk_head_dim), times yarn mscale(factor, mscale_all_dim)^2 as the official DeepSeek
  // code and vLLM do (HF's native deepseek_v2 omits the mscale term; we follow DeepSeek).
  double softmax_scale() const;
};

// Parses config.json text. Throws rs::Error naming `source` and the field on anything
// unsupported (unknown model_type, missing field, bad value).
ModelSpec parse_model_spec(const std::string& json_text, const std::string& source);
ModelSpec load_model_spec(const std::string& model_dir);  // reads DIR/config.json

}  // namespace rs
