// The CUDA executor on one GPU: device weights, the paged latent KV cache, the layer sequence of
// kernels (forward_pass.cpp), decode steps replayed as CUDA graphs per batch bucket, GPU sampling.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/graph_ablation.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/forward_pass.h"
#include "backend/cuda/gpu_sampler.h"
#include "backend/validate_batch.h"
#include "common/error.h"
#include "kernels/common/l2_sides.h"
#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/mla_prefill_params.h"
#include "model/rope.h"
#include "model/weights.h"

namespace rs {

namespace {

using namespace rs::cuda;

// Batch sizes with a captured decode graph; a batch runs in the smallest bucket that holds it.
constexpr int kBuckets[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
constexpr int kMaxBucket = 256;

int bucket_for(int b) {
  for (int k : kBuckets)
    if (k >= b) return k;
  return 0;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelSpec& spec, std::unique_ptr<DeviceWeights> w) : spec_(spec), w_(std::move(w)) {
    validate_spec();
    RS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int dev = 0;
    RS_CUDA(cudaGetDevice(&dev));
    RS_CUDA(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, dev));
    RopeTable rt = make_rope_table(spec_);
    inv_freq_.reset(rt.inv_freq.size() * 4, "rope frequencies");
    RS_CUDA(cudaMemcpy(inv_freq_.get(), rt.inv_freq.data(), rt.inv_freq.size() * 4, cudaMemcpyHostToDevice));
    RopeSpec rope;
    rope.inv_freq = inv_freq_.get<float>();
    rope.mscale = rt.attention_factor;
    rope.rope_dim = spec_.qk_rope_head_dim;
    rope.interleave = rt.interleave;
    pass_ = std::make_unique<ForwardPass>(spec_, *w_, rope, num_sms_);
    sampler_ = std::make_unique<GpuSampler>(spec_.vocab_size);
    kern::l2_sides();  // measured here, outside any graph capture (kernels/common/l2_sides.h)
  }

  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (Launched& l : launched_) cudaEventDestroy(l.done);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    drop_graphs();
    pass_.reset();
    sampler_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  const ModelSpec& spec() const override { return spec_; }

  uint64_t kv_bytes_per_token() const override {
    return uint64_t(spec_.num_hidden_layers) * spec_.kv_cache_dim() * 2;
  }

  int max_kv_blocks(int block_size, uint64_t budget_bytes) const override {
    if (block_size <= 0) return 0;
    if (budget_bytes == 0) {
      // Default: 90% of what is free now, less a reserve for activations, workspaces and graphs.
      size_t free_b = 0, total_b = 0;
      RS_CUDA(cudaMemGetInfo(&free_b, &total_b));
      const uint64_t reserve = uint64_t(4) << 30;
      budget_bytes = free_b > reserve ? uint64_t((free_b - reserve) * 0.9) : 0;
    }
    const uint64_t per_block = kv_bytes_per_token() * uint64_t(block_size);
    return static_cast<int>(std::min<uint64_t>(budget_bytes / per_block, INT32_MAX - 1));
  }

  void init_kv(const KvConfig& kv) override {
    if (kv.block_size <= 0 || kv.num_blocks < 0)
      throw Error("cuda backend: bad KV config (block_size " + std::to_string(kv.block_size) + ", num_blocks " +
                  std::to_string(kv.num_blocks) + ")");
    RS_CUDA(cudaStreamSynchronize(stream_));
    drop_graphs();
    kv_ = kv;
    // One extra block at the end takes the KV writes of padding rows in a decode graph.
    const int64_t slots = int64_t(kv.num_blocks + 1) * kv.block_size;
    layer_stride_ = slots * spec_.kv_cache_dim();
    cache_.reset(size_t(layer_stride_) * spec_.num_hidden_layers * 2, "KV cache");
    RS_CUDA(cudaMemset(cache_.get(), 0, cache_.bytes()));
    const int64_t max_len = std::min<int64_t>(int64_t(spec_.max_position_embeddings) + 1,
                                              int64_t(kv.num_blocks + 1) * kv.block_size);
    bt_width_ = static_cast<int>((max_len + kv.block_size - 1) / kv.block_size);
    pass_->set_kv(cache_.get<__nv_bfloat16>(), layer_stride_, kv.block_size, bt_width_);
  }

  std::vector<SeqResult> execute(const Batch& batch) override {
    launch(batch);
    return collect();
  }
  void launch(const Batch& batch) override;
  std::vector<SeqResult> collect() override;
  bool overlaps_steps() const override { return true; }

