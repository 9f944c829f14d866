#include "backend/cuda/forward_pass.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/mega_program.h"
#include "kernels/mega/decode_megakernel.h"
#include "common/error.h"
#include "kernels/common/env_int.h"
#include "kernels/ops/activation_params.h"
#include "kernels/ops/embed_params.h"
#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/lm_head_params.h"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/mla_v_up_o_params.h"
#include "kernels/ops/mla_prefill_params.h"
#include "kernels/ops/moe_decode_launch.h"
#include "kernels/ops/moe_router_params.h"
#include "kernels/ops/qkv_absorb_params.h"
#include "kernels/ops/rmsnorm_params.h"

namespace rs::cuda {

namespace {
// HF builds q_a_layernorm and kv_a_layernorm with the RMSNorm default eps, not rms_norm_eps
// (the CPU reference does the same).
constexpr float kLatentNormEps = 1e-6f;

int round_up_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// RS_ROUTER_COMPACT=0 starts a process whose routers take the general selection path everywhere
// (A/B runs; the compact one gives the same bits where it applies).
bool compact_router_selection() {
  static const bool on = kern::env_int("RS_ROUTER_COMPACT", 1, 0, 1) == 1;
  return on;
}

// One pure-decode token whose q/kv launch is not the clustered one (FP8 weights, or a launch the
// clustered kernel refuses): the absorb launch leaves the newest cache row to the decode attention,
// which forms it in a split of its own, as after the clustered launch. RS_ROW_SPLIT=0: the absorb
// launch writes the row (A/B runs).
bool row_split_after_absorb() {
  static const bool on = kern::env_int("RS_ROW_SPLIT", 1, 0, 1) == 1;
  return on;
}
}  // namespace

struct OpScope {
  OpProfiler* p;
  cudaStream_t s;
  OpScope(const ForwardPass* fp, const char* name, cudaStream_t st) : p(fp->prof_.get()), s(st) {
    if (p) p->begin(name, s);
  }
  ~OpScope() {
    if (p) p->end(s);
  }
};
#define RS_OP_CAT2(a, b) a##b
#define RS_OP_CAT(a, b) RS_OP_CAT2(a, b)
#define RS_OP(name) OpScope RS_OP_CAT(op_scope_, __LINE__)(this, name, stream)

void StepPlan::pad_decode_to(int bucket, int scratch_block, int block_size) {
  while (static_cast<int>(tokens.size()) < bucket) {
    tokens.push_back(0);
    positions.push_back(0);
    slots.push_back(scratch_block * block_size);
    seq_lens.push_back(1);
    block_tables.push_back({scratch_block});
  }
  decode_rows = bucket;
  logit_rows.clear();
  for (int i = 0; i < bucket; ++i) logit_rows.push_back(i);
}

ForwardPass::ForwardPass(const ModelSpec& spec, const DeviceWeights& w, const RopeSpec& rope, int num_sms)
    : spec_(spec), w_(w), rope_(rope), num_sms_(num_sms) {
  max_inter_ = std::max<int64_t>(spec.intermediate_size,
                                 int64_t(spec.moe_intermediate_size) * std::max(1, spec.n_shared_experts));
  const char* prof = std::getenv("RS_CUDA_PROFILE");
  if (prof && prof[0] == '1') prof_ = std::make_unique<OpProfiler>();
}

ForwardPass::~ForwardPass() {
  for (void* h : host_meta_)
    if (h) cudaFreeHost(h);
}

void ForwardPass::set_kv(__nv_bfloat16* cache, int64_t layer_stride, int block_size, int bt_width) {
  drop_megakernel();
  cache_ = cache;
  layer_stride_ = layer_stride;
  block_size_ = block_size;
  bt_width_ = bt_width;
  cap_.decode_rows = 0;  // the block-table buffer depends on bt_width: reallocate on next use
}

// The decode attention kernel runs two blocks per SM (~96 KB of shared memory each at kv_dim 576):
// as many KV splits as fit in one wave of 2 x SMs blocks, so no second, partly empty wave (a split
// is at least one 32-token tile: at batch 1 and 1K context 32 splits work, the rest exit at once).
int ForwardPass::decode_splits(int rows) const {
  const int head_groups = (spec_.num_attention_heads + 15) / 16;
  const int want = (2 * num_sms_) / (rows * head_groups);
  return std::clamp(want, 1, kMlaDecodeMaxSplits);
}

const float* ForwardPass::route_margins(int layer) const {
  return route_margins_.get<float>() + size_t(layer) * cap_.tokens;
}

const int32_t* ForwardPass::topk_ids(int layer) const {
  return topk_ids_.get<int32_t>() + size_t(layer) * cap_.tokens * spec_.num_experts_per_tok;
}

void ForwardPass::ensure_capacity(const Capacity& want, cudaStream_t stream,
                                  const std::function<void()>& on_realloc) {
  if (want.tokens <= cap_.tokens && want.decode_rows <= cap_.decode_rows && want.logit_rows <= cap_.logit_rows &&
      want.ctx <= cap_.ctx)
    return;
  RS_CUDA(cudaStreamSynchronize(stream));
  on_realloc();
  drop_megakernel();
  Capacity c;
  c.tokens = std::max(cap_.tokens, round_up_pow2(std::max(want.tokens, 16)));
  c.decode_rows = std::max(cap_.decode_rows, round_up_pow2(std::max(want.decode_rows, 16)));
  c.logit_rows = std::max(cap_.logit_rows, round_up_pow2(std::max(want.logit_rows, 16)));
  c.ctx = std::max(cap_.ctx, want.ctx > 0 ? round_up_pow2(want.ctx) : 0);
  const ModelSpec& s = spec_;
  const size_t N = c.tokens, H = s.hidden_size, nh = s.num_attention_heads;
  const size_t qk = s.qk_head_dim(), kvd = s.kv_cache_dim(), R = s.kv_lora_rank, vd = s.v_head_dim;
  const size_t K = std::max(1, s.num_experts_per_tok);
  residual_.reset(N * H * 4, "residual");
  xn_.reset(N * H * 2, "hidden");
  qa_.reset(N * std::max(1, s.q_lora_rank) * 2, "q_a");
  q_.reset(N * nh * qk * 2, "q");
  kva_.reset(N * kvd * 2, "kv_a");
  olat_.reset(size_t(c.decode_rows) * nh * R * 2, "latent attention output");
  qabs_.reset(size_t(c.decode_rows) * nh * kvd * 2, "absorbed q");
  attn_v_.reset(N * nh * vd * 2, "attention output");
  attn_out_.reset(N * H * 2, "o_proj output");
  g_.reset(N * max_inter_ * 2, "mlp gate");
  u_.reset(N * max_inter_ * 2, "mlp up");
  act_.reset(N * max_inter_ * 2, "mlp act");
  mlp_out_.reset(N * H * 2, "mlp output");
  shared_out_.reset(N * H * 2, "shared expert output");
  topk_ids_.reset(size_t(s.num_hidden_layers) * N * K * 4, "routing ids");
  topk_w_.reset(N * K * 4, "routing weights");
  router_logits_.reset(N * std::max(1, s.n_routed_experts) * 4, "router logits");
  route_margins_.reset(size_t(s.num_hidden_layers) * N * 4, "routing margins");
  router_counters_.reset(size_t(moe_router_fused_counters(int(N))) * 4, "router chunk counters");
  RS_CUDA(cudaMemsetAsync(router_counters_.get(), 0, router_counters_.bytes(), stream));
  size_t max_parts = 0;
  for (int r = 1; r <= c.decode_rows; ++r) max_parts = std::max(max_parts, size_t(r) * decode_splits(r));
  part_o_.reset(max_parts * nh * R * 4, "attention partials");
  part_lse_.reset(max_parts * nh * 4, "attention partial lse");
  vupo_partials_.reset(nh * size_t(kVUpOHidden) * 4, "attention output head partials");
  vupo_counters_.reset(kVUpOCluster * 4, "attention output chunk counters");
  RS_CUDA(cudaMemsetAsync(vupo_counters_.get(), 0, vupo_counters_.bytes(), stream));
  attn_fixed_.reset(H * 8, "attention output fixed-point head sums");
  RS_CUDA(cudaMemsetAsync(attn_fixed_.get(), 0, attn_fixed_.bytes(), stream));
  if (c.ctx > 0) {
    lat_.reset(size_t(c.ctx) * R * 2, "prefill latents");
    pe_.reset(size_t(c.ctx) * s.qk_rope_head_dim * 2, "prefill rope keys");
    kvexp_.reset(size_t(c.ctx) * nh * (s.qk_nope_head_dim + vd) * 2, "prefill keys/values");
  }
  logits_.reset(size_t(c.logit_rows) * s.vocab_size * 4, "logits");
  // Matmul workspaces for the largest m any call sees (prefill's kv_b_proj runs over the context).
  int64_t max_rows = std::max<int64_t>({int64_t(H), int64_t(nh * qk), int64_t(kvd), int64_t(nh * (s.qk_nope_head_dim + vd)),
                                         max_inter_, int64_t(std::max(1, s.q_lora_rank))});
  int64_t max_cols = std::max<int64_t>({int64_t(H), int64_t(R), int64_t(nh * vd), max_inter_,
                                         int64_t(std::max(1, s.q_lora_rank))});
  const int m_max = std::max(c.tokens, c.ctx);
  const size_t lw = linear_workspace_bytes(m_max, max_rows, max_cols);
  linear_ws_.reset(lw, "linear workspace");
  size_t mw = 0;
  for (const DeviceLayer& L : w_.layers)
    if (L.moe) mw = std::max(mw, moe_workspace_bytes(c.tokens, s.num_experts_per_tok, L.experts));
  moe_ws_.reset(mw, "moe workspace");
  // Metadata in one buffer: tokens, positions, slots [N]; seq lens [decode]; logit rows; the
  // decode rows' block tables [decode][bt_width], last, so that upload() can send a small step's
  // metadata in one copy.
  const size_t W = std::max(1, bt_width_);
  meta_.reset((3 * N + c.decode_rows + c.logit_rows + size_t(c.decode_rows) * W) * 4, "step metadata");
  tokens_d_ = meta_.get<int32_t>();
  positions_d_ = tokens_d_ + N;
  slots_d_ = positions_d_ + N;
  seq_lens_d_ = slots_d_ + N;
  logit_rows_d_ = seq_lens_d_ + c.decode_rows;
  bt_d_ = logit_rows_d_ + c.logit_rows;
  chained_ids_.reset(std::max<size_t>(N, size_t(c.logit_rows)) * 4, "chained token ids");
  resolved_ids_.reset(N * 4, "resolved token ids");
  cap_ = c;
}

namespace {
size_t g_one_copy_pad = size_t(64) << 10;  // set_cuda_upload_one_copy_pad
}  // namespace

void ForwardPass::upload(const StepPlan& plan, cudaStream_t stream) {
  const int n = static_cast<int>(plan.tokens.size()), nd = plan.decode_rows;
  const int nl = static_cast<int>(plan.logit_rows.size());
  const size_t N = cap_.tokens, W = std::max(1, bt_width_);
  int w_step = 1;
  for (auto& bt : plan.block_tables) w_step = std::max<int>(w_step, bt.size());
  size_t prefill_blocks = 0;
  for (auto& p : plan.prefills) prefill_blocks += p.blocks.size();
  // The host staging mirrors meta_'s layout, so the step's metadata goes up in one copy: from the
  // previous step's sync to this copy's end the GPU is idle and every host call is on that path
  // (they were six). Block-table rows are padded to the device pitch for that; when the padding
  // of many rows would be large they go up in a second, strided copy instead.
  if (nd > 0 && size_t(w_step) > W)  // rows at pitch W: a longer one would run into the next (and past meta_)
    throw Error("cuda upload: a block table of " + std::to_string(w_step) + " blocks, the device table holds " +
                std::to_string(W));
  const size_t bt_off = size_t(bt_d_ - tokens_d_);
  const bool one_copy = nd <= 1 || size_t(nd - 1) * W * 4 <= g_one_copy_pad;
  const size_t bt_words = nd == 0 ? 0 : one_copy ? size_t(nd - 1) * W + w_step : size_t(nd) * w_step;
  const size_t words = bt_off + bt_words + prefill_blocks;
  meta_slot_ ^= 1;
  void*& staging = host_meta_[meta_slot_];
  size_t& staging_bytes = host_meta_bytes_[meta_slot_];
  if (words * 4 > staging_bytes) {
    if (staging) {
      RS_CUDA(cudaStreamSynchronize(stream));  // no copy from it may still be pending
      cudaFreeHost(staging);
    }
    staging_bytes = std::max<size_t>(words * 4 * 2, 1 << 16);
    RS_CUDA(cudaMallocHost(&staging, staging_bytes));
  }
  int32_t* h = static_cast<int32_t*>(staging);
  std::memcpy(h, plan.tokens.data(), n * 4);
  std::memcpy(h + N, plan.positions.data(), n * 4);
  std::memcpy(h + 2 * N, plan.slots.data(), n * 4);
  if (nd > 0) std::memcpy(h + (seq_lens_d_ - tokens_d_), plan.seq_lens.data(), nd * 4);
  if (nl > 0) std::memcpy(h + (logit_rows_d_ - tokens_d_), plan.logit_rows.data(), nl * 4);
  const size_t pitch = one_copy ? W : size_t(w_step);
  for (int r = 0; r < nd; ++r) {
    int32_t* row = h + bt_off + size_t(r) * pitch;
    std::memset(row, 0, size_t(w_step) * 4);
    std::memcpy(row, plan.block_tables[r].data(), plan.block_tables[r].size() * 4);
  }
  const size_t first = one_copy ? bt_off + bt_words : bt_off;
  RS_CUDA(cudaMemcpyAsync(tokens_d_, h, first * 4, cudaMemcpyHostToDevice, stream));
  if (!one_copy)
    RS_CUDA(cudaMemcpy2DAsync(bt_d_, W * 4, h + bt_off, size_t(w_step) * 4, size_t(w_step) * 4, nd,
                              cudaMemcpyHostToDevice, stream));
  int32_t* p = h + bt_off + bt_words;
  prefills_.clear();
  if (prefill_blocks > 0) {
    if (prefill_bt_.bytes() < prefill_blocks * 4) prefill_bt_.reset(prefill_blocks * 8, "prefill block tables");
    size_t off = 0;
    for (auto& ps : plan.prefills) {
      std::memcpy(p + off, ps.blocks.data(), ps.blocks.size() * 4);
      prefills_.push_back(Prefill{ps.row0, ps.T, ps.start, prefill_bt_.get<int32_t>() + off});
      off += ps.blocks.size();
    }
    RS_CUDA(cudaMemcpyAsync(prefill_bt_.get(), p, prefill_blocks * 4, cudaMemcpyHostToDevice, stream));
  }
}

namespace {
// The megakernel is opt-in (RS_MEGAKERNEL=1) while it is slower than the per-op CUDA graph
// (docs/perf/cuda.md: 3.2 against 2.2 ms a V2-Lite step on an H200); set_megakernel() switches
// at run time.
bool megakernel_default() {
  const char* v = std::getenv("RS_MEGAKERNEL");
  return v && v[0] == '1';
}
bool g_megakernel = megakernel_default();
// RS_MEGA_PROFILE=1: per-instruction timestamps of the megakernel (bench forward prints them).
bool mega_profile() {
  const char* v = std::getenv("RS_MEGA_PROFILE");
  return v && v[0] == '1';
}
}  // namespace

void set_megakernel(bool on) { g_megakernel = on; }
bool megakernel_enabled() { return g_megakernel; }

void ForwardPass::linear_or_record(const DeviceMatrix& w, const __nv_bfloat16* x, int m, __nv_bfloat16* y,
                                   const LinearWorkspace& ws, cudaStream_t stream) {
  if (rec_) {
    const LinearJob job{w, y};
    rec_->gemv(&job, 1, x, m, nullptr);
  } else {
    linear(w, x, m, y, ws, stream);
  }
}

// Records the one-token step (forward() with rec_ set launches nothing) and uploads it. Not
// while the stream is being captured: the upload synchronises. A step the megakernel cannot run
// keeps the per-op kernels, with the reason said once.
void ForwardPass::build_megakernel(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return;
  }
  mega_tried_ = true;
  try {
    auto prog = std::make_unique<MegaProgram>(num_sms_ * kern::mega::kCtasPerSm);
    rec_ = prog.get();
    forward(1, 1, {}, 1, nullptr, stream);
    rec_ = nullptr;
    const int experts = std::max(1, spec_.n_routed_experts);
    prog->finish(mega_profile(), spec_.kv_cache_dim(), experts, stream);
    mega_ = std::move(prog);
  } catch (const MegaUnsupported& e) {
    rec_ = nullptr;
    mega_off_reason_ = e.what();
    std::fprintf(stderr, "rackserve: batch-1 decode on per-op kernels (%s)\n", e.what());
  } catch (...) {
    rec_ = nullptr;
    throw;
  }
}

