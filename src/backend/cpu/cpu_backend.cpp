// The CPU reference forward of DeepSeek V2/V3: fp32 arithmetic on the weights as stored
// (memory-mapped), a paged MLA cache, mixed prefill/decode batches. The math follows HF
// transformers' modeling_deepseek_v3.py / _v2.py; docs/arch/model.md lists every choice.
#include "backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/linear.h"
#include "backend/cpu/moe_routing.h"
#include "backend/cpu/thread_pool.h"
#include "backend/validate_batch.h"
#include "common/error.h"
#include "model/rope.h"
#include "model/weights.h"
#include "model/weights_builder.h"

namespace rs {

namespace {

using cpu::linear;
using cpu::ThreadPool;

// HF builds q_a_layernorm and kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

struct Mlp {
  const Tensor *gate = nullptr, *up = nullptr, *down = nullptr;
};

struct Layer {
  const Tensor *input_norm, *post_norm;
  const Tensor *q_proj = nullptr, *q_a = nullptr, *q_a_norm = nullptr, *q_b = nullptr;
  const Tensor *kv_a, *kv_a_norm, *kv_b, *o_proj;
  bool moe = false;
  Mlp dense;
  const Tensor *router = nullptr, *bias = nullptr;
  std::vector<Mlp> experts;
  Mlp shared;
  bool has_shared = false;
};

std::vector<float> to_f32(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  Tensor row_view = t;
  if (t.shape.size() == 1) row_view.shape = {1, t.shape[0]};
  cpu::dequant_row(row_view, 0, v.data());
  return v;
}

// x * rsqrt(mean(x^2) + eps) * w, the HF RMSNorm in fp32.
void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  float inv = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelSpec& spec, const Weights& w, int threads, RopeTable rope)
      : spec_(spec), w_(w), pool_(threads), rope_(std::move(rope)),
        scale_(static_cast<float>(spec.softmax_scale())) {
    auto get = [&](const std::string& n) { return &w.get(n); };
    embed_ = get("model.embed_tokens.weight");
    lm_head_ = spec.tie_word_embeddings ? embed_ : get("lm_head.weight");
    final_norm_ = to_f32(*get("model.norm.weight"));
    for (int l = 0; l < spec.num_hidden_layers; ++l) {
      const std::string p = layer_prefix(l), a = p + "self_attn.", m = p + "mlp.";
      Layer L{};
      L.input_norm = get(p + "input_layernorm.weight");
      L.post_norm = get(p + "post_attention_layernorm.weight");
      if (spec.q_lora_rank > 0) {
        L.q_a = get(a + "q_a_proj.weight");
        L.q_a_norm = get(a + "q_a_layernorm.weight");
        L.q_b = get(a + "q_b_proj.weight");
      } else {
        L.q_proj = get(a + "q_proj.weight");
      }
      L.kv_a = get(a + "kv_a_proj_with_mqa.weight");
      L.kv_a_norm = get(a + "kv_a_layernorm.weight");
      L.kv_b = get(a + "kv_b_proj.weight");
      L.o_proj = get(a + "o_proj.weight");
      auto mlp = [&](const std::string& q) {
        return Mlp{get(q + "gate_proj.weight"), get(q + "up_proj.weight"), get(q + "down_proj.weight")};
      };
      L.moe = spec.is_moe_layer(l);
      if (!L.moe) {
        L.dense = mlp(m);
      } else {
        L.router = get(m + "gate.weight");
        if (spec.topk_method == TopkMethod::NoauxTc) L.bias = get(m + "gate.e_score_correction_bias");
        for (int e = 0; e < spec.n_routed_experts; ++e)
          L.experts.push_back(mlp(m + "experts." + std::to_string(e) + "."));
        if (spec.n_shared_experts > 0) {
          L.shared = mlp(m + "shared_experts.");
          L.has_shared = true;
        }
      }
      layers_.push_back(L);
      norms_.push_back({to_f32(*L.input_norm), to_f32(*L.post_norm),
                        L.q_a_norm ? to_f32(*L.q_a_norm) : std::vector<float>(),
                        to_f32(*L.kv_a_norm), L.bias ? to_f32(*L.bias) : std::vector<float>()});
    }
  }

