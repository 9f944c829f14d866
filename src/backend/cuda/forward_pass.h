#pragma once
// The layer sequence of one forward step as kernel launches on a stream. run() is the decode
// step captured into CUDA graphs (no allocation, no host synchronisation, metadata read from
// device buffers that upload() refreshes before each launch); run_eager() adds prefill chunks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/linear.h"
#include "backend/cuda/op_profiler.h"
#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/rope_params.h"
#include "model/model_spec.h"

namespace rs::cuda {

class MegaProgram;

// Whether one-token decode steps (run(1)) go through the decode megakernel (kernels/mega/) where
// it can run the model; default off (it is slower than the per-op graph so far), RS_MEGAKERNEL=1
// on. Read at each run(1); a backend records its program at its first run(1) with it on.
void set_megakernel(bool on);
bool megakernel_enabled();

struct PrefillSeq {
  int row0 = 0, T = 0, start = 0;
  std::vector<int32_t> blocks;  // covering [0, start + T)
};

// Host-side description of one step, in row order (decode rows first).
struct StepPlan {
  std::vector<int32_t> tokens, positions, slots;
  int decode_rows = 0;
  std::vector<int32_t> seq_lens;                   // [decode_rows]
  std::vector<std::vector<int32_t>> block_tables;  // [decode_rows]
  std::vector<PrefillSeq> prefills;
  std::vector<int32_t> logit_rows;
  // Pads a decode-only plan to `bucket` rows whose KV writes land in the scratch block.
  void pad_decode_to(int bucket, int scratch_block, int block_size);
};

struct Capacity {
  int tokens = 0, decode_rows = 0, logit_rows = 0, ctx = 0;
};

class ForwardPass {
 public:
  ForwardPass(const ModelSpec& spec, const DeviceWeights& w, const RopeSpec& rope, int num_sms);
  ~ForwardPass();
  void set_kv(__nv_bfloat16* cache, int64_t layer_stride, int block_size, int bt_width);
  // Grows the workspaces; calls on_realloc first when pointers change (graphs must be dropped).
  void ensure_capacity(const Capacity& c, cudaStream_t stream, const std::function<void()>& on_realloc);
  void upload(const StepPlan& plan, cudaStream_t stream);
  void run(int rows, cudaStream_t stream);  // decode-only, logits for every row (one row: the megakernel)
  void run_eager(const StepPlan& plan, cudaStream_t stream);
  void copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& pairs, cudaStream_t stream);
  const float* logits() const { return logits_.get<float>(); }
  // Where the sampler writes a step's token ids (request k at [k]), for the next step's chained
  // rows (a token of -(k + 1) in the plan); valid until ensure_capacity reallocates.
  int32_t* chained_ids() { return chained_ids_.get<int32_t>(); }
  // Each row's input token as the embedding read it (chained rows resolved), until the next pass.
  const int32_t* resolved_ids() const { return resolved_ids_.get<int32_t>(); }
  const int32_t* topk_ids(int layer) const;
  const float* route_margins(int layer) const;  // [rows of the last step], MoE layers only
  // Whether the routers record their margins (route_margins): a diagnostic, off by default, since
  // the margin costs the compact selection one more round on the batch-1 step's critical path.
  // Takes effect for launches recorded after the call (the caller drops captured graphs).
  void set_record_margins(bool on) { record_margins_ = on; }
  bool record_margins() const { return record_margins_; }
  int decode_splits(int rows) const;
  // The batch-1 megakernel: whether the last run(1) used it, and why not where it could not.
  bool megakernel_active() const { return mega_ != nullptr; }
  const std::string& megakernel_off_reason() const { return mega_off_reason_; }
  std::string megakernel_profile() const;  // RS_MEGA_PROFILE=1: the last launch's table
  // RS_CUDA_PROFILE=1: per-op event timing (steps must then run eagerly, not as graphs).
  bool profiling() const { return prof_ != nullptr; }
  void collect_profile() {
    if (prof_) prof_->collect();
  }

