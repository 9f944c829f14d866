#pragma once
// Host-visible side of the matmul kernels: the params structs the device ops read (one
// definition, shared by host and device) and the launch functions defined in
// kernels/ops/linear_kernels.cu and kernels/ops/moe_kernels.cu. Plain C++: src/ includes it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops/linear_params.h"

namespace rs::kern {

// Compiled maxima of the GEMV paths (token tiles of 1, 2, 4, 8 / the tensor-core GEMV's 8
// MMA columns). Runtime thresholds, measured on an H200 (docs/perf/matmul.md): linear() uses a
// GEMV up to 8 tokens (the tensor-core GEMV beats the GEMM tile at m = 2, 4, 8); moe_experts()
// uses its few-token kernels up to 2 tokens for FP8 and for 1 token in bf16, where the grouped
// tensor-core GEMV takes over from 2 (3.60 against 3.77 ms a V2-Lite step at batch 2; at batch 1
// it loses, 2.62 against 2.47 ms: docs/perf/matmul.md, 2026-11-30).
constexpr int kGemvMaxTokens = 8;
constexpr int kExpertGemvMaxTokens = 8;
constexpr int kGemvDefaultMaxTokens = 8;
constexpr int kExpertGemvDefaultMaxTokens = 2;      // FP8 (no grouped tensor-core GEMV for it)
constexpr int kExpertGemvDefaultMaxTokensBf16 = 1;
constexpr int kMaxExperts = 1024;        // routing bitmask / one group thread per expert
constexpr int kMaxTopK = 16;

struct DenseGemmParams {
  rs::cuda::DeviceMatrix w;
  const __nv_bfloat16* x = nullptr;  // [m, w.cols]
  int m = 0;
  int64_t k_per_split = 0;           // multiple of the GEMM's BK
  __nv_bfloat16* y = nullptr;        // [m, w.rows], when there is one split
  float* partial = nullptr;          // [splits, m, w.rows], when there are several
};

// Dense GEMV over up to kMaxGemvJobs weights of one width and type that read the same
// activations (q_proj and kv_a_proj both read the normed hidden state): one launch, each weight
// read in place (no copies). The caller fills w, y, jobs, x, x_rows, m, out_fp32; the launcher
// fills group_end and ks. (gemv room, additive)
constexpr int kMaxGemvJobs = 4;
struct DenseGemvParams {
  rs::cuda::DeviceMatrix w[kMaxGemvJobs];  // same cols and type
  void* y[kMaxGemvJobs] = {};              // [m, w[j].rows]: bf16, or fp32 with out_fp32
  int64_t group_end[kMaxGemvJobs] = {};    // cumulative row groups (launcher)
  int jobs = 0;
  const __nv_bfloat16* x = nullptr;        // [*, cols]; unused with the norm prologue
  const int32_t* x_rows = nullptr;         // [m] rows of x to use (nullptr: rows 0..m-1)
  int m = 0;
  int ks = 1;                              // width slices per row group (launcher)
  bool out_fp32 = false;                   // fp32 outputs (logits) instead of bf16: bf16 weights only
  // Optional prologue, the attention input's add + RMSNorm (the add_rmsnorm op's arithmetic):
  // every block forms x = rmsnorm(residual + delta0 + delta1 + delta2) * norm_weight in shared
  // memory and multiplies with that; the last block to finish reading writes the updated
  // residual and x (to norm_out) back. norm_counter (launcher): a zeroed word, left zeroed.
  float* norm_residual = nullptr;          // [m, cols] fp32, updated in place; nullptr: no prologue
  __nv_bfloat16* norm_out = nullptr;       // [m, cols] the normed x, for later readers
  const __nv_bfloat16* norm_delta[3] = {};
  const float* norm_weight = nullptr;      // [cols]
  float norm_eps = 0.f;
  unsigned* norm_counter = nullptr;
  int norm_ticket_thread0 = 0;  // A/B (RS_GEMV_TICKET0): the ticket on thread 0 even beside idle threads
};
// Largest m * cols the norm prologue holds in shared memory (bf16), and its largest m.
constexpr int64_t kGemvNormMaxElems = 8192;
constexpr int kGemvNormMaxTokens = 2;

struct ExpertGemvParams {
  rs::cuda::MoeExperts experts;
  const __nv_bfloat16* x = nullptr;  // [m, hidden]
  int m = 0, top_k = 0;
  const int* topk_ids = nullptr;        // [m, top_k]
  const float* topk_weights = nullptr;  // [m, top_k]
  __nv_bfloat16* h = nullptr;           // [min(E, m*top_k), m, inter] workspace
  __nv_bfloat16* out = nullptr;         // [m, hidden]
  bool compact_routing = true;          // one token's routing by one warp's shuffles (gemv_experts.cuh)
};

struct ExpertGemmParams {
  rs::cuda::MoeExperts experts;
  const __nv_bfloat16* x = nullptr;     // [m, hidden]
  int m = 0, top_k = 0;
  const int* topk_ids = nullptr;        // [m, top_k]
  const float* topk_weights = nullptr;  // [m, top_k]
  int tile_tokens = 0;                  // BN of the GEMM instantiation
  int max_tiles = 0;                    // ceil(m*top_k / BN) + min(E, m*top_k)
  // workspace
  int* pair_token = nullptr;   // [m*top_k] token of pair p (pairs in expert order)
  int* pair_of = nullptr;      // [m*top_k] slot (t*top_k + j) -> pair p, or -1 for an invalid id
  int* tile_expert = nullptr;  // [max_tiles]
  int* tile_p0 = nullptr;      // [max_tiles] first pair of the tile
  int* tile_n = nullptr;       // [max_tiles] pairs in the tile (<= tile_tokens)
  int* n_tiles = nullptr;      // [1]
  __nv_bfloat16* h = nullptr;  // [m*top_k, inter]
  __nv_bfloat16* y = nullptr;  // [m*top_k, hidden]
  __nv_bfloat16* out = nullptr;  // [m, hidden]
};

// Dense, m <= kGemvMaxTokens, vector path (cols % chunk == 0, 16-byte aligned rows).
// Returns false, launching nothing, where the call is outside what the kernels take (the caller
// turns that into an error).
bool launch_gemv_dense(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x, int m,
                       __nv_bfloat16* y, int sm_count, cudaStream_t stream);
// The same CUDA-core GEMV over several jobs (DenseGemvParams): any m (token tiles of up to 8,
// looped), vector path only, out_fp32 with bf16 weights only; false (nothing launched) otherwise
// or when the norm prologue's counter cannot be found. (gemv room, additive)
bool launch_gemv_dense_jobs(DenseGemvParams p, int sm_count, cudaStream_t stream);
// The register GEMV's work split for p (jobs, w filled) with rows_per_warp rows a row group on
// resident_blocks blocks of kGemvWarps warps: fills group_end and ks, returns the grid. Its
// launcher and the decode megakernel's recorder share it.
int gemv_dense_geometry(DenseGemvParams& p, int rows_per_warp, int64_t resident_blocks);
// The weight-streaming GEMV (gemv_stream.cuh: bulk copies into a shared-memory ring, the first
// stages issued before griddepcontrol.wait, one block per SM) for 1-2 tokens. launch_gemv_dense
// and launch_gemv_dense_jobs (and linear(), linear_group()) take it for the uses switched on
// (RS_GEMV_STREAM, read once: "group", "dense", "lmhead", "fp8", comma-separated, or "all" /
// "none") and fall back to the register GEMV where its shape or alignment checks fail; FP8
// weights take it only with "fp8" on, calls of 2 tokens only with "m2" on (not measured in whole
// steps yet, so off by default). Ring size in KB: RS_GEMV_STREAM_RING_KB.
// Defaults measured on an H200 (docs/perf/matmul.md, 2026-11-30 06:29 UTC): every bf16 use on (V2-Lite
// b1 step 2.41-2.44 against 2.47-2.48 ms), FP8 off (its grouped q/kv launch was 9.9 against 7.8 us
// a layer in the graph: step 2.31 against 2.23 ms), a 128 KB ring (64 KB: 2.66 ms, 32 KB: 3.37 ms).
// (gemv room, additive)
constexpr int kGemvStreamMaxTokens = 2;
constexpr unsigned kGemvStreamGroup = 1, kGemvStreamDense = 2, kGemvStreamLmHead = 4, kGemvStreamFp8 = 8;
constexpr unsigned kGemvStreamTwoTokens = 16;
constexpr unsigned kGemvStreamAll = 31;
constexpr unsigned kGemvStreamDefaultUses = kGemvStreamGroup | kGemvStreamDense | kGemvStreamLmHead;
constexpr int kGemvStreamDefaultRingKb = 128;
unsigned gemv_stream_uses();
void set_gemv_stream_uses(unsigned uses);
int gemv_stream_ring_kb();
void set_gemv_stream_ring_kb(int kb);
// Whether calls of this use (kGemvStream*), weight type and m tokens are meant for the streaming
// GEMV (linear() then skips the tensor-core GEMV for them: launch_gemv_dense tries the streaming
// GEMV, then the register one).
bool gemv_stream_on(unsigned use, int m, bool fp8);
// The streaming GEMV for p (filled as for launch_gemv_dense_jobs) whatever the switches say;
// false, launching nothing, where its checks fail.
bool launch_gemv_stream(const DenseGemvParams& p, int sm_count, cudaStream_t stream);
// Streaming GEMV launches so far in this process (host counter), so tests can tell that the
// path they meant to exercise really ran.
uint64_t gemv_stream_launches();
// A/B switches of the dense GEMV, read once from RS_GEMV_AB (comma-separated tokens) so one
// binary can time the variants of whole forward steps side by side: "oldgrid" (the earlier
// split / grid rule), "nogroup" (no grouped q_proj + kv_a launch), "oldlmhead" (the earlier
// warp-per-row lm_head kernel), "nofp8group" (FP8 jobs that would take the tensor-core GEMV
// alone are not grouped), "nofold" (the attention input's add + RMSNorm as its own kernel, not
// the grouped GEMV's prologue), "nofp8tc" (FP8 GEMVs on the CUDA-core kernel), "nofp8normpair"
// (the FP8 norm-prologue launch one row a warp), "fp8tc1" (one-token FP8 GEMVs on the
// tensor-core kernel, the rule before 2026-11-30's sixth session). Asked on every launch: a bit
// test, the token text is parsed once. (gemv room, additive)
enum class GemvAb : unsigned { kOldGrid, kNoGroup, kOldLmHead, kNoFp8Group, kNoFold, kNoFp8Tc, kNoFp8NormPair, kFp8Tc1, kCount };
bool gemv_ab(GemvAb which);
// Dense, m <= 8, tensor-core GEMV (gemv_tc.cuh): the default where gemv_tc_ok(w) (bf16, or
// FP8 with block_rows % 16 == 0 and block_cols % 64 == 0) on the vector path.
bool gemv_tc_ok(const rs::cuda::DeviceMatrix& w);
void launch_gemv_tc(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x, int m,
                    __nv_bfloat16* y, int sm_count, cudaStream_t stream);
void set_gemv_tc(bool on);  // off: the CUDA-core GEMV (for A/B and tests)
// Dense, any shape or alignment, slow: the fallback for odd widths.
void launch_gemv_scalar(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x, int m,
                        __nv_bfloat16* y, int sm_count, cudaStream_t stream);
// Dense tensor-core GEMM; tile_tokens in {16, 32, 64, 128}; splits > 1 needs p.partial.
constexpr int kGemmBM = 128, kGemmBK = 32;
void launch_gemm_dense(const DenseGemmParams& p, int tile_tokens, int splits, cudaStream_t stream);

void launch_expert_gemv(const ExpertGemvParams& p, bool fp8, int sm_count, cudaStream_t stream);
void launch_expert_gemm(const ExpertGemmParams& p, bool fp8, cudaStream_t stream);
// The cuBLASLt expert path (linear.cpp) reuses the group and combine steps of the grouped GEMM
// and adds a row gather and an in-place SwiGLU (expert_lt_glue.cuh) around its GEMMs.
void launch_expert_group(const ExpertGemmParams& p, cudaStream_t stream);
void launch_expert_combine(const ExpertGemmParams& p, cudaStream_t stream);
void launch_expert_gather_rows(const __nv_bfloat16* x, const int* pair_token, int pairs, int hidden,
                               __nv_bfloat16* xs, cudaStream_t stream);
void launch_swiglu_inplace(__nv_bfloat16* gu, int rows, int inter, cudaStream_t stream);

// h[t, i] = silu(gu[t, i]) * gu[t, inter + i]: the shared experts' activation when they run as
// linear() over concatenated [gate; up] weights.
void launch_swiglu(const __nv_bfloat16* gu, int m, int inter, __nv_bfloat16* h, cudaStream_t stream);

// Programmatic dependent launch for every matmul kernel (default on). Off: plain stream order,
// for A/B measurements.
void set_matmul_pdl(bool on);

// Largest m that takes the GEMV paths (default: the compiled maxima above); larger m takes the
// tensor-core paths. For A/B measurements in `bench linear`.
// set_gemv_max_tokens sets the experts' limit for both weight types.
void set_gemv_max_tokens(int linear_m, int experts_m);
int gemv_max_tokens();
int expert_gemv_max_tokens();               // the larger of the two types' limits
int expert_gemv_max_tokens_for(bool fp8);
// Every threshold at once, so a benchmark or test that changes them restores them exactly.
struct GemvThresholds {
  int linear, experts_fp8, experts_bf16;
};
GemvThresholds gemv_thresholds();
void set_gemv_thresholds(const GemvThresholds& t);

// Benchmarks and tests: fill `bytes` with random non-zero bf16 in +-[0.01, 1) or, for FP8,
// e4m3 with exponents 0..10 (never NaN), from `seed`.
void launch_fill_random(void* p, size_t bytes, uint64_t seed, bool fp8, cudaStream_t stream);

}  // namespace rs::kern
