#include "model/weights.h"

#include <algorithm>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/read_file.h"
#include "model/safetensors.h"
#include "model/weights_builder.h"

namespace rs {

namespace {

using Init = TensorInfo::Init;

// Linear projections are the tensors the DeepSeek-V3 release stores as FP8 with block scales;
// embeddings, norms, the router and lm_head stay in bf16.
TensorInfo linear(const ModelSpec& s, std::string name, int64_t out, int64_t in) {
  TensorInfo t{std::move(name), DType::BF16, {out, in}, false, in, Init::Normal};
  if (s.quant.fp8_block) {
    t.dtype = DType::F8_E4M3;
    t.block_scaled = true;
  }
  return t;
}
TensorInfo norm(std::string name, int64_t n) {
  return TensorInfo{std::move(name), DType::BF16, {n}, false, 1, Init::Ones};
}

void append_mlp(const ModelSpec& s, const std::string& p, int64_t inter,
                std::vector<TensorInfo>& out) {
  out.push_back(linear(s, p + "gate_proj.weight", inter, s.hidden_size));
  out.push_back(linear(s, p + "up_proj.weight", inter, s.hidden_size));
  out.push_back(linear(s, p + "down_proj.weight", s.hidden_size, inter));
}

void append_layer(const ModelSpec& s, int layer, std::vector<TensorInfo>& out) {
  const std::string p = layer_prefix(layer);
  const int64_t H = s.hidden_size, nh = s.num_attention_heads;
  out.push_back(norm(p + "input_layernorm.weight", H));
  out.push_back(norm(p + "post_attention_layernorm.weight", H));
  const std::string a = p + "self_attn.";
  if (s.q_lora_rank > 0) {
    out.push_back(linear(s, a + "q_a_proj.weight", s.q_lora_rank, H));
    out.push_back(norm(a + "q_a_layernorm.weight", s.q_lora_rank));
    out.push_back(linear(s, a + "q_b_proj.weight", nh * s.qk_head_dim(), s.q_lora_rank));
  } else {
    out.push_back(linear(s, a + "q_proj.weight", nh * s.qk_head_dim(), H));
  }
  out.push_back(linear(s, a + "kv_a_proj_with_mqa.weight", s.kv_lora_rank + s.qk_rope_head_dim, H));
  out.push_back(norm(a + "kv_a_layernorm.weight", s.kv_lora_rank));
  out.push_back(linear(s, a + "kv_b_proj.weight", nh * (s.qk_nope_head_dim + s.v_head_dim),
                       s.kv_lora_rank));
  out.push_back(linear(s, a + "o_proj.weight", H, nh * s.v_head_dim));
  const std::string m = p + "mlp.";
  if (!s.is_moe_layer(layer)) {
    append_mlp(s, m, s.intermediate_size, out);
    return;
  }
  out.push_back(TensorInfo{m + "gate.weight", DType::BF16, {s.n_routed_experts, H}, false, H,
                           Init::RouterGate});
  if (s.topk_method == TopkMethod::NoauxTc)
    out.push_back(TensorInfo{m + "gate.e_score_correction_bias", DType::BF16,
                             {s.n_routed_experts}, false, 1, Init::Zero});
  for (int e = 0; e < s.n_routed_experts; ++e)
    append_mlp(s, m + "experts." + std::to_string(e) + ".", s.moe_intermediate_size, out);
  if (s.n_shared_experts > 0)
    append_mlp(s, m + "shared_experts.", int64_t(s.moe_intermediate_size) * s.n_shared_experts, out);
}

bool is_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// Where each checkpoint tensor lives: one file, or shards listed by index.json.
struct Checkpoint {
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;  // by path
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> tensors;
  std::string index_path;  // empty for a single file

  void add_file(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    for (const auto& [name, e] : f->entries()) tensors[name] = {f.get(), &e};
    files[path] = std::move(f);
  }
  // File to blame for a missing tensor.
  std::string where(const std::string& name) const {
    if (!index_path.empty()) return index_path;
    return files.begin()->first;
  }
};

Checkpoint open_checkpoint(const std::string& dir) {
  Checkpoint c;
  std::string single = dir + "/model.safetensors";
  std::string index = dir + "/model.safetensors.index.json";
  if (file_exists(index)) {
    c.index_path = index;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(index));
    } catch (const nlohmann::json::exception& e) {
      throw Error(index + ": not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index + ": field 'weight_map': missing or not an object");
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        throw Error(index + ": tensor '" + it.key() + "': shard name is not a string");
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.empty())
        throw Error(index + ": tensor '" + it.key() + "': bad shard name '" + shard + "'");
      shards.insert(shard);
    }
    for (const std::string& s : shards) c.add_file(dir + "/" + s);
    // The index is the contract: a tensor it places in one shard must be there.
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      std::string path = dir + "/" + it.value().get<std::string>();
      if (!c.files[path]->find(it.key()))
        throw Error(path + ": tensor '" + it.key() + "': missing (index.json places it here)");
    }
    return c;
  }
  if (!file_exists(single))
    throw Error(dir + ": no model.safetensors or model.safetensors.index.json");
  c.add_file(single);
  return c;
}

}  // namespace