  cuda::GraphAblation ablate_last_decode_graph(int replays) {
    const auto& g = last_decode_graph("graph ablation");
    return cuda::ablate_graph(g.graph, g.exec, stream_, replays);
  }

  std::vector<cuda::KernelSpan> trace_last_decode_graph(int replays) {
    const auto& g = last_decode_graph("kernel timeline");
    return cuda::trace_graph_replays(g.graph, g.exec, stream_, replays);
  }

  std::vector<kern::WaitProbeRecord> probe_last_decode_graph() {
    if (!kern::wait_probe_built())
      throw Error("wait probe: this binary was built without it (cmake -DRS_WAIT_PROBE=ON, a measuring build)");
    const auto& g = last_decode_graph("wait probe");
    constexpr uint32_t kCapacity = 1u << 20;
    DeviceBuffer buf;
    buf.reset(size_t(kCapacity) * sizeof(kern::WaitProbeRecord), "wait probe records");
    for (int i = 0; i < 2; ++i) RS_CUDA(cudaGraphLaunch(g.exec, stream_));  // warm, unrecorded
    RS_CUDA(cudaStreamSynchronize(stream_));
    RS_CUDA(cudaMemset(buf.get(), 0, buf.bytes()));
    kern::wait_probe_arm(buf.get<kern::WaitProbeRecord>(), kCapacity);
    RS_CUDA(cudaGraphLaunch(g.exec, stream_));
    const cudaError_t err = cudaStreamSynchronize(stream_);
    kern::wait_probe_arm(nullptr, 0);
    RS_CUDA(err);
    kern::WaitProbeRecord header;  // its grid field counts the records taken
    RS_CUDA(cudaMemcpy(&header, buf.get(), sizeof header, cudaMemcpyDeviceToHost));
    const uint64_t n = header.grid;
    if (n + 1 > kCapacity) throw Error("wait probe: more than " + std::to_string(kCapacity - 1) + " records");
    std::vector<kern::WaitProbeRecord> rec(n);
    RS_CUDA(cudaMemcpy(rec.data(), buf.get<kern::WaitProbeRecord>() + 1, n * sizeof(kern::WaitProbeRecord),
                       cudaMemcpyDeviceToHost));
    return rec;
  }

  CudaStepTraffic last_traffic() {
    CudaStepTraffic t;
    RS_CUDA(cudaStreamSynchronize(stream_));
    const WeightBytes& wb = w_->bytes;
    double experts = 0;
    int moe_layers = 0;
    uint64_t expert_bytes = 0;
    const int k = spec_.num_experts_per_tok;
    if (last_tokens_ > 0) {
      std::vector<int32_t> ids(size_t(last_tokens_) * k);
      for (int l = 0; l < spec_.num_hidden_layers; ++l) {
        if (!spec_.is_moe_layer(l)) continue;
        RS_CUDA(cudaMemcpy(ids.data(), pass_->topk_ids(l), ids.size() * 4, cudaMemcpyDeviceToHost));
        t.first_row_routing.emplace_back(ids.begin(), ids.begin() + k);
        std::set<int32_t> distinct(ids.begin(), ids.end());
        experts += double(distinct.size());
        expert_bytes += uint64_t(distinct.size()) * wb.per_expert;
        ++moe_layers;
      }
    }
    t.experts_per_moe_layer = moe_layers ? experts / moe_layers : 0;
    t.weight_bytes = wb.dense + wb.lm_head + expert_bytes + uint64_t(last_tokens_) * wb.embed_row;
    t.kv_bytes = last_kv_bytes_;
    return t;
  }