std::string ForwardPass::megakernel_profile() const { return mega_ ? mega_->profile_table() : std::string(); }

void ForwardPass::drop_megakernel() {
  mega_.reset();
  mega_tried_ = false;
}

void ForwardPass::run(int rows, cudaStream_t stream) {
  if (rows == 1 && g_megakernel && !prof_) {
    if (!mega_ && !mega_tried_) build_megakernel(stream);
    if (mega_) {
      mega_->launch(stream);
      RS_CUDA(cudaGetLastError());
      return;
    }
  }
  forward(rows, rows, {}, rows, nullptr, stream);
}

void ForwardPass::run_eager(const StepPlan& plan, cudaStream_t stream) {
  forward(static_cast<int>(plan.tokens.size()), plan.decode_rows, prefills_, static_cast<int>(plan.logit_rows.size()),
          logit_rows_d_, stream);
}

void ForwardPass::copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& pairs, cudaStream_t stream) {
  std::vector<int32_t> flat;
  for (auto [a, b] : pairs) {
    flat.push_back(a);
    flat.push_back(b);
  }
  if (pairs_.bytes() < flat.size() * 4) pairs_.reset(flat.size() * 8, "block copy list");
  RS_CUDA(cudaMemcpyAsync(pairs_.get(), flat.data(), flat.size() * 4, cudaMemcpyHostToDevice, stream));
  KvCopyParams p;
  p.cache = cache_;
  p.pairs = pairs_.get<int32_t>();
  p.count = static_cast<int>(pairs.size());
  p.layers = spec_.num_hidden_layers;
  p.layer_stride = layer_stride_;
  p.block_elems = int64_t(block_size_) * spec_.kv_cache_dim();
  launch_kv_copy(p, stream);
  RS_CUDA(cudaStreamSynchronize(stream));  // `flat` is pageable host memory
}

