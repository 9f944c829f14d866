#include "backend/cuda/device_weights.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/linear.h"
#include "common/error.h"
#include "kernels/common/dummy_init.h"
#include "kernels/common/env_int.h"
#include "kernels/ops/weight_init_params.h"
#include "model/weights.h"

namespace rs::cuda {

namespace {

ElemType elem_of(DType t, const std::string& name) {
  switch (t) {
    case DType::BF16: return ElemType::BF16;
    case DType::F16: return ElemType::F16;
    case DType::F32: return ElemType::F32;
    case DType::F8_E4M3: return ElemType::E4M3;
    default: throw Error("cuda weights: tensor '" + name + "' has dtype " + dtype_name(t) + ", not a float type");
  }
}

// The byte distance between consecutive routed experts when it is the same for every expert and
// every part (matrix and scales), else 0 (MoeExperts::stride). The loader's arena allocates each
// expert's gate, up and down in one order, so it holds for every checkpoint it builds; the check
// keeps the kernels' arithmetic honest if that order ever changes. RS_EXPERT_STRIDE=0 turns it
// off (the kernels then read the arrays; for A/B timing).
int64_t uniform_expert_stride(const std::vector<DeviceMatrix>& host, int E) {
  if (E < 2 || !kern::env_int("RS_EXPERT_STRIDE", 1, 0, 1)) return 0;
  const int64_t stride = reinterpret_cast<intptr_t>(host[1].data) - reinterpret_cast<intptr_t>(host[0].data);
  if (stride <= 0) return 0;
  for (int k = 0; k < 3; ++k)
    for (int e = 0; e < E; ++e)
      if (!expert_view_at(host[size_t(k) * E], host[size_t(k) * E + e], e * stride)) return 0;
  return stride;
}

std::string prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

// Builds the device copy in two passes over the same code: the first only counts bytes, the second
// allocates one arena and fills it. Each tensor comes from host bytes or from the dummy formula.
class Builder {
 public:
  Builder(const ModelSpec& spec, const Weights* host, uint64_t seed) : spec_(spec), host_(host), seed_(seed) {
    if (!host_) {
      for (auto& i : expected_tensors(spec)) infos_.emplace(i.name, i);
    }
  }

  void begin_fill(char* base) {
    base_ = base;
    off_ = 0;
  }
  size_t used() const { return off_; }
  uint64_t* category = nullptr;  // where allocated bytes are counted

  DeviceMatrix matrix(const std::string& name, bool quantizable = true) {
    const Src s = source(name);
    if (s.shape.size() != 2) throw Error("cuda weights: '" + name + "' is not a matrix");
    DeviceMatrix m;
    m.rows = s.shape[0];
    m.cols = s.shape[1];
    const int64_t n = m.rows * m.cols;
    const bool src_fp8 = s.type == ElemType::E4M3;
    const bool to_fp8 = src_fp8 || (quantizable && spec_.quant.fp8_block);
    if (to_fp8) {
      m.type = WeightType::FP8_E4M3_BLOCK;
      m.block_rows = src_fp8 && s.host && s.host->block_rows ? s.host->block_rows : 128;
      m.block_cols = src_fp8 && s.host && s.host->block_cols ? s.host->block_cols : 128;
      if (!src_fp8) m.block_rows = m.block_cols = 128;
      const int64_t nscale = ((m.rows + m.block_rows - 1) / m.block_rows) * ((m.cols + m.block_cols - 1) / m.block_cols);
      uint8_t* data = static_cast<uint8_t*>(alloc(size_t(n)));
      float* scales = static_cast<float*>(alloc(size_t(nscale) * 4));
      m.data = data;
      m.scale_inv = scales;
      if (!base_) return m;
      if (src_fp8 && s.host) {
        if (!s.host->scale_inv) throw Error("cuda weights: FP8 tensor '" + name + "' has no _scale_inv");
        const Tensor& sc = *s.host->scale_inv;
        if (sc.dtype != DType::F32 || sc.numel() != nscale)
          throw Error("cuda weights: '" + sc.name + "' must be F32 with " + std::to_string(nscale) + " elements");
        RS_CUDA(cudaMemcpy(data, s.host->data, size_t(n), cudaMemcpyHostToDevice));
        RS_CUDA(cudaMemcpy(scales, sc.data, size_t(nscale) * 4, cudaMemcpyHostToDevice));
      } else if (src_fp8) {
        DummyFillParams p = dummy_params(s, data, ElemType::E4M3, n);
        p.fp8_scale_inv = dummy::fp8_block_scale_inv(p.init, p.fan_in);
        launch_dummy_fill(p, 0);
        launch_fill_f32(scales, nscale, p.fp8_scale_inv, 0);
      } else {  // a float tensor quantised here
        __nv_bfloat16* tmp = staging<__nv_bfloat16>(size_t(n) * 2);
        to_device(s, tmp, ElemType::BF16, n);
        QuantizeFp8Params q;
        q.in = tmp;
        q.rows = m.rows;
        q.cols = m.cols;
        q.out = data;
        q.scale_inv = scales;
        launch_quantize_fp8(q, 0);
      }
      RS_CUDA(cudaGetLastError());
      return m;
    }
    m.type = WeightType::BF16;
    __nv_bfloat16* data = static_cast<__nv_bfloat16*>(alloc(size_t(n) * 2));
    m.data = data;
    if (base_) to_device(s, data, ElemType::BF16, n);
    return m;
  }