 private:
  struct Prefill {
    int row0, T, start;
    const int32_t* blocks;  // device
  };
  void forward(int n, int nd, const std::vector<Prefill>& prefills, int nlogits, const int32_t* logit_rows,
               cudaStream_t stream);
  void attention(int layer, int n, int nd, const std::vector<Prefill>& prefills, cudaStream_t stream);
  // The cache write of n rows and the absorption of nd decode rows (q rotated on the way) for layer L.
  KvWriteParams kv_write_params(const DeviceLayer& L, __nv_bfloat16* cache, int n) const;
  // rotate: q's rope part too, at the step's positions.
  MlaAbsorbQParams absorb_params(const DeviceLayer& L, int nd, bool rotate) const;
  // One decode token's norm + q/kv GEMV + absorption as one launch (qkv_absorb.cuh) where it
  // applies; false: nothing launched.
  bool qkv_absorb(const DeviceLayer& L, int n, int nd, const std::vector<Prefill>& prefills,
                  const AddRmsNormParams* norm, cudaStream_t stream);
  // The layer's attention-input add + RMSNorm: forward() leaves it here and attention() runs it,
  // alone or as the prologue of the q/kv GEMV launch (linear_group). (gemv room, additive)
  const AddRmsNormParams* input_norm_ = nullptr;
  // attn_delta: the attention output when the post-attention add + RMSNorm is left to the fused
  // router (router_takes_norm); the caller then adds it to the residual in the next add + RMSNorm.
  // dense_norm: a dense layer's post-attention add + RMSNorm, left to dense_mlp().
  void mlp(int layer, int n, cudaStream_t stream, const __nv_bfloat16** d0, const __nv_bfloat16** d1,
           const __nv_bfloat16* attn_delta = nullptr, const AddRmsNormParams* dense_norm = nullptr);
  bool router_takes_norm(int layer, int n) const;
  // The layer's experts as the MoE launches take them (the shared experts inside where they fit).
  MoeExperts layer_experts(int layer, int n) const;
  // Whether mlp() lets the router of a layer with these experts take the cluster kernel.
  bool router_cluster_launch(const MoeExperts& ex, int n) const;
  // Whether this layer's attention output goes to the router as fixed-point head sums
  // (mla_v_up_o's MlaVUpOParams::fixed; RS_VUP_O_FIXED=0 keeps the ticket's bf16 sum).
  bool attn_fixed_sum(int layer, int n) const;
  // norm (optional): the add + RMSNorm producing xn_, run by the gate + up launch (linear_group:
  // its prologue for one or two rows); recorded as an op of its own for the megakernel.
  void dense_mlp(const DeviceMlp& m, int n, int64_t inter, __nv_bfloat16* out, cudaStream_t stream,
                 const AddRmsNormParams* norm = nullptr);
  // linear(), or its GEMV recorded into rec_.
  void linear_or_record(const DeviceMatrix& w, const __nv_bfloat16* x, int m, __nv_bfloat16* y,
                        const LinearWorkspace& ws, cudaStream_t stream);
  void build_megakernel(cudaStream_t stream);
  void drop_megakernel();
  // Set while forward() records the one-token step for the megakernel instead of launching.
  MegaProgram* rec_ = nullptr;
  std::unique_ptr<MegaProgram> mega_;
  bool mega_tried_ = false;
  std::string mega_off_reason_;

  const ModelSpec& spec_;
  const DeviceWeights& w_;
  RopeSpec rope_;
  int num_sms_;
  __nv_bfloat16* cache_ = nullptr;
  int64_t layer_stride_ = 0;
  int block_size_ = 0, bt_width_ = 0;
  Capacity cap_;
  int64_t max_inter_ = 0;
  // activations
  DeviceBuffer residual_, xn_, qa_, q_, kva_, qabs_, olat_, attn_v_, attn_out_;
  DeviceBuffer g_, u_, act_, mlp_out_, shared_out_, topk_ids_, topk_w_, part_o_, part_lse_;
  DeviceBuffer lat_, pe_, kvexp_, logits_, linear_ws_, moe_ws_, router_logits_, route_margins_;
  bool record_margins_ = false;
  // One token's fused merge + W_UV + o_proj: per-head o_proj partials, and a counter per row
  // chunk, left zero by the kernel.
  DeviceBuffer vupo_partials_, vupo_counters_;
  // The fixed-point head sums mla_v_up_o adds into and the cluster router reads and zeroes
  // ([hidden] int64, zero between layers); attn_fixed_pending_: set by attention() when this
  // layer's sum went there, for mlp()'s router.
  DeviceBuffer attn_fixed_;
  bool attn_fixed_pending_ = false;
  DeviceBuffer router_counters_;  // fused router: one int per 8-token chunk, left zero by the kernel
  // step metadata
  DeviceBuffer meta_, prefill_bt_, chained_ids_, resolved_ids_;
  int32_t *tokens_d_ = nullptr, *positions_d_ = nullptr, *slots_d_ = nullptr, *seq_lens_d_ = nullptr,
          *logit_rows_d_ = nullptr, *bt_d_ = nullptr;
  // Two staging buffers, alternating: an upload is enqueued while the step before may still run,
  // its own copy not yet done, so the host must not overwrite the staging that copy reads.
  void* host_meta_[2] = {nullptr, nullptr};
  size_t host_meta_bytes_[2] = {0, 0};
  int meta_slot_ = 0;
  std::vector<Prefill> prefills_;
  DeviceBuffer pairs_;
  std::unique_ptr<OpProfiler> prof_;
  friend struct OpScope;
};

}  // namespace rs::cuda
