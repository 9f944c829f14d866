#pragma once
// Host entry points of the matmul kernels. All are CUDA-graph capturable: no allocation, no
// host synchronisation; workspaces are sized once by the caller for the largest batch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/ops/expert_route_params.h"
#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/rmsnorm_params.h"

namespace rs::cuda {

struct LinearWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
// Workspace bytes for linear() up to m_max rows and the largest matrix of shape rows x cols.
size_t linear_workspace_bytes(int m_max, int64_t max_rows, int64_t max_cols);

// y[m, w.rows] = x[m, w.cols] @ w^T: bf16 activations, fp32 accumulation, bf16 output.
// Picks a bandwidth-bound GEMV path for small m and a tensor-core path for large m.
void linear(const DeviceMatrix& w, const __nv_bfloat16* x, int m, __nv_bfloat16* y,
            const LinearWorkspace& ws, cudaStream_t stream);

// Several weights over the same activations (q_proj and kv_a_proj both read the normed hidden
// state): jobs[i].y[m, jobs[i].w.rows] = x[m, cols] @ jobs[i].w^T. At GEMV sizes (m <= 8, same
// width and type, 16-byte aligned, bf16 jobs that would take the CUDA-core GEMV alone, any FP8)
// this is one CUDA-core GEMV launch that streams every weight in place; otherwise one linear()
// call per job.
// `norm` (optional): the add + RMSNorm that produces x (norm->out == x, norm->n == m,
// norm->hidden == cols) runs first: folded into that one launch as its prologue for m <= 2
// (kGemvNormMaxTokens), else as its own kernel; either way residual and x are updated as
// launch_add_rmsnorm() would. Calls with a norm share one device counter: one stream at a time.
// (gemv room, additive)
struct LinearJob {
  DeviceMatrix w;
  __nv_bfloat16* y = nullptr;
};
void linear_group(const LinearJob* jobs, int n_jobs, const __nv_bfloat16* x, int m, const LinearWorkspace& ws,
                  cudaStream_t stream, const AddRmsNormParams* norm = nullptr);

struct MoeWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
size_t moe_workspace_bytes(int m_max, int top_k, const MoeExperts& experts);

// out[m, hidden] (bf16) = routed-expert mixture for each token (see MoeExperts). topk_ids int32
// and topk_weights fp32 are device arrays [m, top_k] (weights already normalised and scaled).
// Each selected expert's weights are read once per call, whatever m is.
void moe_experts(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                 const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                 const MoeWorkspace& ws, cudaStream_t stream);

// One token's router and experts in one launch (kernels/ops/expert_stream_route.cuh): the
// post-attention add + RMSNorm, the logits and the selection of `rt` (its outputs stored as the
// fused router stores them: rt.norm.out, rt.lg.logits, rt.r's ids, weights and margins), then
// moe_experts() on that norm's output with that routing. False, launching nothing, where the
// streamed one-token launches do not take it: the caller runs the router and moe_experts().
bool moe_experts_routed(const MoeExperts& experts, const kern::ExpertRouteParams& rt, __nv_bfloat16* out,
                        const MoeWorkspace& ws, cudaStream_t stream);

// Whether moe_experts() can run the shared experts set in `experts` (MoeExperts::n_shared,
// shared_gate/up/down) inside its own kernels for m tokens: then one call gives routed + shared
// and the caller skips its dense shared MLP. False (run the shared MLP with linear()) for shapes
// or FP8 blocks that do not split into per-expert views, or m beyond the decode kernels.
// moe_experts() throws an rs::Error when given shared experts it cannot fold in. (matmul room,
// additive)
bool moe_can_fuse_shared(const MoeExperts& experts, int m);

// h[m, inter] = silu(gu[:, :inter]) * gu[:, inter:], gu = [m, 2 * inter] (bf16): the shared
// experts' activation between linear([gate; up]) and linear(down). (matmul room, additive)
void swiglu(const __nv_bfloat16* gu, int m, int inter, __nv_bfloat16* h, cudaStream_t stream);

// The decode megakernel's pieces (src/backend/cuda/mega_program.cpp), which run the GEMV and
// expert ops of the per-op kernels inside one launch (additive):
// whether the 16-byte GEMV path takes w with activations at x (whole chunks, aligned rows,
// FP8 scale blocks a chunk never straddles);
bool gemv_vector_path_ok(const DeviceMatrix& w, const void* x);
// whether the GEMV's add + RMSNorm prologue (gemv.cuh) takes `norm` for m rows: they fit the
// blocks' shared memory, and the residual / weight / deltas have its float4 / 8-byte loads'
// alignment (linear_group folds the norm only then);
bool gemv_norm_prologue_ok(const AddRmsNormParams& norm, int m);
// and `norm` as p's prologue.
void set_gemv_norm_prologue(kern::DenseGemvParams& p, const AddRmsNormParams& norm);
// and the few-token expert kernels' params, where moe_experts() would run those kernels for
// these arguments with the shared experts set in `experts` folded in (false otherwise; throws
// what moe_experts() throws for bad arguments).
bool moe_experts_decode_params(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                               const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                               const MoeWorkspace& ws, kern::ExpertGemvParams* params);

// Load-time check of an expert set (copies the device arrays of DeviceMatrix back, so not for
// use inside graph capture): every gate/up is [inter, hidden], every down [hidden, inter], all
// of experts.type, FP8 with scales. Throws rs::Error naming expert, matrix and field.
void validate_moe_experts(const MoeExperts& experts);

// Whether w is `first` moved by `offset` bytes (data, and FP8 scales alike) with the same type and
// shape: the view the kernels compute for a routed expert at a uniform stride (MoeExperts::stride).
// The loader asks it to choose the stride, validate_moe_experts to check one that is set.
bool expert_view_at(const DeviceMatrix& first, const DeviceMatrix& w, int64_t offset);

}  // namespace rs::cuda