  const float* f32(const std::string& name) { return static_cast<const float*>(vector(name, ElemType::F32, 4)); }

  const __nv_bfloat16* bf16(const std::string& name) {
    return static_cast<const __nv_bfloat16*>(vector(name, ElemType::BF16, 2));
  }

  // A bf16 view of a device matrix (itself when it is bf16; a dequantised copy of FP8).
  const __nv_bfloat16* bf16_of(const DeviceMatrix& m) {
    if (m.type == WeightType::BF16) return static_cast<const __nv_bfloat16*>(m.data);
    auto* out = static_cast<__nv_bfloat16*>(alloc(size_t(m.rows * m.cols) * 2));
    if (base_) {
      ConvertParams c;
      c.in = m.data;
      c.in_type = ElemType::E4M3;
      c.scale_inv = m.scale_inv;
      c.block_rows = m.block_rows;
      c.block_cols = m.block_cols;
      c.rows = m.rows;
      c.cols = m.cols;
      c.out = out;
      c.out_type = ElemType::BF16;
      launch_convert(c, 0);
      RS_CUDA(cudaGetLastError());
    }
    return out;
  }

  template <typename T>
  T* array(size_t count) { return static_cast<T*>(alloc(count * sizeof(T))); }

 private:
  struct Src {
    const Tensor* host = nullptr;
    const TensorInfo* info = nullptr;
    ElemType type = ElemType::BF16;
    std::vector<int64_t> shape;
    std::string name;
  };

  Src source(const std::string& name) {
    Src s;
    s.name = name;
    if (host_) {
      s.host = &host_->get(name);
      s.type = elem_of(s.host->dtype, name);
      s.shape = s.host->shape;
    } else {
      auto it = infos_.find(name);
      if (it == infos_.end()) throw Error("cuda weights: no tensor '" + name + "' for this config");
      s.info = &it->second;
      s.type = elem_of(s.info->dtype, name);
      s.shape = s.info->shape;
    }
    return s;
  }

  DummyFillParams dummy_params(const Src& s, void* out, ElemType out_type, int64_t n) {
    DummyFillParams p;
    p.out = out;
    p.out_type = out_type;
    p.ckpt_type = s.type;
    p.count = n;
    p.seed = seed_;
    p.tensor_id = dummy::name_hash(s.name.c_str());
    p.init = static_cast<uint8_t>(s.info->init);
    p.fan_in = s.info->fan_in;
    return p;
  }