  std::string name() const override { return "cpu"; }
  const ModelSpec& spec() const override { return spec_; }

  uint64_t kv_bytes_per_token() const override {
    return uint64_t(spec_.num_hidden_layers) * spec_.kv_cache_dim() * sizeof(float);
  }

  int max_kv_blocks(int block_size, uint64_t budget_bytes) const override {
    if (block_size <= 0) return 0;
    if (budget_bytes == 0) {
      // Default: half of the memory free right now.
      budget_bytes = uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE)) / 2;
    }
    uint64_t per_block = kv_bytes_per_token() * uint64_t(block_size);
    return static_cast<int>(std::min<uint64_t>(budget_bytes / per_block, INT32_MAX));
  }

  void init_kv(const KvConfig& kv) override {
    if (kv.block_size <= 0 || kv.num_blocks < 0)
      throw Error("cpu backend: bad KV config (block_size " + std::to_string(kv.block_size) +
                  ", num_blocks " + std::to_string(kv.num_blocks) + ")");
    kv_ = kv;
    layer_stride_ = size_t(kv.num_blocks) * kv.block_size * spec_.kv_cache_dim();
    try {
      cache_.assign(layer_stride_ * spec_.num_hidden_layers, 0.0f);
    } catch (const std::bad_alloc&) {
      throw Error("cpu backend: cannot allocate " +
                  std::to_string(layer_stride_ * spec_.num_hidden_layers * 4 >> 20) +
                  " MiB of KV cache");
    }
  }

  std::vector<SeqResult> execute(const Batch& batch) override;

 private:
  float* kv_slot(int layer, int block, int slot) {
    return cache_.data() + layer * layer_stride_ +
           (size_t(block) * kv_.block_size + slot) * spec_.kv_cache_dim();
  }
  void attention(int layer, const Batch& batch, const std::vector<int>& row_seq,
                 const std::vector<int>& row_pos, const float* h, int T, float* out);
  void mlp(const Mlp& m, const float* x, int T, float* out, int64_t inter);
  void moe(int layer, const float* h, int T, float* out);

  ModelSpec spec_;
  const Weights& w_;
  ThreadPool pool_;
  RopeTable rope_;
  float scale_;
  const Tensor *embed_, *lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  struct Norms { std::vector<float> input, post, q_a, kv_a, bias; };
  std::vector<Norms> norms_;
  KvConfig kv_;
  size_t layer_stride_ = 0;
  std::vector<float> cache_;  // [layer][block][slot][kv_lora_rank + qk_rope_head_dim]
};

void CpuBackend::mlp(const Mlp& m, const float* x, int T, float* out, int64_t inter) {
  const int H = spec_.hidden_size;
  std::vector<float> g(size_t(T) * inter), u(size_t(T) * inter);
  linear(pool_, *m.gate, x, H, T, g.data(), inter);
  linear(pool_, *m.up, x, H, T, u.data(), inter);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  linear(pool_, *m.down, g.data(), inter, T, out, H);
}