void ForwardPass::dense_mlp(const DeviceMlp& m, int n, int64_t inter, __nv_bfloat16* out, cudaStream_t stream,
                            const AddRmsNormParams* norm) {
  const LinearWorkspace lws{linear_ws_.get(), linear_ws_.bytes()};
  {
    // gate and up read the same x: one grouped launch at GEMV sizes, the norm as its prologue
    // (H200, V2-Lite's dense layer 0 at b1: norm, gate and up were 2.6 + 15.4 + 13.1 us launches).
    RS_OP(norm ? "add+rmsnorm + mlp gate+up (grouped)" : "mlp gate+up (grouped)");
    const LinearJob gu[2] = {{m.gate, g_.get<__nv_bfloat16>()}, {m.up, u_.get<__nv_bfloat16>()}};
    if (rec_) {
      if (norm) rec_->add_rmsnorm(*norm);
      rec_->gemv(gu, 2, xn_.get<__nv_bfloat16>(), n, nullptr);
    } else {
      linear_group(gu, 2, xn_.get<__nv_bfloat16>(), n, lws, stream, norm);
    }
  }
  SiluMulParams a;
  a.gate = g_.get<__nv_bfloat16>();
  a.up = u_.get<__nv_bfloat16>();
  a.out = act_.get<__nv_bfloat16>();
  a.count = int64_t(n) * inter;
  { RS_OP("silu_mul"); rec_ ? rec_->silu_mul(a) : launch_silu_mul(a, stream); }
  RS_OP("mlp down (linear)");
  linear_or_record(m.down, act_.get<__nv_bfloat16>(), n, out, lws, stream);
}