  // Writes the tensor's values as bf16 or fp32 to device memory.
  void to_device(const Src& s, void* out, ElemType out_type, int64_t n) {
    if (s.info) {
      if (s.type == ElemType::E4M3) {  // an FP8 dummy needed in float: make the bytes, then dequantise
        auto* tmp = staging<uint8_t>(size_t(n));
        DummyFillParams p = dummy_params(s, tmp, ElemType::E4M3, n);
        p.fp8_scale_inv = dummy::fp8_block_scale_inv(p.init, p.fan_in);
        launch_dummy_fill(p, 0);
        ConvertParams c;
        c.in = tmp;
        c.in_type = ElemType::E4M3;
        c.rows = s.shape[0];
        c.cols = n / s.shape[0];
        DeviceBuffer sc(sizeof(float) * size_t(((c.rows + 127) / 128) * ((c.cols + 127) / 128)));
        launch_fill_f32(sc.get<float>(), int64_t(sc.bytes() / 4), p.fp8_scale_inv, 0);
        c.scale_inv = sc.get<float>();
        c.out = out;
        c.out_type = out_type;
        launch_convert(c, 0);
        RS_CUDA(cudaDeviceSynchronize());
        return;
      }
      launch_dummy_fill(dummy_params(s, out, out_type, n), 0);
      RS_CUDA(cudaGetLastError());
      return;
    }
    const Tensor& t = *s.host;
    if (int64_t(t.nbytes) < n * int64_t(dtype_size(t.dtype)))
      throw Error("cuda weights: tensor '" + s.name + "' holds " + std::to_string(t.nbytes) + " bytes, expected " +
                  std::to_string(n * dtype_size(t.dtype)));
    if (s.type == out_type) {
      RS_CUDA(cudaMemcpy(out, t.data, size_t(n) * dtype_size(t.dtype), cudaMemcpyHostToDevice));
      return;
    }
    void* tmp = staging<void>(size_t(n) * dtype_size(t.dtype));
    RS_CUDA(cudaMemcpy(tmp, t.data, size_t(n) * dtype_size(t.dtype), cudaMemcpyHostToDevice));
    ConvertParams c;
    c.in = tmp;
    c.in_type = s.type;
    c.rows = t.rows();
    c.cols = n / c.rows;
    DeviceBuffer sc;
    if (s.type == ElemType::E4M3) {
      if (!t.scale_inv) throw Error("cuda weights: FP8 tensor '" + s.name + "' has no _scale_inv");
      sc.reset(t.scale_inv->nbytes, "scales");
      RS_CUDA(cudaMemcpy(sc.get(), t.scale_inv->data, t.scale_inv->nbytes, cudaMemcpyHostToDevice));
      c.scale_inv = sc.get<float>();
      c.block_rows = t.block_rows ? t.block_rows : 128;
      c.block_cols = t.block_cols ? t.block_cols : 128;
    }
    c.out = out;
    c.out_type = out_type;
    launch_convert(c, 0);
    RS_CUDA(cudaDeviceSynchronize());  // the staging buffer is reused by the next tensor
  }

  template <typename T>
  T* staging(size_t bytes) {
    if (staging_.bytes() < bytes) {
      RS_CUDA(cudaDeviceSynchronize());
      staging_.reset(bytes, "weight staging");
    }
    return staging_.get<T>();
  }

  // A tensor of any shape, copied (or dummy-filled) whole as out_type.
  void* vector(const std::string& name, ElemType out_type, size_t elem_bytes) {
    const Src s = source(name);
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    void* out = alloc(size_t(n) * elem_bytes);
    if (base_) to_device(s, out, out_type, n);
    return out;
  }

  void* alloc(size_t bytes) {
    off_ = (off_ + 255) & ~size_t(255);
    void* p = base_ ? base_ + off_ : nullptr;
    off_ += bytes;
    if (category) *category += bytes;
    return p;
  }