void CpuBackend::moe(int layer, const float* h, int T, float* out) {
  const Layer& L = layers_[layer];
  const int H = spec_.hidden_size, E = spec_.n_routed_experts;
  std::vector<float> logits(size_t(T) * E);
  linear(pool_, *L.router, h, H, T, logits.data(), E);
  const float* bias = norms_[layer].bias.empty() ? nullptr : norms_[layer].bias.data();
  // Tokens per expert, so each expert's weights are read once for all its tokens.
  std::vector<std::vector<std::pair<int, float>>> assigned(E);
  for (int t = 0; t < T; ++t) {
    cpu::Route r = cpu::route_token(spec_, &logits[size_t(t) * E], bias);
    for (size_t i = 0; i < r.experts.size(); ++i) assigned[r.experts[i]].push_back({t, r.weights[i]});
  }
  std::fill(out, out + size_t(T) * H, 0.0f);
  const int64_t I = spec_.moe_intermediate_size;
  std::vector<int> active;
  for (int e = 0; e < E; ++e) if (!assigned[e].empty()) active.push_back(e);
  // Each active expert's output for its tokens, [n_e, H].
  std::vector<std::vector<float>> y(active.size());
  auto run_expert = [&](size_t k, bool parallel_rows) {
    const auto& toks = assigned[active[k]];
    const int n = static_cast<int>(toks.size());
    std::vector<float> xin(size_t(n) * H);
    for (int i = 0; i < n; ++i) std::memcpy(&xin[size_t(i) * H], h + size_t(toks[i].first) * H, H * 4);
    y[k].resize(size_t(n) * H);
    const Mlp& m = L.experts[active[k]];
    if (parallel_rows) {
      mlp(m, xin.data(), n, y[k].data(), I);
    } else {
      std::vector<float> g(size_t(n) * I), u(size_t(n) * I);
      cpu::linear_rows(*m.gate, xin.data(), H, n, g.data(), I, 0, I);
      cpu::linear_rows(*m.up, xin.data(), H, n, u.data(), I, 0, I);
      for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
      cpu::linear_rows(*m.down, g.data(), I, n, y[k].data(), H, 0, H);
    }
  };
  // Enough experts to keep every thread busy: one expert per task. Otherwise split each
  // expert's rows. Either way every output element is the same dot product (bitwise equal).
  if (static_cast<int>(active.size()) >= 2 * pool_.size()) {
    pool_.parallel_for(static_cast<int64_t>(active.size()),
                       [&](int64_t a, int64_t b) { for (int64_t k = a; k < b; ++k) run_expert(k, false); });
  } else {
    for (size_t k = 0; k < active.size(); ++k) run_expert(k, true);
  }
  for (size_t k = 0; k < active.size(); ++k) {  // ascending expert order, as HF accumulates
    const auto& toks = assigned[active[k]];
    for (size_t i = 0; i < toks.size(); ++i) {
      float* o = out + size_t(toks[i].first) * H;
      const float wgt = toks[i].second;
      for (int c = 0; c < H; ++c) o[c] += y[k][i * H + c] * wgt;
    }
  }
  if (L.has_shared) {
    std::vector<float> s(size_t(T) * H);
    mlp(L.shared, h, T, s.data(), I * spec_.n_shared_experts);
    for (size_t i = 0; i < s.size(); ++i) out[i] += s[i];
  }
}