KvWriteParams ForwardPass::kv_write_params(const DeviceLayer& L, __nv_bfloat16* cache, int n) const {
  KvWriteParams kw;
  kw.kv_a = kva_.get<__nv_bfloat16>();
  kw.kv_a_stride = spec_.kv_cache_dim();
  kw.norm_weight = L.kv_a_norm;
  kw.eps = kLatentNormEps;
  kw.positions = positions_d_;
  kw.slots = slots_d_;
  kw.cache = cache;
  kw.n = n;
  kw.kv_lora = spec_.kv_lora_rank;
  kw.rope = rope_;
  return kw;
}

MlaAbsorbQParams ForwardPass::absorb_params(const DeviceLayer& L, int nd, bool rotate) const {
  MlaAbsorbQParams ab;
  if (rotate) {  // q's rope part rotated in the same launch, at the step's positions
    ab.positions = positions_d_;
    ab.rotate = rope_;
  }
  ab.q = q_.get<__nv_bfloat16>();
  ab.kv_b = L.kv_b_bf16;
  ab.out = qabs_.get<__nv_bfloat16>();
  ab.n = nd;
  ab.heads = spec_.num_attention_heads;
  ab.nope = spec_.qk_nope_head_dim;
  ab.rope = spec_.qk_rope_head_dim;
  ab.vdim = spec_.v_head_dim;
  ab.kv_lora = spec_.kv_lora_rank;
  return ab;
}