  const ModelSpec& spec_;
  const Weights* host_;
  uint64_t seed_;
  std::map<std::string, TensorInfo> infos_;
  char* base_ = nullptr;
  size_t off_ = 0;
  DeviceBuffer staging_;
};

DeviceMlp mlp(Builder& b, const std::string& p) {
  return DeviceMlp{b.matrix(p + "gate_proj.weight"), b.matrix(p + "up_proj.weight"), b.matrix(p + "down_proj.weight")};
}

void build(const ModelSpec& spec, Builder& b, DeviceWeights& dw) {
  WeightBytes bytes;
  uint64_t embed_bytes = 0;
  b.category = &embed_bytes;
  dw.embed = b.bf16("model.embed_tokens.weight");
  b.category = &bytes.dense;
  dw.final_norm = b.f32("model.norm.weight");
  b.category = &bytes.lm_head;
  dw.lm_head = spec.tie_word_embeddings ? dw.embed : b.bf16("lm_head.weight");
  dw.layers.assign(spec.num_hidden_layers, DeviceLayer{});
  uint64_t experts_total = 0;
  for (int l = 0; l < spec.num_hidden_layers; ++l) {
    DeviceLayer& L = dw.layers[l];
    const std::string p = prefix(l), a = p + "self_attn.", m = p + "mlp.";
    b.category = &bytes.dense;
    L.input_norm = b.f32(p + "input_layernorm.weight");
    L.post_norm = b.f32(p + "post_attention_layernorm.weight");
    if (spec.q_lora_rank > 0) {
      L.q_a = b.matrix(a + "q_a_proj.weight");
      L.q_a_norm = b.f32(a + "q_a_layernorm.weight");
      L.q_b = b.matrix(a + "q_b_proj.weight");
    } else {
      L.q_proj = b.matrix(a + "q_proj.weight");
    }
    L.kv_a = b.matrix(a + "kv_a_proj_with_mqa.weight");
    L.kv_a_norm = b.f32(a + "kv_a_layernorm.weight");
    L.kv_b = b.matrix(a + "kv_b_proj.weight");
    L.kv_b_bf16 = b.bf16_of(L.kv_b);
    L.o_proj = b.matrix(a + "o_proj.weight");
    L.moe = spec.is_moe_layer(l);
    if (!L.moe) {
      L.dense = mlp(b, m);
      continue;
    }
    L.router = b.bf16(m + "gate.weight");
    if (spec.topk_method == TopkMethod::NoauxTc) L.router_bias = b.f32(m + "gate.e_score_correction_bias");
    if (spec.n_shared_experts > 0) {
      L.shared = mlp(b, m + "shared_experts.");
      L.has_shared = true;
    }
    const int E = spec.n_routed_experts;
    DeviceMatrix* arr = b.array<DeviceMatrix>(size_t(3) * E);
    std::vector<DeviceMatrix> host(size_t(3) * E);
    b.category = &experts_total;
    for (int e = 0; e < E; ++e) {
      DeviceMlp x = mlp(b, m + "experts." + std::to_string(e) + ".");
      host[e] = x.gate;
      host[E + e] = x.up;
      host[2 * E + e] = x.down;
    }
    if (arr) RS_CUDA(cudaMemcpy(arr, host.data(), host.size() * sizeof(DeviceMatrix), cudaMemcpyHostToDevice));
    L.experts.num_experts = E;
    L.experts.hidden = spec.hidden_size;
    L.experts.inter = spec.moe_intermediate_size;
    L.experts.gate = arr;
    L.experts.up = arr ? arr + E : nullptr;
    L.experts.down = arr ? arr + 2 * E : nullptr;
    L.experts.type = host[0].type;
    if (arr) {
      L.experts.stride = uniform_expert_stride(host, E);
      for (int k = 0; k < 3; ++k) L.experts.first[k] = host[size_t(k) * E];
    }
  }
  int moe_layers = 0;
  for (auto& L : dw.layers) moe_layers += L.moe;
  bytes.per_expert = moe_layers ? experts_total / (uint64_t(moe_layers) * spec.n_routed_experts) : 0;
  bytes.embed_row = embed_bytes / std::max(1, spec.vocab_size);
  bytes.total = b.used();
  dw.bytes = bytes;
  dw.fp8 = dw.layers.empty() ? false : dw.layers[0].kv_a.type == WeightType::FP8_E4M3_BLOCK;
}

std::unique_ptr<DeviceWeights> make(const ModelSpec& spec, const Weights* host, uint64_t seed) {
  Builder b(spec, host, seed);
  auto dw = std::make_unique<DeviceWeights>();
  build(spec, b, *dw);  // counting pass
  dw->arena.reset(b.used(), "model weights");
  b.begin_fill(dw->arena.get<char>());
  build(spec, b, *dw);
  RS_CUDA(cudaDeviceSynchronize());
  for (const DeviceLayer& L : dw->layers)
    if (L.moe) validate_moe_experts(L.experts);
  return dw;
}

}  // namespace

std::unique_ptr<DeviceWeights> upload_weights(const ModelSpec& spec, const Weights& w) {
  if (w.is_dummy()) return make(spec, nullptr, w.dummy_seed());
  return make(spec, &w, 0);
}

std::unique_ptr<DeviceWeights> dummy_device_weights(const ModelSpec& spec, uint64_t seed) {
  return make(spec, nullptr, seed);
}

}  // namespace rs::cuda