  void record_margins(bool on) {
    if (pass_->record_margins() == on) return;
    settle();
    drop_graphs();  // captured launches hold the margins pointer (or none)
    pass_->set_record_margins(on);
  }
  std::vector<float> last_margins() {
    if (!pass_->record_margins())
      throw Error("routing margins: not recorded (call cuda_record_routing_margins(backend, true) before the step)");
    RS_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> out(last_tokens_, INFINITY), m(last_tokens_);
    for (int l = 0; l < spec_.num_hidden_layers; ++l) {
      if (!spec_.is_moe_layer(l) || last_tokens_ == 0) continue;
      RS_CUDA(cudaMemcpy(m.data(), pass_->route_margins(l), m.size() * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < last_tokens_; ++i) out[i] = std::min(out[i], m[i]);
    }
    return out;
  }
  CudaMegakernelState megakernel_state() const {
    return CudaMegakernelState{pass_->megakernel_active(), pass_->megakernel_off_reason(), pass_->megakernel_profile()};
  }
  std::vector<float> logits_row(int row) {
    if (row >= last_tokens_)
      throw Error("step logits: row " + std::to_string(row) + " of a step with " + std::to_string(last_tokens_) + " rows");
    RS_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> out(size_t(spec_.vocab_size));
    RS_CUDA(cudaMemcpy(out.data(), pass_->logits() + size_t(row) * out.size(), out.size() * 4, cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  void validate_spec() const {
    auto need = [&](bool ok, const std::string& what) {
      if (!ok) throw Error("cuda backend: unsupported config: " + what);
    };
    need(spec_.kv_lora_rank % 64 == 0 && spec_.kv_lora_rank <= 512, "kv_lora_rank must be a multiple of 64, <= 512");
    need(spec_.qk_rope_head_dim % 16 == 0, "qk_rope_head_dim must be a multiple of 16");
    need(spec_.qk_nope_head_dim % 16 == 0 && spec_.qk_nope_head_dim <= 256, "qk_nope_head_dim must be a multiple of 16, <= 256");
    need(spec_.v_head_dim % 16 == 0, "v_head_dim must be a multiple of 16");
    auto pow2 = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
    need(pow2(spec_.v_head_dim) && pow2(spec_.kv_lora_rank), "v_head_dim and kv_lora_rank must be powers of two");
    need(spec_.hidden_size % 256 == 0 && spec_.hidden_size <= 8192, "hidden_size must be a multiple of 256, <= 8192");
    need(spec_.n_routed_experts <= 512, "n_routed_experts <= 512");
    need(spec_.n_group <= 64, "n_group <= 64");
    need(spec_.num_experts_per_tok <= 64, "num_experts_per_tok <= 64");
    // Refused at load, not at the first prefill: the prefill attention is compiled per head shape.
    need(mla_prefill_supported(spec_.qk_nope_head_dim, spec_.qk_rope_head_dim, spec_.v_head_dim),
         "MLA prefill attention is built for (qk_nope, qk_rope, v) head dims (128, 64, 128) and (32, 16, 32) only, "
         "got (" + std::to_string(spec_.qk_nope_head_dim) + ", " + std::to_string(spec_.qk_rope_head_dim) + ", " +
             std::to_string(spec_.v_head_dim) + ")");
  }

  void drop_graphs() {
    for (auto& [b, g] : graphs_) {
      cudaGraphExecDestroy(g.exec);
      cudaGraphDestroy(g.graph);
    }
    graphs_.clear();
  }

  bool decode_only(const Batch& batch) const {
    if (int(batch.seqs.size()) > kMaxBucket || batch.seqs.empty()) return false;
    for (const SeqStep& s : batch.seqs)
      if (s.tokens.size() != 1 || s.return_logits) return false;
    return true;
  }

  void check_batch(const Batch& batch) const;

  // A launched step not yet collected: its results (logits copies land in them), which sampler
  // slot holds its tokens, and the event after its last kernel.
  struct Launched {
    cudaEvent_t done = nullptr;
    std::vector<SeqResult> results;
    std::vector<int> req_seq;  // sampler request k -> batch index
    int sampler_slot = 0;
    bool settled = false;  // tokens already in results (take_tokens)
  };
  std::vector<Launched> launched_;  // oldest first, two at most
  // The sequence of each of the last launch's sampler rows, for the next step's chained rows.
  std::vector<uint64_t> last_sampler_seqs_;
  int last_launch_bucket_ = 0;  // 0: the last launch was not a decode graph
  // The last launch's tokens by sampler row, once read on the host (take_tokens).
  std::vector<int32_t> last_tokens_by_row_;
  // Reads a finished step's tokens into its results (and, for the last launch, last_tokens_by_row_).
  void take_tokens(Launched& l);
  // Waits for every launched step and takes its tokens, so that nothing of a step in flight
  // depends on buffers the next launch may reallocate.
  void settle();
  cudaEvent_t take_event();
  std::vector<cudaEvent_t> spare_events_;

  ModelSpec spec_;
  std::unique_ptr<DeviceWeights> w_;
  cudaStream_t stream_ = nullptr;
  int num_sms_ = 0;
  DeviceBuffer inv_freq_;
  std::unique_ptr<ForwardPass> pass_;
  std::unique_ptr<GpuSampler> sampler_;
  KvConfig kv_;
  int64_t layer_stride_ = 0;
  int bt_width_ = 0;
  DeviceBuffer cache_;
  struct DecodeGraph {
    cudaGraph_t graph;  // kept for its node handles (graph_ablation.h)
    cudaGraphExec_t exec;
  };
  std::map<int, DecodeGraph> graphs_;
  // The graph of the last decode step, for the measurement tools (`what` names the caller).
  const DecodeGraph& last_decode_graph(const char* what) const {
    auto it = graphs_.find(last_bucket_);
    if (it == graphs_.end()) throw Error(std::string(what) + ": no decode step has run as a CUDA graph yet");
    return it->second;
  }
  int last_bucket_ = 0;
  int last_tokens_ = 0;
  uint64_t last_kv_bytes_ = 0;
};

void CudaBackend::check_batch(const Batch& batch) const {
  validate_batch(batch, kv_, spec_.vocab_size, int64_t(bt_width_) * kv_.block_size, "cuda backend");
}

cudaEvent_t CudaBackend::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  RS_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void CudaBackend::take_tokens(Launched& l) {
  std::vector<SampledToken> sampled = sampler_->collect(l.sampler_slot);
  if (&l == &launched_.back()) {
    last_tokens_by_row_.clear();
    for (const SampledToken& t : sampled) last_tokens_by_row_.push_back(t.id);
  }
  for (size_t k = 0; k < l.req_seq.size(); ++k) l.results[l.req_seq[k]].token = std::move(sampled[k]);
  l.settled = true;
}

void CudaBackend::settle() {
  if (launched_.empty()) return;
  RS_CUDA(cudaStreamSynchronize(stream_));
  for (Launched& l : launched_)
    if (!l.settled) take_tokens(l);
}

void CudaBackend::launch(const Batch& batch) {
  check_batch(batch);
  if (launched_.size() >= 2) throw Error("cuda backend: two launched steps are not collected yet");
  const int nseq = static_cast<int>(batch.seqs.size());
  Launched L;
  L.results.resize(nseq);

  // A chained row's token is the one the last launch sampled for its sequence: read on the device
  // (a token of -(k + 1): sampler row k, kernels/ops/embed.cuh) when this step replays the same
  // decode graph right behind it; otherwise every earlier step is settled first and the token
  // read on the host, so nothing in flight depends on a buffer this launch may reallocate.
  // A decode graph step: one token a sequence, the graph of its bucket (not while profiling ops).
  const bool graph_step = decode_only(batch) && !pass_->profiling();
  const bool same_graph = graph_step && last_launch_bucket_ != 0 &&
                          bucket_for(nseq) == last_launch_bucket_ && graphs_.count(last_launch_bucket_) != 0;
  std::vector<int32_t> chained_tok(nseq, 0);
  for (int i = 0; i < nseq; ++i) {
    const SeqStep& s = batch.seqs[i];
    if (!s.token_from_previous) continue;  // (validate_batch: a chained sequence decodes one token)
    // The engine chains the same sequences in the same order: row i first, a search otherwise.
    int row = size_t(i) < last_sampler_seqs_.size() && last_sampler_seqs_[i] == s.seq_id ? i : -1;
    for (size_t k = 0; row < 0 && k < last_sampler_seqs_.size(); ++k)
      if (last_sampler_seqs_[k] == s.seq_id) row = int(k);
    if (row < 0)
      throw Error("cuda backend: seq " + std::to_string(s.seq_id) +
                  " takes its token from the previous step, which sampled none for it");
    chained_tok[i] = -(row + 1);
  }
  // The sampler reallocates its slots when it grows: not under a step in flight either.
  int samples = 0;
  for (const SeqStep& s : batch.seqs) samples += s.sample && !s.tokens.empty();
  if (!same_graph || !sampler_->holds(samples)) {
    settle();
    for (int i = 0; i < nseq; ++i)
      if (batch.seqs[i].token_from_previous) chained_tok[i] = last_tokens_by_row_.at(size_t(-chained_tok[i] - 1));
  }
  if (!batch.block_copies.empty()) pass_->copy_blocks(batch.block_copies, stream_);

  // Rows: decode sequences (one token) first, so the absorbed-attention rows are contiguous; then
  // each prefill chunk. Logit rows: every row of a teacher-forced step, the last of a sampled one.
  StepPlan plan;
  std::vector<int> order;
  for (int i = 0; i < nseq; ++i)
    if (batch.seqs[i].tokens.size() == 1) order.push_back(i);
  plan.decode_rows = static_cast<int>(order.size());
  for (int i = 0; i < nseq; ++i)
    if (batch.seqs[i].tokens.size() > 1) order.push_back(i);
  std::vector<int> seq_logit_row(nseq, -1), seq_logits_first(nseq, -1), seq_row0(nseq, -1);
  uint64_t kv_tokens = 0;
  for (int i : order) {
    const SeqStep& s = batch.seqs[i];
    const int row0 = static_cast<int>(plan.tokens.size());
    seq_row0[i] = row0;
    const int T = static_cast<int>(s.tokens.size());
    for (int k = 0; k < T; ++k) {
      const int pos = s.start_pos + k;
      plan.tokens.push_back(s.token_from_previous ? chained_tok[i] : s.tokens[k]);
      plan.positions.push_back(pos);
      plan.slots.push_back(s.block_table[pos / kv_.block_size] * kv_.block_size + pos % kv_.block_size);
    }
    const int len = s.start_pos + T;
    const int nblocks = (len + kv_.block_size - 1) / kv_.block_size;
    if (T == 1) {
      plan.seq_lens.push_back(len);
      plan.block_tables.push_back(std::vector<int32_t>(s.block_table.begin(), s.block_table.begin() + nblocks));
    } else if (T > 1) {
      PrefillSeq ps;
      ps.row0 = row0;
      ps.T = T;
      ps.start = s.start_pos;
      ps.blocks.assign(s.block_table.begin(), s.block_table.begin() + nblocks);
      plan.prefills.push_back(std::move(ps));
    }
    kv_tokens += uint64_t(len);
    if (s.return_logits && T > 0) {
      seq_logits_first[i] = static_cast<int>(plan.logit_rows.size());
      for (int k = 0; k < T; ++k) plan.logit_rows.push_back(row0 + k);
      seq_logit_row[i] = static_cast<int>(plan.logit_rows.size()) - 1;
    } else if (s.sample && T > 0) {
      seq_logit_row[i] = static_cast<int>(plan.logit_rows.size());
      plan.logit_rows.push_back(row0 + T - 1);
    }
  }
  last_tokens_ = static_cast<int>(plan.tokens.size());
  last_kv_bytes_ = kv_tokens * kv_bytes_per_token();

  // Sampling parameters go up right after the forward pass is enqueued: the host packs them while
  // the GPU runs the step, and their copy waits behind the step, not in front of it (sampling
  // runs outside the graph: its penalty inputs vary in size).
  // A decode graph computes logits for every row of its bucket (StepPlan::pad_decode_to): a
  // sequence's logits row is then its forward row, not its place among the rows that sample (they
  // differ when a row before it does not sample, e.g. a choice computing its prompt before a fork).
  std::vector<GpuSampler::Request> reqs;
  for (int i = 0; i < nseq; ++i) {
    const SeqStep& s = batch.seqs[i];
    if (!s.sample || s.tokens.empty()) continue;
    if (graph_step) seq_logit_row[i] = seq_row0[i];  // (one token a row)
    // A chained row's input token is its sequence's newest output (Backend: token_from_previous).
    reqs.push_back(GpuSampler::Request{&s.sampling, seq_logit_row[i], s.token_from_previous ? seq_row0[i] : -1});
    L.req_seq.push_back(i);
  }

  int launch_bucket = 0;
  if (!plan.tokens.empty()) {
    if (graph_step) {
      // Padded to the bucket: a decode graph computes logits for every row of the bucket.
      const int B = nseq, bucket = bucket_for(B);
      pass_->ensure_capacity(Capacity{bucket, bucket, bucket, 0}, stream_, [&] { settle(); drop_graphs(); });
      plan.pad_decode_to(bucket, kv_.num_blocks, kv_.block_size);
      pass_->upload(plan, stream_);
      auto it = graphs_.find(bucket);
      if (it == graphs_.end()) {
        // Warm-up runs eagerly first (kernel attributes, lazy module loading), then capture.
        pass_->run(bucket, stream_);
        cudaGraph_t graph;
        RS_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        pass_->run(bucket, stream_);
        RS_CUDA(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec;
        RS_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        it = graphs_.emplace(bucket, DecodeGraph{graph, exec}).first;
        // The warm-up already wrote this step's KV rows; the replay rewrites the identical values.
      }
      RS_CUDA(cudaGraphLaunch(it->second.exec, stream_));
      last_bucket_ = bucket;
      launch_bucket = bucket;
    } else {
      int max_ctx = 0;
      for (auto& p : plan.prefills) max_ctx = std::max(max_ctx, p.start + p.T);
      const int n = static_cast<int>(plan.tokens.size());
      pass_->ensure_capacity(Capacity{n, std::max(1, plan.decode_rows), std::max<int>(1, plan.logit_rows.size()), max_ctx},
                             stream_, [&] { settle(); drop_graphs(); });
      pass_->upload(plan, stream_);
      pass_->run_eager(plan, stream_);
    }
    L.sampler_slot = sampler_->prepare(reqs, stream_);
    // The tokens also go to the pass's chained-id buffer, where a chained next step reads them.
    sampler_->launch(L.sampler_slot, pass_->logits(), pass_->chained_ids(), pass_->resolved_ids(), stream_);
    for (int i = 0; i < nseq; ++i) {
      const SeqStep& s = batch.seqs[i];
      if (!s.return_logits || s.tokens.empty()) continue;
      const size_t V = size_t(spec_.vocab_size);
      L.results[i].logits.resize(s.tokens.size() * V);
      RS_CUDA(cudaMemcpyAsync(L.results[i].logits.data(), pass_->logits() + size_t(seq_logits_first[i]) * V,
                              L.results[i].logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
    }
  } else {
    L.sampler_slot = sampler_->prepare({}, stream_);
  }
  L.done = take_event();
  RS_CUDA(cudaEventRecord(L.done, stream_));
  last_sampler_seqs_.clear();
  for (int i : L.req_seq) last_sampler_seqs_.push_back(batch.seqs[i].seq_id);
  last_launch_bucket_ = launch_bucket;
  launched_.push_back(std::move(L));
}

std::vector<SeqResult> CudaBackend::collect() {
  if (launched_.empty()) throw Error("cuda backend: collect() with no launched step");
  Launched& l = launched_.front();
  if (!l.settled) {
    RS_CUDA(cudaEventSynchronize(l.done));
    pass_->collect_profile();
    take_tokens(l);
  }
  std::vector<SeqResult> out = std::move(l.results);
  spare_events_.push_back(l.done);
  launched_.erase(launched_.begin());
  return out;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelSpec& spec, const Weights& weights) {
  std::fprintf(stderr, "rackserve: CUDA backend: %s weights to the GPU\n",
               weights.is_dummy() ? "creating dummy" : "uploading");
  return std::make_unique<CudaBackend>(spec, upload_weights(spec, weights));
}

std::unique_ptr<Backend> make_cuda_backend_dummy(const ModelSpec& spec, uint64_t seed) {
  return std::make_unique<CudaBackend>(spec, dummy_device_weights(spec, seed));
}

namespace {
// `b` as the CUDA backend, for the CUDA-only accessors below (`what` names the caller).
CudaBackend& cuda_backend_of(Backend& b, const char* what) {
  auto* cb = dynamic_cast<CudaBackend*>(&b);
  if (!cb) throw Error(std::string(what) + ": backend '" + b.name() + "' is not the CUDA backend");
  return *cb;
}
}  // namespace

void cuda_record_routing_margins(Backend& b, bool on) { cuda_backend_of(b, "routing margins").record_margins(on); }

std::vector<float> cuda_last_step_routing_margins(Backend& b) {
  return cuda_backend_of(b, "routing margins").last_margins();
}

CudaMegakernelState cuda_megakernel_state(Backend& b) { return cuda_backend_of(b, "megakernel state").megakernel_state(); }

std::vector<float> cuda_last_step_logits(Backend& b, int row) {
  CudaBackend& cb = cuda_backend_of(b, "step logits");
  if (row < 0) throw Error("step logits: row must be >= 0, got " + std::to_string(row));
  return cb.logits_row(row);
}

cuda::GraphAblation cuda_decode_graph_ablation(Backend& b, int replays) {
  return cuda_backend_of(b, "graph ablation").ablate_last_decode_graph(replays);
}

std::vector<cuda::KernelSpan> cuda_decode_graph_timeline(Backend& b, int replays) {
  return cuda_backend_of(b, "kernel timeline").trace_last_decode_graph(replays);
}

std::vector<kern::WaitProbeRecord> cuda_decode_graph_wait_probe(Backend& b) {
  return cuda_backend_of(b, "wait probe").probe_last_decode_graph();
}

CudaStepTraffic cuda_last_step_traffic(Backend& b) { return cuda_backend_of(b, "step traffic").last_traffic(); }

}  // namespace rs