bool ForwardPass::qkv_absorb(const DeviceLayer& L, int n, int nd, const std::vector<Prefill>& prefills,
                             const AddRmsNormParams* norm, cudaStream_t stream) {
  // One pure-decode token with its input norm, where the grouped q/kv launch would take the
  // streaming GEMV (RS_GEMV_STREAM's "group"); the launcher refuses the rest (FP8, head shapes).
  if (rec_ || n != 1 || nd != 1 || !prefills.empty() || !norm || !gemv_norm_prologue_ok(*norm, 1) ||
      !kern::gemv_stream_on(kern::kGemvStreamGroup, 1, false) || norm->out != xn_.get<__nv_bfloat16>() ||
      norm->hidden != L.q_proj.cols)
    return false;
  QkvAbsorbParams p;
  p.gemv.w[0] = L.q_proj;
  p.gemv.w[1] = L.kv_a;
  p.gemv.y[0] = q_.get<__nv_bfloat16>();
  p.gemv.y[1] = kva_.get<__nv_bfloat16>();
  p.gemv.jobs = 2;
  p.gemv.x = xn_.get<__nv_bfloat16>();
  p.gemv.m = 1;
  set_gemv_norm_prologue(p.gemv, *norm);
  p.absorb = absorb_params(L, 1, true);
  RS_OP("add+rmsnorm + q_proj+kv_a + absorb (clusters)");
  return launch_qkv_absorb(p, num_sms_, stream);
}