std::vector<TensorInfo> expected_tensors(const ModelSpec& s) {
  std::vector<TensorInfo> out;
  out.push_back(TensorInfo{"model.embed_tokens.weight", DType::BF16,
                           {s.vocab_size, s.hidden_size}, false, s.hidden_size, Init::Embedding});
  for (int l = 0; l < s.num_hidden_layers; ++l) append_layer(s, l, out);
  out.push_back(norm("model.norm.weight", s.hidden_size));
  if (!s.tie_word_embeddings)
    out.push_back(TensorInfo{"lm_head.weight", DType::BF16, {s.vocab_size, s.hidden_size}, false,
                             s.hidden_size, Init::Normal});
  return out;
}

std::vector<TensorInfo> expected_mtp_tensors(const ModelSpec& s) {
  std::vector<TensorInfo> out;
  for (int k = 0; k < s.num_nextn_predict_layers; ++k) {
    int l = s.num_hidden_layers + k;
    const std::string p = layer_prefix(l);
    out.push_back(TensorInfo{p + "embed_tokens.weight", DType::BF16, {s.vocab_size, s.hidden_size},
                             false, s.hidden_size, Init::Embedding});
    out.push_back(norm(p + "enorm.weight", s.hidden_size));
    out.push_back(norm(p + "hnorm.weight", s.hidden_size));
    out.push_back(linear(s, p + "eh_proj.weight", s.hidden_size, 2 * int64_t(s.hidden_size)));
    append_layer(s, l, out);
    out.push_back(norm(p + "shared_head.norm.weight", s.hidden_size));
    out.push_back(TensorInfo{p + "shared_head.head.weight", DType::BF16,
                             {s.vocab_size, s.hidden_size}, false, s.hidden_size, Init::Normal});
  }
  return out;
}

