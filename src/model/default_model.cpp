#include "model/default_model.h"

#include "model/embedded_assets.h"

namespace rs {

// Shapes are DeepSeek-V3's, scaled down until the CPU reference decodes a batch of 32 at
// interactive speed. The vocabulary stays full size (129280, as in DeepSeek-V3's config) because
// the real tokenizer must map into it; the lm_head dominates the cost per token.
ModelSpec default_model_spec() {
  ModelSpec s;
  s.model_type = ModelType::DeepseekV3;
  s.model_type_name = "deepseek_v3";
  s.vocab_size = 129280;
  s.hidden_size = 256;
  s.intermediate_size = 512;
  s.moe_intermediate_size = 128;
  s.num_hidden_layers = 3;  // layer 0 dense (first_k_dense_replace), layers 1-2 MoE
  s.num_attention_heads = 4;
  s.q_lora_rank = 128;
  s.kv_lora_rank = 64;
  s.qk_nope_head_dim = 32;
  s.qk_rope_head_dim = 16;
  s.v_head_dim = 32;
  s.first_k_dense_replace = 1;
  s.moe_layer_freq = 1;
  s.n_routed_experts = 8;
  s.n_shared_experts = 1;
  s.num_experts_per_tok = 2;
  s.scoring_func = ScoringFunc::Sigmoid;
  s.topk_method = TopkMethod::NoauxTc;
  s.n_group = 4;     // 2 experts per group; noaux_tc ranks groups by their two best scores
  s.topk_group = 2;
  s.norm_topk_prob = true;
  s.routed_scaling_factor = 2.5;
  s.rms_norm_eps = 1e-6;
  s.rope_theta = 10000.0;
  s.tie_word_embeddings = false;
  s.max_position_embeddings = 4096;
  s.num_nextn_predict_layers = 0;
  s.bos_token_id = 0;  // <｜begin▁of▁sentence｜> in the DeepSeek-V3 tokenizer
  s.eos_token_ids = {1};  // <｜end▁of▁sentence｜>
  return s;
}

DefaultModel load_default_model() {
  DefaultModel m;
  m.spec = default_model_spec();
  m.tokenizer = Tokenizer::from_json(embedded_tokenizer_json(), embedded_tokenizer_config_json());
  m.weights = Weights::dummy(m.spec, kDefaultModelSeed);
  m.name = "deepseek-v3-tiny-random";
  m.description =
      "embedded default: DeepSeek-V3 architecture (hidden 256, 3 layers, 8 routed experts) with "
      "RANDOM weights (seed " + std::to_string(kDefaultModelSeed) +
      "): output is gibberish; pass --model DIR for a real checkpoint";
  return m;
}

}  // namespace rs