void ForwardPass::attention(int layer, int n, int nd, const std::vector<Prefill>& prefills, cudaStream_t stream) {
  attn_fixed_pending_ = false;  // set below only by this layer's fixed-point head sum
  const ModelSpec& s = spec_;
  const DeviceLayer& L = w_.layers[layer];
  const LinearWorkspace lws{linear_ws_.get(), linear_ws_.bytes()};
  const int nh = s.num_attention_heads, nope = s.qk_nope_head_dim, rope = s.qk_rope_head_dim, vd = s.v_head_dim;
  const int R = s.kv_lora_rank, kvd = s.kv_cache_dim(), qk = s.qk_head_dim();
  __nv_bfloat16* xn = xn_.get<__nv_bfloat16>();
  __nv_bfloat16* q = q_.get<__nv_bfloat16>();
  // q_proj (or q_a) and kv_a read the same normed hidden state: one grouped GEMV launch at
  // decode sizes (linear_group), each weight streamed in place.
  // The layer's input add + RMSNorm (input_norm_, producing xn) rides along: the launch's
  // prologue for one or two rows, its own kernel otherwise.
  const AddRmsNormParams* norm = input_norm_;
  input_norm_ = nullptr;
  bool qkv_absorbed = false;  // q/kv GEMV, absorption and q's rope in one launch (qkv_absorb)
  if (s.q_lora_rank > 0) {
    RS_OP("add+rmsnorm + q_a+kv_a (grouped) + norm + q_b");
    const LinearJob qkv[2] = {{L.q_a, qa_.get<__nv_bfloat16>()}, {L.kv_a, kva_.get<__nv_bfloat16>()}};
    if (rec_) rec_->gemv(qkv, 2, xn, n, norm);
    else linear_group(qkv, 2, xn, n, lws, stream, norm);
    RmsNormRowsParams nr;
    nr.in = nr.out = qa_.get<__nv_bfloat16>();
    nr.weight = L.q_a_norm;
    nr.n = n;
    nr.width = nr.in_stride = nr.out_stride = s.q_lora_rank;
    nr.eps = kLatentNormEps;
    rec_ ? rec_->rmsnorm_rows(nr) : launch_rmsnorm_rows(nr, stream);
    linear_or_record(L.q_b, qa_.get<__nv_bfloat16>(), n, q, lws, stream);
  } else {
    qkv_absorbed = qkv_absorb(L, n, nd, prefills, norm, stream);
    if (!qkv_absorbed) {
      RS_OP("add+rmsnorm + q_proj+kv_a (grouped)");
      const LinearJob qkv[2] = {{L.q_proj, q}, {L.kv_a, kva_.get<__nv_bfloat16>()}};
      if (rec_) rec_->gemv(qkv, 2, xn, n, norm);
      else linear_group(qkv, 2, xn, n, lws, stream, norm);
    }
  }
  __nv_bfloat16* cache = cache_ + layer * layer_stride_;
  const KvWriteParams kw = kv_write_params(L, cache, n);
  // A pure decode step rotates q inside the absorb kernel and writes the cache rows from extra
  // blocks of the same launch: kv_write, rope_q and absorb become one kernel per layer.
  const bool rope_in_absorb = nd > 0 && nd == n && prefills.empty();
  if (rec_ && !rope_in_absorb) throw MegaUnsupported("a step that is not pure decode");
  if (!rope_in_absorb) { RS_OP("kv_write"); launch_kv_write(kw, stream); }
  RopeQParams rq;
  rq.q = q;
  rq.positions = positions_d_;
  rq.n = n;
  rq.heads = nh;
  rq.head_dim = qk;
  rq.rope = rope_;
  if (!rope_in_absorb) { RS_OP("rope_q"); launch_rope_q(rq, stream); }
  const float scale = static_cast<float>(s.softmax_scale());
  // The attention forms the newest cache row (a split of its own) after the clustered q/kv launch,
  // and after the absorb launch for one token where row_split_after_absorb() says so (a pure
  // decode step of one row: nd == 1 with rope_in_absorb means n == 1).
  const bool row_split = qkv_absorbed || (!rec_ && rope_in_absorb && nd == 1 && row_split_after_absorb());
  if (nd > 0) {  // absorbed MQA over the latent cache
    if (!qkv_absorbed) {  // (else the q/kv launch absorbed q and the attention forms the cache row)
      const MlaAbsorbQParams ab = absorb_params(L, nd, rope_in_absorb);
      if (row_split) {
        RS_OP("mla absorb q + rope");
        launch_mla_absorb_q(ab, stream);
      } else if (rope_in_absorb) {
        RS_OP("mla absorb q + rope + kv_write");
        rec_ ? rec_->absorb_kv(ab, kw) : launch_mla_absorb_q_kv_write(ab, kw, stream);
      } else {
        RS_OP("mla absorb q");
        launch_mla_absorb_q(ab, stream);
      }
    }
    MlaDecodeParams dp;
    dp.q = qabs_.get<__nv_bfloat16>();
    dp.cache = cache;
    dp.block_tables = bt_d_;
    dp.bt_stride = bt_width_;
    dp.block_size = block_size_;
    dp.seq_lens = seq_lens_d_;
    dp.part_o = part_o_.get<float>();
    dp.part_lse = part_lse_.get<float>();
    const bool merge_in_v_up = mla_v_up_merges_splits(nd);
    dp.out = merge_in_v_up ? nullptr : olat_.get<__nv_bfloat16>();  // nullptr: no combine kernel
    dp.batch = nd;
    dp.heads = nh;
    // (The newest row left to the attention takes a split of its own, so two at least.)
    dp.splits = row_split ? std::max(2, decode_splits(nd)) : decode_splits(nd);
    dp.kv_lora = R;
    dp.kv_dim = kvd;
    dp.scale = scale;
    {
      RS_OP("mla decode attention");
      rec_ ? rec_->attention(dp) : launch_mla_decode(dp, stream, row_split ? &kw : nullptr);
    }
    MlaVUpParams vu;
    vu.o_latent = olat_.get<__nv_bfloat16>();
    vu.kv_b = L.kv_b_bf16;
    vu.out = attn_v_.get<__nv_bfloat16>();
    vu.n = nd;
    vu.heads = nh;
    vu.nope = nope;
    vu.vdim = vd;
    vu.kv_lora = R;
    if (merge_in_v_up) {
      vu.part_o = dp.part_o;
      vu.part_lse = dp.part_lse;
      vu.splits = dp.splits;
    }
    // One token: merge, W_UV and o_proj as one launch where the shapes allow (mla_v_up_o.cuh).
    if (!rec_ && n == 1 && nd == 1 && prefills.empty() && merge_in_v_up) {
      MlaVUpOParams vo{vu, L.o_proj, attn_out_.get<__nv_bfloat16>(), vupo_partials_.get<float>(),
                       vupo_counters_.get<int>()};
      if (attn_fixed_sum(layer, n)) vo.fixed = attn_fixed_.get<unsigned long long>();
      if (mla_v_up_o_supported(vo)) {
        RS_OP(vo.fixed ? "mla v up + split merge + o_proj (fixed-point head sum)" : "mla v up + split merge + o_proj");
        launch_mla_v_up_o(vo, stream);
        attn_fixed_pending_ = vo.fixed != nullptr;
        return;
      }
    }
    { RS_OP(merge_in_v_up ? "mla v up + split merge" : "mla v up"); rec_ ? rec_->v_up(vu) : launch_mla_v_up(vu, stream); }
  }
  for (const Prefill& pf : prefills) {  // expanded form over the cached prefix and the chunk
    const int len = pf.start + pf.T;
    KvGatherParams g;
    g.cache = cache;
    g.block_table = pf.blocks;
    g.block_size = block_size_;
    g.len = len;
    g.kv_lora = R;
    g.rope = rope;
    g.latent = lat_.get<__nv_bfloat16>();
    g.pe = pe_.get<__nv_bfloat16>();
    { RS_OP("kv gather"); launch_kv_gather(g, stream); }
    {
      RS_OP("kv_b expand (linear)");
      linear(L.kv_b, lat_.get<__nv_bfloat16>(), len, kvexp_.get<__nv_bfloat16>(), lws, stream);
    }
    MlaPrefillParams pp;
    pp.q = q + size_t(pf.row0) * nh * qk;
    pp.kv = kvexp_.get<__nv_bfloat16>();
    pp.kpe = pe_.get<__nv_bfloat16>();
    pp.out = attn_v_.get<__nv_bfloat16>() + size_t(pf.row0) * nh * vd;
    pp.T = pf.T;
    pp.start = pf.start;
    pp.heads = nh;
    pp.nope = nope;
    pp.rope = rope;
    pp.vdim = vd;
    pp.scale = scale;
    { RS_OP("mla prefill attention"); launch_mla_prefill(pp, stream); }
  }
  RS_OP("o_proj (linear)");
  linear_or_record(L.o_proj, attn_v_.get<__nv_bfloat16>(), n, attn_out_.get<__nv_bfloat16>(), lws, stream);
}

// Small decode batches fold the post-attention add + RMSNorm, the router logits and the selection
// into one launch. Above kRouterNormMaxTokens rows the two separate kernels stay: on the H200 the
// fused router (without the norm) made the batch-64 step 1.4 ms slower (14.86 vs 13.44 ms), while
// at batch 1 the fusions saved 0.31 ms (docs/perf/cuda.md).
bool ForwardPass::router_takes_norm(int layer, int n) const {
  const ModelSpec& s = spec_;
  return w_.layers[layer].moe && n <= kRouterNormMaxTokens &&
         moe_router_fused_fits(n, s.hidden_size, s.n_routed_experts, s.n_group, s.num_experts_per_tok);
}