namespace {

// Validates one expected tensor found in the checkpoint and registers it (and its FP8 scale).
void take(WeightsBuilder& b, const Checkpoint& ck, const ModelSpec& s, const TensorInfo& info,
          const SafetensorsFile* file, const SafetensorsEntry* e) {
  const std::string& path = file->path();
  if (e->shape != info.shape)
    throw Error(path + ": tensor '" + info.name + "': shape " + shape_str(e->shape) +
                ", expected " + shape_str(info.shape));
  if (e->dtype == DType::F8_E4M3 && info.shape.size() == 2 && info.init == Init::Normal &&
      info.name != "lm_head.weight" && info.name.find("shared_head.head") == std::string::npos) {
    std::string sname = info.name + "_scale_inv";
    auto it = ck.tensors.find(sname);
    if (it == ck.tensors.end())
      throw Error(path + ": tensor '" + sname + "': missing (FP8 weight '" + info.name +
                  "' needs its block scales)");
    const SafetensorsEntry* se = it->second.second;
    std::vector<int64_t> want = {(info.shape[0] + s.quant.block_rows - 1) / s.quant.block_rows,
                                 (info.shape[1] + s.quant.block_cols - 1) / s.quant.block_cols};
    if (se->dtype != DType::F32)
      throw Error(it->second.first->path() + ": tensor '" + sname + "': dtype " +
                  dtype_name(se->dtype) + ", expected F32");
    if (se->shape != want)
      throw Error(it->second.first->path() + ": tensor '" + sname + "': shape " +
                  shape_str(se->shape) + ", expected " + shape_str(want) + " (" +
                  std::to_string(s.quant.block_rows) + "x" + std::to_string(s.quant.block_cols) +
                  " blocks)");
    b.add(sname, DType::F32, se->shape, se->data, se->nbytes);
  } else if (!is_float(e->dtype)) {
    throw Error(path + ": tensor '" + info.name + "': dtype " + dtype_name(e->dtype) +
                ", expected BF16, F16 or F32" +
                (info.block_scaled || (info.shape.size() == 2 && info.init == Init::Normal)
                     ? " (or F8_E4M3 with weight_scale_inv)" : ""));
  }
  b.add(info.name, e->dtype, e->shape, e->data, e->nbytes);
}

// transformers 5 stores routed experts fused: experts.gate_up_proj [E, 2I, H] (gate rows first)
// and experts.down_proj [E, H, I]. Each expert's slices are contiguous, so per-expert views point
// straight into the mapping under the DeepSeek release names.
void take_fused_experts(WeightsBuilder& b, const Checkpoint& ck, const ModelSpec& s, int layer,
                        std::set<std::string>& covered) {
  const std::string m = layer_prefix(layer) + "mlp.experts.";
  auto gu = ck.tensors.find(m + "gate_up_proj");
  auto dn = ck.tensors.find(m + "down_proj");
  if (gu == ck.tensors.end() && dn == ck.tensors.end()) return;
  const int64_t E = s.n_routed_experts, I = s.moe_intermediate_size, H = s.hidden_size;
  auto check = [&](auto it, const std::string& name, std::vector<int64_t> want) {
    if (it == ck.tensors.end())
      throw Error(ck.where(name) + ": tensor '" + name + "': missing (the other fused expert tensor is present)");
    const SafetensorsEntry* e = it->second.second;
    if (e->shape != want)
      throw Error(it->second.first->path() + ": tensor '" + name + "': shape " +
                  shape_str(e->shape) + ", expected " + shape_str(want));
    if (!is_float(e->dtype))
      throw Error(it->second.first->path() + ": tensor '" + name + "': dtype " +
                  dtype_name(e->dtype) + ", expected BF16, F16 or F32 (fused experts)");
    return e;
  };
  const SafetensorsEntry* g = check(gu, m + "gate_up_proj", {E, 2 * I, H});
  const SafetensorsEntry* d = check(dn, m + "down_proj", {E, H, I});
  const size_t gsz = dtype_size(g->dtype), dsz = dtype_size(d->dtype);
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = m + std::to_string(e) + ".";
    const auto* gbase = static_cast<const uint8_t*>(g->data) + e * 2 * I * H * gsz;
    b.add(p + "gate_proj.weight", g->dtype, {I, H}, gbase, I * H * gsz);
    b.add(p + "up_proj.weight", g->dtype, {I, H}, gbase + I * H * gsz, I * H * gsz);
    b.add(p + "down_proj.weight", d->dtype, {H, I},
          static_cast<const uint8_t*>(d->data) + e * H * I * dsz, H * I * dsz);
    covered.insert(p + "gate_proj.weight");
    covered.insert(p + "up_proj.weight");
    covered.insert(p + "down_proj.weight");
  }
}

}  // namespace

std::unique_ptr<Weights> Weights::load(const std::string& model_dir, const ModelSpec& spec) {
  Checkpoint ck = open_checkpoint(model_dir);
  WeightsBuilder b;
  for (auto& [path, f] : ck.files) b.keep(f);

  std::set<std::string> covered;
  for (int l = 0; l < spec.num_hidden_layers + spec.num_nextn_predict_layers; ++l)
    if (spec.is_moe_layer(l)) take_fused_experts(b, ck, spec, l, covered);

  for (const TensorInfo& info : expected_tensors(spec)) {
    if (covered.count(info.name)) continue;
    auto it = ck.tensors.find(info.name);
    if (it == ck.tensors.end())
      throw Error(ck.where(info.name) + ": tensor '" + info.name + "': missing");
    take(b, ck, spec, info, it->second.first, it->second.second);
  }
  // MTP: optional as a whole; whatever is present must be right.
  bool all_mtp = spec.num_nextn_predict_layers > 0;
  for (const TensorInfo& info : expected_mtp_tensors(spec)) {
    if (covered.count(info.name)) continue;
    auto it = ck.tensors.find(info.name);
    if (it == ck.tensors.end()) {
      all_mtp = false;
      continue;
    }
    take(b, ck, spec, info, it->second.first, it->second.second);
  }
  b.set_mtp(all_mtp);
  b.link_scales(spec.quant.block_rows, spec.quant.block_cols);
  return std::move(b.w);
}

const Tensor& Weights::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error("weights: tensor '" + name + "' not loaded");
  return it->second;
}

const Tensor* Weights::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Weights::~Weights() = default;

}  // namespace rs