// MLA in its absorbed form: q_nope . (W_uk c) = (W_uk^T q_nope) . c, and the value is W_uv
// applied to the attention-weighted latent. Mathematically the HF computation (which expands
// k and v per head); fp32 rounding differs only in summation order.
void CpuBackend::attention(int layer, const Batch& batch, const std::vector<int>& row_seq,
                           const std::vector<int>& row_pos, const float* h, int T, float* out) {
  const Layer& L = layers_[layer];
  const Norms& N = norms_[layer];
  const int H = spec_.hidden_size, nh = spec_.num_attention_heads;
  const int nope = spec_.qk_nope_head_dim, rope = spec_.qk_rope_head_dim, vd = spec_.v_head_dim;
  const int qk = nope + rope, R = spec_.kv_lora_rank, D = spec_.kv_cache_dim();

  std::vector<float> q(size_t(T) * nh * qk);
  if (L.q_proj) {
    linear(pool_, *L.q_proj, h, H, T, q.data(), nh * qk);
  } else {
    const int qr = spec_.q_lora_rank;
    std::vector<float> qa(size_t(T) * qr);
    linear(pool_, *L.q_a, h, H, T, qa.data(), qr);
    for (int t = 0; t < T; ++t)
      rmsnorm(&qa[size_t(t) * qr], N.q_a.data(), qr, kLatentNormEps, &qa[size_t(t) * qr]);
    linear(pool_, *L.q_b, qa.data(), qr, T, q.data(), nh * qk);
  }
  std::vector<float> kva(size_t(T) * D);
  linear(pool_, *L.kv_a, h, H, T, kva.data(), D);
  // Cache entry: normalised latent | roped k_pe.
  for (int t = 0; t < T; ++t) {
    const SeqStep& s = batch.seqs[row_seq[t]];
    const int pos = row_pos[t];
    float* slot = kv_slot(layer, s.block_table[pos / kv_.block_size], pos % kv_.block_size);
    const float* src = &kva[size_t(t) * D];
    rmsnorm(src, N.kv_a.data(), R, kLatentNormEps, slot);
    std::memcpy(slot + R, src + R, rope * sizeof(float));
    rope_.apply(slot + R, pos);
    for (int hd = 0; hd < nh; ++hd) rope_.apply(&q[(size_t(t) * nh + hd) * qk + nope], pos);
  }

  const Tensor& kvb = *L.kv_b;  // rows: head h -> [h*(nope+vd), h*(nope+vd) + nope) = W_uk, then W_uv
  // 1. q_abs[t, h] = W_uk[h]^T q_nope[t, h]: heads in parallel, each kv_b row widened once per
  //    step and used for every token.
  std::vector<float> qabs(size_t(T) * nh * R, 0.0f), olat(size_t(T) * nh * R, 0.0f);
  pool_.parallel_for(nh, [&](int64_t h0, int64_t h1) {
    std::vector<float> w_uk(size_t(nope) * R);  // this head's W_uk, widened once (fits in L2)
    for (int64_t hd = h0; hd < h1; ++hd) {
      for (int i = 0; i < nope; ++i) cpu::dequant_row(kvb, hd * (nope + vd) + i, &w_uk[size_t(i) * R]);
      for (int t = 0; t < T; ++t) {
        const float* qh = &q[(size_t(t) * nh + hd) * qk];
        float* qa = &qabs[(size_t(t) * nh + hd) * R];
        for (int i = 0; i < nope; ++i) {
          const float qi = qh[i];
          const float* wr = &w_uk[size_t(i) * R];
          for (int c = 0; c < R; ++c) qa[c] += qi * wr[c];
        }
      }
    }
  });
  // 2. Softmax over the cached positions 0..pos and the attention-weighted latent, per (token, head).
  pool_.parallel_for(int64_t(T) * nh, [&](int64_t a, int64_t b) {
    std::vector<float> scores;
    for (int64_t job = a; job < b; ++job) {
      const int t = static_cast<int>(job / nh);
      const SeqStep& s = batch.seqs[row_seq[t]];
      const int pos = row_pos[t];
      const float* qh = &q[size_t(job) * qk];
      const float* qa = &qabs[size_t(job) * R];
      scores.resize(pos + 1);
      float mx = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* kvj = kv_slot(layer, s.block_table[j / kv_.block_size], j % kv_.block_size);
        float sc = (cpu::dot(qa, kvj, R) + cpu::dot(qh + nope, kvj + R, rope)) * scale_;
        scores[j] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0;
      for (int j = 0; j <= pos; ++j) sum += scores[j] = std::exp(scores[j] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      float* ol = &olat[size_t(job) * R];
      for (int j = 0; j <= pos; ++j) {
        const float* kvj = kv_slot(layer, s.block_table[j / kv_.block_size], j % kv_.block_size);
        const float p = scores[j] * inv;
        for (int c = 0; c < R; ++c) ol[c] += p * kvj[c];
      }
    }
  });
  // 3. v[t, h] = W_uv[h] . olat[t, h], again one widening per kv_b row.
  pool_.parallel_for(nh, [&](int64_t h0, int64_t h1) {
    std::vector<float> w_uv(size_t(vd) * R);
    for (int64_t hd = h0; hd < h1; ++hd) {
      for (int i = 0; i < vd; ++i) cpu::dequant_row(kvb, hd * (nope + vd) + nope + i, &w_uv[size_t(i) * R]);
      for (int t = 0; t < T; ++t) {
        const float* ol = &olat[(size_t(t) * nh + hd) * R];
        float* o = out + size_t(t) * nh * vd + size_t(hd) * vd;
        for (int i = 0; i < vd; ++i) o[i] = cpu::dot(&w_uv[size_t(i) * R], ol, R);
      }
    }
  });
}

std::vector<SeqResult> CpuBackend::execute(const Batch& batch) {
  const int H = spec_.hidden_size, V = spec_.vocab_size;
  validate_batch(batch, kv_, V, 0, "cpu backend");
  const size_t block_elems = size_t(kv_.block_size) * spec_.kv_cache_dim();
  for (auto [src, dst] : batch.block_copies) {
    for (int l = 0; l < spec_.num_hidden_layers; ++l)
      std::memcpy(kv_slot(l, dst, 0), kv_slot(l, src, 0), block_elems * sizeof(float));
  }

  std::vector<int> row_seq, row_pos;
  std::vector<int32_t> row_tok;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SeqStep& s = batch.seqs[i];
    for (size_t k = 0; k < s.tokens.size(); ++k) {
      row_seq.push_back(static_cast<int>(i));
      row_pos.push_back(s.start_pos + static_cast<int>(k));
      row_tok.push_back(s.tokens[k]);
    }
  }
  const int T = static_cast<int>(row_tok.size());
  std::vector<float> x(size_t(T) * H), h(size_t(T) * H), tmp(size_t(T) * H);
  for (int t = 0; t < T; ++t) cpu::dequant_row(*embed_, row_tok[t], &x[size_t(t) * H]);

  const int nh = spec_.num_attention_heads, vd = spec_.v_head_dim;
  std::vector<float> attn(size_t(T) * nh * vd);
  for (int l = 0; l < spec_.num_hidden_layers && T > 0; ++l) {
    const Layer& L = layers_[l];
    for (int t = 0; t < T; ++t)
      rmsnorm(&x[size_t(t) * H], norms_[l].input.data(), H, float(spec_.rms_norm_eps), &h[size_t(t) * H]);
    attention(l, batch, row_seq, row_pos, h.data(), T, attn.data());
    linear(pool_, *L.o_proj, attn.data(), nh * vd, T, tmp.data(), H);
    for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    for (int t = 0; t < T; ++t)
      rmsnorm(&x[size_t(t) * H], norms_[l].post.data(), H, float(spec_.rms_norm_eps), &h[size_t(t) * H]);
    if (L.moe) moe(l, h.data(), T, tmp.data());
    else mlp(L.dense, h.data(), T, tmp.data(), spec_.intermediate_size);
    for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
  }

  // Logits only for rows someone reads: every row of a teacher-forced step, the last of a sampled one.
  std::vector<int> need;
  std::vector<int> first_row(batch.seqs.size());
  for (size_t i = 0, r = 0; i < batch.seqs.size(); ++i) {
    const SeqStep& s = batch.seqs[i];
    first_row[i] = static_cast<int>(r);
    if (s.return_logits) for (size_t k = 0; k < s.tokens.size(); ++k) need.push_back(int(r + k));
    else if (s.sample) need.push_back(int(r + s.tokens.size() - 1));
    r += s.tokens.size();
  }
  const int NR = static_cast<int>(need.size());
  std::vector<float> fin(size_t(NR) * H), logits(size_t(NR) * V);
  for (int i = 0; i < NR; ++i)
    rmsnorm(&x[size_t(need[i]) * H], final_norm_.data(), H, float(spec_.rms_norm_eps), &fin[size_t(i) * H]);
  if (NR > 0) linear(pool_, *lm_head_, fin.data(), H, NR, logits.data(), V);

  std::vector<SeqResult> results(batch.seqs.size());
  int li = 0;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SeqStep& s = batch.seqs[i];
    const int n = static_cast<int>(s.tokens.size());
    const float* last = nullptr;
    if (s.return_logits && n > 0) {
      results[i].logits.assign(logits.begin() + size_t(li) * V, logits.begin() + size_t(li + n) * V);
      last = &logits[size_t(li + n - 1) * V];
      li += n;
    } else if (s.sample && n > 0) {
      last = &logits[size_t(li) * V];
      li += 1;
    }
    if (s.sample && last) results[i].token = sample_token(std::span<const float>(last, V), s.sampling);
  }
  return results;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const ModelSpec& spec, const Weights& weights, int threads) {
  return std::make_unique<CpuBackend>(spec, weights, threads, make_rope_table(spec));
}

}  // namespace rs