MoeExperts ForwardPass::layer_experts(int layer, int n) const {
  const ModelSpec& s = spec_;
  const DeviceLayer& L = w_.layers[layer];
  // Decode sizes: the shared experts run inside the routed-expert kernels (one gate_up and one
  // down launch per layer, linear.h moe_can_fuse_shared); otherwise as a dense MLP (mlp()).
  MoeExperts ex = L.experts;
  if (L.has_shared) {
    ex.n_shared = s.n_shared_experts;
    ex.shared_gate = L.shared.gate;
    ex.shared_up = L.shared.up;
    ex.shared_down = L.shared.down;
    if (!moe_can_fuse_shared(ex, n)) ex.n_shared = 0;
  }
  return ex;
}

// The 8-block cluster router (1-2 tokens) where the step gains from it (H200, V2-Lite,
// docs/perf/cuda.md "Seventh session"): before one token's streamed gate_up, whose 216 KB
// blocks cannot share an SM with the 64-block router's (bf16 2.16 against 2.26 ms a step),
// and with FP8 experts (b1 with the register gate_up: 1.975 against 2.018 ms). Before bf16's
// register gate_up it lost (2.230 against 2.214 ms).
bool ForwardPass::router_cluster_launch(const MoeExperts& ex, int n) const {
  return ex.type == WeightType::FP8_E4M3_BLOCK || kern::expert_stream_takes(ex, n, spec_.num_experts_per_tok);
}

// One token whose router takes the post-attention norm on the cluster kernel: the attention
// output's sum over heads needs no last block (mla_v_up_o.cuh step 5).
bool ForwardPass::attn_fixed_sum(int layer, int n) const {
  const ModelSpec& s = spec_;
  return mla_v_up_o_fixed_sum_on() && n == 1 && !rec_ && w_.layers[layer].moe && router_takes_norm(layer, n) &&
         router_cluster_launch(layer_experts(layer, n), n) &&
         moe_router_cluster_takes(n, s.hidden_size, s.n_routed_experts, s.n_group, s.num_experts_per_tok);
}

void ForwardPass::mlp(int layer, int n, cudaStream_t stream, const __nv_bfloat16** d0, const __nv_bfloat16** d1,
                      const __nv_bfloat16* attn_delta, const AddRmsNormParams* dense_norm) {
  const ModelSpec& s = spec_;
  const DeviceLayer& L = w_.layers[layer];
  if (!L.moe) {
    dense_mlp(L.dense, n, s.intermediate_size, mlp_out_.get<__nv_bfloat16>(), stream, dense_norm);
    *d0 = mlp_out_.get<__nv_bfloat16>();
    *d1 = nullptr;
    return;
  }
  const MoeExperts ex = layer_experts(layer, n);
  // This layer's attention output as fixed-point sums (attention() set it): read by the cluster
  // router, which attn_fixed_sum() made sure is the launch below.
  const bool fixed = std::exchange(attn_fixed_pending_, false);
  // With attn_delta set, xn_ holds this layer's post-attention norm only once the fused router
  // below has run: everything that reads xn_ (experts, shared experts) must be launched after it.
  LmHeadParams lg;  // router logits: fp32 GEMV over the bf16 router weight
  lg.x = xn_.get<__nv_bfloat16>();
  lg.w = L.router;
  lg.logits = router_logits_.get<float>();
  lg.n = n;
  lg.hidden = s.hidden_size;
  lg.vocab = s.n_routed_experts;
  MoeRouterParams r;
  r.logits = router_logits_.get<float>();
  r.bias = L.router_bias;
  r.n = n;
  r.experts = s.n_routed_experts;
  r.top_k = s.num_experts_per_tok;
  r.n_group = s.n_group;
  r.topk_group = s.topk_group;
  r.scoring = s.scoring_func == ScoringFunc::Softmax ? RouterScoring::Softmax : RouterScoring::Sigmoid;
  r.method = s.topk_method == TopkMethod::Greedy ? RouterTopk::Greedy
             : s.topk_method == TopkMethod::GroupLimitedGreedy ? RouterTopk::GroupLimitedGreedy
                                                                : RouterTopk::NoauxTc;
  const bool v3 = s.model_type == ModelType::DeepseekV3;
  r.normalize = v3 ? s.norm_topk_prob : (s.norm_topk_prob && s.num_experts_per_tok > 1);
  r.scale_after_normalize = v3;
  r.routed_scaling = static_cast<float>(s.routed_scaling_factor);
  int32_t* ids = const_cast<int32_t*>(topk_ids(layer));
  r.topk_ids = ids;
  r.topk_weights = topk_w_.get<float>();
  r.margins = record_margins_ ? route_margins_.get<float>() + size_t(layer) * cap_.tokens : nullptr;
  r.compact_select = compact_router_selection();
  const MoeWorkspace mws{moe_ws_.get(), moe_ws_.bytes()};
  RouterNormIn nin;
  if (attn_delta) {
    nin.residual = residual_.get<float>();
    nin.delta = attn_delta;
    nin.weight = L.post_norm;
    nin.out = xn_.get<__nv_bfloat16>();
    nin.eps = static_cast<float>(s.rms_norm_eps);
    if (fixed) {
      nin.delta_fixed = attn_fixed_.get<unsigned long long>();
      nin.delta_out = attn_out_.get<__nv_bfloat16>();  // what `pending` points at (forward())
    }
  }
  // One token: the router inside the experts' streamed launch where that is switched on and takes
  // them (kernels/ops/expert_stream_route.cuh, RS_ROUTE_IN_EXPERTS; off by default: behind the
  // cluster router both weight types measured faster); the same bits as the two launches below.
  bool routed_in = false;
  if (attn_delta && n == 1 && !rec_ && !fixed) {
    RS_OP("add+rmsnorm + router + moe_experts (one launch)");
    routed_in = moe_experts_routed(ex, kern::ExpertRouteParams{lg, r, nin}, mlp_out_.get<__nv_bfloat16>(), mws, stream);
  }
  if (!routed_in) {  // the router and the experts as launches of their own
    if (attn_delta) {  // router_takes_norm(layer, n): add + RMSNorm, logits and selection in one launch
      RS_OP("add+rmsnorm + router logits + selection (fused)");
      if (rec_) rec_->router(lg, r, router_counters_.get<int>(), nin);
      else launch_moe_router_fused(lg, r, router_counters_.get<int>(), stream, &nin, router_cluster_launch(ex, n));
    } else {
      if (rec_) throw MegaUnsupported("a router without the fused norm");
      { RS_OP("router logits (gemv)"); launch_lm_head(lg, stream); }
      { RS_OP("moe router"); launch_moe_router(r, stream); }
    }
    RS_OP(ex.n_shared ? "moe_experts + shared" : "moe_experts");
    if (rec_) {
      kern::ExpertGemvParams ep;
      if (!moe_experts_decode_params(ex, xn_.get<__nv_bfloat16>(), n, s.num_experts_per_tok, ids, topk_w_.get<float>(),
                                     mlp_out_.get<__nv_bfloat16>(), mws, &ep))
        throw MegaUnsupported("experts the few-token expert kernels do not take");
      rec_->experts(ep);
    } else {
      moe_experts(ex, xn_.get<__nv_bfloat16>(), n, s.num_experts_per_tok, ids, topk_w_.get<float>(),
                  mlp_out_.get<__nv_bfloat16>(), mws, stream);
    }
  }
  *d0 = mlp_out_.get<__nv_bfloat16>();
  *d1 = nullptr;
  if (L.has_shared && ex.n_shared == 0) {
    dense_mlp(L.shared, n, int64_t(s.moe_intermediate_size) * s.n_shared_experts, shared_out_.get<__nv_bfloat16>(),
              stream);
    *d1 = shared_out_.get<__nv_bfloat16>();
  }
}

