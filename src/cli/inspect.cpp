// rackserve inspect: what a model directory holds, and what it costs to run.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "model/model_spec.h"
#include "model/param_count.h"
#include "model/weights.h"

namespace rs::cli {

namespace {

std::string billions(uint64_t n) {
  char b[32];
  if (n >= 1000000000ull) std::snprintf(b, sizeof b, "%.2fB", n / 1e9);
  else std::snprintf(b, sizeof b, "%.3fM", n / 1e6);
  return b;
}
std::string gib(uint64_t n) {
  char b[32];
  if (n >= (1ull << 30)) std::snprintf(b, sizeof b, "%.2f GiB", n / double(1ull << 30));
  else std::snprintf(b, sizeof b, "%.3f MiB", n / double(1ull << 20));
  return b;
}
const char* scoring_name(ScoringFunc f) { return f == ScoringFunc::Softmax ? "softmax" : "sigmoid"; }
const char* topk_name(TopkMethod m) {
  switch (m) {
    case TopkMethod::Greedy: return "greedy";
    case TopkMethod::GroupLimitedGreedy: return "group_limited_greedy";
    default: return "noaux_tc";
  }
}

void run_inspect(const std::string& dir, const std::string& load_format) {
  if (load_format != "auto" && load_format != "dummy")
    throw Error("--load-format must be auto or dummy (got '" + load_format + "')");
  ModelSpec s = load_model_spec(dir);
  std::string weights_note = "not loaded (--load-format dummy: deterministic random weights)";
  if (load_format == "auto") {
    std::unique_ptr<Weights> w;
    try {
      w = Weights::load(dir, s);  // validates every tensor against the config
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find("no model.safetensors") != std::string::npos)
        msg += " (--load-format dummy inspects the config alone)";
      throw Error(msg);
    }
    size_t fp8 = 0;
    for (const auto& [name, t] : w->all()) fp8 += t.dtype == DType::F8_E4M3;
    weights_note = std::to_string(w->all().size()) + " tensors, all present and well-formed" +
                   (fp8 ? " (" + std::to_string(fp8) + " FP8 block-scaled)" : "") +
                   (w->has_mtp() ? "; MTP weights present" : "");
  }
  ParamCounts c = count_params(s);
  int moe_layers = 0;
  for (int l = 0; l < s.num_hidden_layers; ++l) moe_layers += s.is_moe_layer(l);
  std::printf("model: %s (%s)\n", dir.c_str(), s.model_type_name.c_str());
  std::printf("architecture:\n");
  std::printf("  layers: %d (%d dense, %d MoE), hidden %d, vocab %d, tie_word_embeddings %s\n",
              s.num_hidden_layers, s.num_hidden_layers - moe_layers, moe_layers, s.hidden_size,
              s.vocab_size, s.tie_word_embeddings ? "true" : "false");
  std::printf("  attention: MLA, %d heads, q_lora_rank %s, kv_lora_rank %d, qk_nope %d, qk_rope %d, v %d, softmax scale %.6g\n",
              s.num_attention_heads, s.q_lora_rank ? std::to_string(s.q_lora_rank).c_str() : "none (q_proj)",
              s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim, s.softmax_scale());
  if (s.yarn.enabled)
    std::printf("  rope: theta %g, %s pairs, YaRN factor %g (original %g positions, beta %g/%g, mscale %g, mscale_all_dim %g)\n",
                s.rope_theta, s.rope_interleave ? "interleaved" : "half-split", s.yarn.factor,
                s.yarn.original_max_position_embeddings, s.yarn.beta_fast, s.yarn.beta_slow,
                s.yarn.mscale, s.yarn.mscale_all_dim);
  else
    std::printf("  rope: theta %g, %s pairs, no scaling\n", s.rope_theta,
                s.rope_interleave ? "interleaved" : "half-split");
  if (s.n_routed_experts > 0)
    std::printf("  moe: %d routed + %d shared experts (intermediate %d), top-%d, %s scores, %s, groups %d keep %d, norm_topk_prob %s, routed_scaling_factor %g\n",
                s.n_routed_experts, s.n_shared_experts, s.moe_intermediate_size, s.num_experts_per_tok,
                scoring_name(s.scoring_func), topk_name(s.topk_method), s.n_group, s.topk_group,
                s.norm_topk_prob ? "true" : "false", s.routed_scaling_factor);
  if (s.num_hidden_layers > moe_layers)
    std::printf("  dense mlp: intermediate %d\n", s.intermediate_size);
  std::printf("  weights: %s; %s\n",
              s.quant.fp8_block ? ("FP8 e4m3 linear layers, " + std::to_string(s.quant.block_rows) + "x" +
                                   std::to_string(s.quant.block_cols) + " block scales").c_str()
                                : "bf16",
              weights_note.c_str());
  std::printf("  mtp layers: %d (%s parameters, not counted below)\n", s.num_nextn_predict_layers,
              billions(c.mtp).c_str());
  std::printf("parameters: total %s, active %s per token\n", billions(c.total).c_str(),
              billions(c.active).c_str());
  std::printf("weight bytes: %s stored; %s read per decoded token (batch 1)\n", gib(c.weight_bytes).c_str(),
              gib(c.bytes_per_decoded_token).c_str());
  std::printf("kv cache per token: %llu elements (%d layers x (%d latent + %d rope)) = %llu bytes bf16, %llu bytes fp32 (CPU backend)\n",
              (unsigned long long)c.kv_elements_per_token, s.num_hidden_layers, s.kv_lora_rank,
              s.qk_rope_head_dim, (unsigned long long)(c.kv_elements_per_token * 2),
              (unsigned long long)(c.kv_elements_per_token * 4));
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's architecture, parameter counts and memory traffic");
  auto dir = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("auto");
  cmd->add_option("--model", *dir, "HF model directory (config.json [+ safetensors])")->required();
  cmd->add_option("--load-format", *format, "auto: validate the checkpoint too; dummy: config only");
  cmd->callback([dir, format] { run_inspect(*dir, *format); });
}

}  // namespace rs::cli