void ForwardPass::forward(int n, int nd, const std::vector<Prefill>& prefills, int nlogits,
                          const int32_t* logit_rows, cudaStream_t stream) {
  const ModelSpec& s = spec_;
  EmbedParams e;
  e.table = w_.embed;
  e.tokens = tokens_d_;
  e.chained = chained_ids_.get<int32_t>();
  e.resolved = resolved_ids_.get<int32_t>();
  e.residual = residual_.get<float>();
  e.n = n;
  e.hidden = s.hidden_size;
  { RS_OP("embed"); rec_ ? rec_->embed(e) : launch_embed(e, stream); }
  const __nv_bfloat16 *d0 = nullptr, *d1 = nullptr;
  AddRmsNormParams an;
  an.residual = residual_.get<float>();
  an.out = xn_.get<__nv_bfloat16>();
  an.n = n;
  an.hidden = s.hidden_size;
  an.eps = static_cast<float>(s.rms_norm_eps);
  // The attention output of a layer whose router did the post-attention norm: not yet in the
  // residual, added first by the next add + RMSNorm (residual + attn + mlp + shared, the same
  // fp32 additions in the same order as two separate updates).
  const __nv_bfloat16* pending = nullptr;
  auto set_deltas = [&]() {
    an.delta0 = pending ? pending : d0;
    an.delta1 = pending ? d0 : d1;
    an.delta2 = pending ? d1 : nullptr;
    pending = nullptr;
  };
  for (int l = 0; l < s.num_hidden_layers; ++l) {
    const DeviceLayer& L = w_.layers[l];
    set_deltas();
    an.weight = L.input_norm;
    input_norm_ = &an;  // run by attention(): alone, or folded into the q/kv GEMV launch
    attention(l, n, nd, prefills, stream);
    const AddRmsNormParams* dense_norm = nullptr;
    if (router_takes_norm(l, n)) {
      pending = attn_out_.get<__nv_bfloat16>();
    } else {
      an.delta0 = attn_out_.get<__nv_bfloat16>();
      an.delta1 = an.delta2 = nullptr;
      an.weight = L.post_norm;
      if (!L.moe) {
        dense_norm = &an;  // run by dense_mlp(), in its gate + up launch
      } else {
        RS_OP("add+rmsnorm");
        rec_ ? rec_->add_rmsnorm(an) : launch_add_rmsnorm(an, stream);
      }
    }
    mlp(l, n, stream, &d0, &d1, pending, dense_norm);
  }
  set_deltas();
  an.weight = w_.final_norm;
  { RS_OP("add+rmsnorm"); rec_ ? rec_->add_rmsnorm(an) : launch_add_rmsnorm(an, stream); }
  LmHeadParams lh;
  lh.x = xn_.get<__nv_bfloat16>();
  lh.rows = logit_rows;
  lh.w = w_.lm_head;
  lh.logits = logits_.get<float>();
  lh.n = nlogits;
  lh.hidden = s.hidden_size;
  lh.vocab = s.vocab_size;
  { RS_OP("lm_head"); rec_ ? rec_->lm_head(lh) : launch_lm_head(lh, stream); }
  RS_CUDA(cudaGetLastError());
}

}  // namespace rs::cuda

void rs::set_cuda_upload_one_copy_pad(size_t bytes) { rs::cuda::g_one_copy_pad = bytes; }
