// Host dispatch of the matmul kernels: validates the operands (clear rs::Error, never a device
// fault), picks GEMV or tensor-core GEMM by the number of token rows, sizes split-K, and carves
// workspaces. Nothing here allocates or synchronises, so every call can be graph-captured.
#include "backend/cuda/linear.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cublaslt_gemm.h"
#include "common/error.h"
#include "kernels/common/env_int.h"
#include "kernels/common/sm_count.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/moe_decode_launch.h"

namespace rs::cuda {
namespace {

using kern::kGemmBK;
using kern::kGemmBM;

std::string describe(const DeviceMatrix& w) {
  return std::string(w.type == WeightType::BF16 ? "bf16" : "fp8-e4m3") + " [" +
         std::to_string(w.rows) + " x " + std::to_string(w.cols) + "]";
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int sm_count() {
  const int n = kern::current_sm_count();
  if (n <= 0) throw Error("linear: cannot read the current CUDA device's multiprocessor count");
  return n;
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(std::string(what) + ": kernel launch failed: " + cudaGetErrorString(err));
}

void check_matrix(const DeviceMatrix& w, const std::string& what) {
  if (w.rows <= 0 || w.cols <= 0)
    throw Error(what + ": weight shape must be positive, got " + describe(w));
  if (!w.data) throw Error(what + ": weight " + describe(w) + " has no data pointer");
  if (w.type != WeightType::BF16 && w.type != WeightType::FP8_E4M3_BLOCK)
    throw Error(what + ": unknown weight type " + std::to_string(int(w.type)));
  if (w.type == WeightType::FP8_E4M3_BLOCK) {
    if (!w.scale_inv) throw Error(what + ": FP8 weight " + describe(w) + " has no scale_inv");
    if (w.block_rows <= 0 || w.block_cols <= 0)
      throw Error(what + ": FP8 weight " + describe(w) + " has block size " +
                  std::to_string(w.block_rows) + "x" + std::to_string(w.block_cols));
  }
}

// The 16-byte paths need whole chunks per row, aligned rows, and FP8 scale blocks that a
// 16-element chunk never straddles.
bool vector_path_ok(const DeviceMatrix& w, const void* x) {
  const bool fp8 = w.type == WeightType::FP8_E4M3_BLOCK;
  const int64_t chunk = fp8 ? 16 : 8;
  return w.cols % chunk == 0 && aligned16(w.data) && aligned16(x) && (!fp8 || w.block_cols % 16 == 0);
}

// Measured on an H200 (docs/perf/matmul.md, perf/cuda.md): the tensor-core GEMV wins for FP8
// from two tokens on (no per-element conversion to fp32, one weight read for up to 8 tokens) once
// there are enough 16-row tiles to fill the GPU, and for bf16 from two tokens on or on narrow
// matrices; the CUDA-core GEMV wins for one bf16 token on wide matrices, for few rows (it splits
// the width across warps), and for one FP8 token inside the decode graph (sixth session: o_proj
// 3.7 against 4.9 us a layer, the step 1-2% shorter).
bool gemv_takes_tensor_cores(const DeviceMatrix& w, int m) {
  const bool fp8 = w.type == WeightType::FP8_E4M3_BLOCK;
  if (fp8 && kern::gemv_ab(kern::GemvAb::kNoFp8Tc)) return false;  // A/B: FP8 GEMVs on the CUDA-core kernel
  const bool fp8_one_token_tc = kern::gemv_ab(kern::GemvAb::kFp8Tc1);  // A/B: the earlier rule
  return kern::gemv_tc_ok(w) && (fp8 ? w.rows >= 1024 && (m >= 2 || fp8_one_token_tc) : (m >= 2 || w.cols <= 1024));
}

int tile_tokens_for(int64_t tokens_per_tile) {
  if (tokens_per_tile <= 16) return 16;
  if (tokens_per_tile <= 32) return 32;
  if (tokens_per_tile <= 64) return 64;
  return 128;
}

constexpr int kMaxSplits = 8;

size_t align_up(size_t v) { return (v + 255) & ~size_t(255); }

// Byte layout of the many-token MoE workspace; one definition for sizing and for carving.
struct ExpertGemmLayout {
  size_t pair_token, pair_of, tile_expert, tile_p0, tile_n, n_tiles, h, y, bytes;
  int max_tiles;
  // n_shared: shared experts folded in as experts selected by every token (m more pairs each).
  ExpertGemmLayout(int m, int top_k, int num_experts, int hidden, int inter, int tile_tokens, int n_shared = 0) {
    const int64_t P = int64_t(m) * (top_k + n_shared);
    max_tiles = static_cast<int>((P + tile_tokens - 1) / tile_tokens +
                                 std::min<int64_t>(num_experts + n_shared, P));
    size_t o = 0;
    pair_token = o; o += align_up(P * 4);
    pair_of = o; o += align_up(P * 4);
    tile_expert = o; o += align_up(size_t(max_tiles) * 4);
    tile_p0 = o; o += align_up(size_t(max_tiles) * 4);
    tile_n = o; o += align_up(size_t(max_tiles) * 4);
    n_tiles = o; o += align_up(4);
    h = o; o += align_up(P * inter * 2);
    y = o; o += align_up(P * hidden * 2);
    bytes = o;
  }
};

size_t expert_gemv_bytes(int m, int top_k, int num_experts, int inter, int n_shared = 0) {
  const int64_t slots = n_shared + std::min<int64_t>(num_experts, int64_t(m) * top_k);
  return align_up(slots * m * inter * 2);
}

// Batched decode, bf16: the grouped tensor-core GEMV (expert_decode.cuh) while experts get at
// most 16 tokens on average (each 16-token tile reads its expert's weights once, like the GEMV);
// above that the mma.sync GEMM tile (or cuBLASLt for prefill sizes) reuses weights better.
constexpr int kExpertTcMaxTokens = 512;
bool expert_tc_gemv_for(const MoeExperts& e, int m, int top_k) {
  return kern::expert_decode() && e.type == WeightType::BF16 && m > kern::expert_gemv_max_tokens_for(false) &&
         m <= kExpertTcMaxTokens && int64_t(m) * top_k <= int64_t(16) * e.num_experts;
}

// Shared experts that moe_experts() may fold into its kernels: HF's concatenated shared MLP of
// exactly n_shared * inter rows / columns, the routed experts' type, and for FP8 scale blocks
// that the per-expert views start on.
std::string shared_unfusable_reason(const MoeExperts& e) {
  if (e.n_shared <= 0) return "no shared experts";
  if (e.n_shared > kern::kMaxSharedExperts)
    return "n_shared=" + std::to_string(e.n_shared) + " above " + std::to_string(kern::kMaxSharedExperts);
  if (e.num_experts + e.n_shared > kern::kMaxExperts) return "routed + shared experts above " + std::to_string(kern::kMaxExperts);
  const int64_t S = int64_t(e.n_shared) * e.inter;
  const DeviceMatrix* mats[3] = {&e.shared_gate, &e.shared_up, &e.shared_down};
  for (int k = 0; k < 3; ++k) {
    const DeviceMatrix& w = *mats[k];
    const int64_t want_rows = k == 2 ? e.hidden : S, want_cols = k == 2 ? S : e.hidden;
    if (w.rows != want_rows || w.cols != want_cols) return "shared matrix " + describe(w) + " is not [" +
        std::to_string(want_rows) + " x " + std::to_string(want_cols) + "]";
    if (w.type != e.type || !w.data || !aligned16(w.data)) return "shared matrix " + describe(w) + " type/data";
    if (w.type == WeightType::FP8_E4M3_BLOCK &&
        (!w.scale_inv || w.block_rows <= 0 || w.block_cols <= 0 || w.block_cols % 16 != 0 ||
         (k == 2 ? e.inter % w.block_cols : e.inter % w.block_rows) != 0))
      return "FP8 shared matrix " + describe(w) + " blocks " + std::to_string(w.block_rows) + "x" +
             std::to_string(w.block_cols) + " do not tile inter=" + std::to_string(e.inter);
  }
  return "";
}

void check_experts(const MoeExperts& e, int top_k) {
  if (e.num_experts <= 0 || e.num_experts > kern::kMaxExperts)
    throw Error("moe_experts: num_experts must be in [1, " + std::to_string(kern::kMaxExperts) +
                "], got " + std::to_string(e.num_experts));
  if (e.hidden <= 0 || e.inter <= 0 || e.hidden % 16 != 0 || e.inter % 16 != 0)
    throw Error("moe_experts: hidden and inter must be positive multiples of 16, got hidden=" +
                std::to_string(e.hidden) + " inter=" + std::to_string(e.inter));
  if (!e.gate || !e.up || !e.down) throw Error("moe_experts: gate/up/down expert arrays must be set");
  if (e.type != WeightType::BF16 && e.type != WeightType::FP8_E4M3_BLOCK)
    throw Error("moe_experts: unknown weight type " + std::to_string(int(e.type)));
  if (top_k <= 0 || top_k > kern::kMaxTopK)
    throw Error("moe_experts: top_k must be in [1, " + std::to_string(kern::kMaxTopK) + "], got " +
                std::to_string(top_k));
}

// ---- Large m through cuBLASLt (cublaslt_gemm.h) -------------------------------------------
// bf16 only: Hopper cuBLASLt has no 128x128 block-scaled FP8, so FP8 weights stay on the
// built-in kernels.

bool stream_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return st != cudaStreamCaptureStatusNone;
}

// Dense linear() for m above the GEMV sizes on the vector path (16-byte aligned rows). Graph
// capturable once the state exists (the warm-up call before capture creates it).
bool linear_cublaslt(const DeviceMatrix& w, const __nv_bfloat16* x, int m, __nv_bfloat16* y, cudaStream_t stream) {
  if (w.type != WeightType::BF16) return false;
  const GemmBackend b = gemm_backend();
  if (b == GemmBackend::Own || (b == GemmBackend::Auto && m < cublaslt_min_tokens_dense())) return false;
  if (!aligned16(y) || (w.rows * 2) % 16 != 0) return false;
  if (!cublaslt_ready(stream)) return false;
  return cublaslt_gemm_bf16(w.data, w.rows, w.cols, w.cols, x, w.cols, m, y, w.rows, stream, 0);
}

// Workspace of the cuBLASLt expert path. The gathered token rows `xs` and the expert outputs
// `y` share one region: each expert's GEMMs read and write only its own rows [p0, p0 + n), and
// its down GEMM (writing y) runs after its gate/up GEMM (reading xs) on the same stream. The
// [gate | up] outputs `gu` become h in place (swiglu_inplace_op).
struct LtExpertLayout {
  size_t pair_token, pair_of, table, xs_y, gu, bytes;
  int max_tiles, P;
  LtExpertLayout(int m, int top_k, int num_experts, int hidden, int inter) {
    P = m * top_k;
    max_tiles = 1 + std::min(num_experts, P);  // one tile per active expert (tile_tokens = P)
    size_t o = 0;
    pair_token = o; o += align_up(size_t(P) * 4);
    pair_of = o; o += align_up(size_t(P) * 4);
    table = o; o += align_up(size_t(1 + 3 * max_tiles) * 4);  // n_tiles, tile_expert, tile_p0, tile_n
    xs_y = o; o += align_up(size_t(P) * hidden * 2);
    gu = o; o += align_up(size_t(P) * 2 * inter * 2);
    bytes = o;
  }
};

bool lt_experts_wanted(const MoeExperts& e, int m) {
  if (e.type != WeightType::BF16 || m <= kern::expert_gemv_max_tokens()) return false;
  const GemmBackend b = gemm_backend();
  return b == GemmBackend::CublasLt || (b == GemmBackend::Auto && m >= cublaslt_min_tokens_experts());
}

// Routed experts as one cuBLASLt GEMM pair per active expert over its tokens, spread over
// cublaslt_lanes() streams. The per-expert token counts are read back to the host (one small
// copy and one stream sync per call), so this runs only outside graph capture: prefill is
// eager; captured decode steps keep the built-in grouped GEMM. Returns false (nothing left
// half done) when it does not apply, so the caller runs the built-in path.
bool moe_experts_cublaslt(const MoeExperts& e, const __nv_bfloat16* x, int m, int top_k, const int* topk_ids,
                          const float* topk_weights, __nv_bfloat16* out, const MoeWorkspace& ws, cudaStream_t stream) {
  if (!lt_experts_wanted(e, m) || stream_capturing(stream)) return false;
  const LtExpertLayout l(m, top_k, e.num_experts, e.hidden, e.inter);
  if (ws.bytes < l.bytes) {
    if (gemm_backend() == GemmBackend::CublasLt)
      throw Error("moe_experts (cuBLASLt): workspace of " + std::to_string(ws.bytes) + " bytes is below the " +
                  std::to_string(l.bytes) + " needed for m=" + std::to_string(m) +
                  "; size it with moe_workspace_bytes() after choosing the backend");
    return false;
  }
  if (!cublaslt_ready(stream)) return false;
  const int E = e.num_experts, hidden = e.hidden, inter = e.inter;
  auto* base = static_cast<uint8_t*>(ws.ptr);
  int* table = reinterpret_cast<int*>(base + l.table);
  kern::ExpertGemmParams p;
  p.experts = e;
  p.x = x;
  p.m = m;
  p.top_k = top_k;
  p.topk_ids = topk_ids;
  p.topk_weights = topk_weights;
  p.tile_tokens = l.P;  // one tile per active expert: (expert, first pair, count)
  p.max_tiles = l.max_tiles;
  p.pair_token = reinterpret_cast<int*>(base + l.pair_token);
  p.pair_of = reinterpret_cast<int*>(base + l.pair_of);
  p.n_tiles = table;
  p.tile_expert = table + 1;
  p.tile_p0 = table + 1 + l.max_tiles;
  p.tile_n = table + 1 + 2 * l.max_tiles;
  p.y = reinterpret_cast<__nv_bfloat16*>(base + l.xs_y);
  p.out = out;
  kern::launch_expert_group(p, stream);
  check_launch("moe_experts (cuBLASLt group)");
  // Read back the tile table and the expert matrices (device arrays) in one sync.
  const size_t table_bytes = size_t(1 + 3 * l.max_tiles) * 4, arr_bytes = sizeof(DeviceMatrix) * E;
  auto* host = static_cast<uint8_t*>(cublaslt_host_scratch(table_bytes + 3 * arr_bytes));
  auto* mats = reinterpret_cast<DeviceMatrix*>(host);  // [gate E | up E | down E]
  auto* ht = reinterpret_cast<int*>(host + 3 * arr_bytes);
  const DeviceMatrix* arrays[3] = {e.gate, e.up, e.down};
  for (int k = 0; k < 3; ++k)
    if (cudaMemcpyAsync(mats + k * E, arrays[k], arr_bytes, cudaMemcpyDeviceToHost, stream) != cudaSuccess)
      throw Error("moe_experts (cuBLASLt): cannot read the expert arrays back");
  if (cudaMemcpyAsync(ht, table, table_bytes, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    throw Error(std::string("moe_experts (cuBLASLt): reading the routing counts back failed: ") +
                cudaGetErrorString(cudaGetLastError()));
  const int n_active = ht[0];
  const int *t_expert = ht + 1, *t_p0 = ht + 1 + l.max_tiles, *t_n = ht + 1 + 2 * l.max_tiles;
  for (int i = 0; i < n_active; ++i) {
    const int ex = t_expert[i];
    const DeviceMatrix &g = mats[ex], &u = mats[E + ex], &d = mats[2 * E + ex];
    for (const DeviceMatrix* w : {&g, &u, &d})
      if (w->type != WeightType::BF16 || !aligned16(w->data)) return false;  // validate_moe_experts() says why
    if (g.rows != inter || u.rows != inter || g.cols != hidden || u.cols != hidden || d.rows != hidden ||
        d.cols != inter)
      return false;
  }
  int pairs = 0;
  for (int i = 0; i < n_active; ++i) pairs = std::max(pairs, t_p0[i] + t_n[i]);
  auto* xs_y = reinterpret_cast<__nv_bfloat16*>(base + l.xs_y);
  auto* gu = reinterpret_cast<__nv_bfloat16*>(base + l.gu);
  kern::launch_expert_gather_rows(x, p.pair_token, pairs, hidden, xs_y, stream);
  check_launch("moe_experts (cuBLASLt gather)");
  const int lanes = std::max(1, std::min(cublaslt_lanes(), n_active));
  cublaslt_fork(stream, lanes);
  bool ok = true;
  // Largest experts first, dealt round-robin, so the lanes finish at about the same time.
  std::vector<int> order(n_active);
  for (int i = 0; i < n_active; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t_n[a] > t_n[b]; });
  for (int k = 0; k < n_active && ok; ++k) {
    const int i = order[k], lane = k % lanes, ex = t_expert[i], p0 = t_p0[i], n = t_n[i];
    const cudaStream_t s = cublaslt_lane_stream(lane, stream);
    const DeviceMatrix &g = mats[ex], &u = mats[E + ex], &d = mats[2 * E + ex];
    const __nv_bfloat16* xe = xs_y + int64_t(p0) * hidden;
    __nv_bfloat16* gue = gu + int64_t(p0) * 2 * inter;
    // [gate; up] stored back to back (the loader allocates them in a row) is one GEMM.
    const bool stacked = static_cast<const uint8_t*>(u.data) == static_cast<const uint8_t*>(g.data) + int64_t(inter) * hidden * 2;
    if (stacked) {
      ok = cublaslt_gemm_bf16(g.data, 2 * inter, hidden, hidden, xe, hidden, n, gue, 2 * inter, s, lane);
    } else {
      ok = cublaslt_gemm_bf16(g.data, inter, hidden, hidden, xe, hidden, n, gue, 2 * inter, s, lane) &&
           cublaslt_gemm_bf16(u.data, inter, hidden, hidden, xe, hidden, n, gue + inter, 2 * inter, s, lane);
    }
    if (!ok) break;
    kern::launch_swiglu_inplace(gue, n, inter, s);
    ok = cublaslt_gemm_bf16(d.data, hidden, inter, inter, gue, 2 * inter, n, xs_y + int64_t(p0) * hidden, hidden, s,
                            lane);
  }
  cublaslt_join(stream, lanes);
  check_launch("moe_experts (cuBLASLt experts)");
  if (!ok) return false;  // the built-in path recomputes `out` from scratch after the join
  kern::launch_expert_combine(p, stream);
  check_launch("moe_experts (cuBLASLt combine)");
  return true;
}

}  // namespace

size_t linear_workspace_bytes(int m_max, int64_t max_rows, int64_t max_cols) {
  (void)max_cols;
  // Split-K runs only while the row x token tiles number fewer than 2 x SMs, with splits x tiles
  // <= 4 x SMs, which bounds the fp32 partials by 4 x SMs x one 128 x 128 tile (~35 MB on an
  // H200), and never by more than kMaxSplits x m x rows.
  const int64_t bound = std::min<int64_t>(int64_t(kMaxSplits) * std::max(m_max, 0) * max_rows,
                                          int64_t(4) * sm_count() * kGemmBM * 128);
  return align_up(size_t(bound) * sizeof(float));
}

void linear(const DeviceMatrix& w, const __nv_bfloat16* x, int m, __nv_bfloat16* y,
            const LinearWorkspace& ws, cudaStream_t stream) {
  check_matrix(w, "linear");
  if (m < 0) throw Error("linear: m must be >= 0, got " + std::to_string(m));
  if (m == 0) return;
  if (!x || !y) throw Error("linear: x and y must be device pointers");
  const int sms = sm_count();
  if (!vector_path_ok(w, x)) {
    kern::launch_gemv_scalar(w, x, m, y, sms, stream);
    check_launch("linear (scalar path)");
    return;
  }
  if (m <= kern::gemv_max_tokens()) {
    // Calls meant for the streaming GEMV go to launch_gemv_dense, which tries it first and falls
    // back to the register GEMV where its checks fail.
    const bool stream_first = kern::gemv_stream_on(kern::kGemvStreamDense, m, w.type == WeightType::FP8_E4M3_BLOCK);
    if (!stream_first && gemv_takes_tensor_cores(w, m)) kern::launch_gemv_tc(w, x, m, y, sms, stream);
    else if (!kern::launch_gemv_dense(w, x, m, y, sms, stream)) throw Error("linear: the GEMV did not launch for " + describe(w));
    check_launch("linear (gemv)");
    return;
  }
  if (linear_cublaslt(w, x, m, y, stream)) return;  // large m, bf16 (cublaslt_gemm.h)
  const int bn = tile_tokens_for(m);
  const int64_t tiles = ((w.rows + kGemmBM - 1) / kGemmBM) * ((m + bn - 1) / bn);
  const int64_t k_tiles = (w.cols + kGemmBK - 1) / kGemmBK;
  int64_t splits = 1;
  if (tiles < 2 * sms) {
    // Weight streaming: one block keeps only 3 stages (24 KB) in flight, so give every SM at
    // least two blocks, each keeping at least 4 k-tiles.
    splits = std::min<int64_t>({kMaxSplits, (2 * sms + tiles - 1) / tiles, std::max<int64_t>(1, k_tiles / 4)});
    const int64_t partial_bytes = int64_t(m) * w.rows * int64_t(sizeof(float));
    if (!ws.ptr) splits = 1;
    else splits = std::min<int64_t>(splits, int64_t(ws.bytes) / partial_bytes);
    splits = std::max<int64_t>(splits, 1);
  }
  kern::DenseGemmParams p;
  p.w = w;
  p.x = x;
  p.m = m;
  p.y = y;
  p.k_per_split = ((k_tiles + splits - 1) / splits) * kGemmBK;
  splits = (w.cols + p.k_per_split - 1) / p.k_per_split;
  p.partial = splits > 1 ? static_cast<float*>(ws.ptr) : nullptr;
  kern::launch_gemm_dense(p, bn, static_cast<int>(splits), stream);
  check_launch("linear (gemm)");
}

void linear_group(const LinearJob* jobs, int n_jobs, const __nv_bfloat16* x, int m, const LinearWorkspace& ws,
                  cudaStream_t stream, const AddRmsNormParams* norm) {
  if (n_jobs < 0 || n_jobs > kern::kMaxGemvJobs || (n_jobs > 0 && !jobs))
    throw Error("linear_group: n_jobs must be in [0, " + std::to_string(kern::kMaxGemvJobs) + "], got " +
                std::to_string(n_jobs));
  if (m < 0) throw Error("linear_group: m must be >= 0, got " + std::to_string(m));
  for (int i = 0; i < n_jobs; ++i) {
    check_matrix(jobs[i].w, "linear_group job " + std::to_string(i));
    if (!jobs[i].y) throw Error("linear_group job " + std::to_string(i) + ": y must be a device pointer");
    if (jobs[i].w.cols != jobs[0].w.cols)
      throw Error("linear_group job " + std::to_string(i) + ": weight " + describe(jobs[i].w) +
                  " is not as wide as job 0's " + describe(jobs[0].w) + " (they share x)");
  }
  if (norm && (norm->out != x || norm->n != m || !norm->residual || !norm->weight ||
               (n_jobs > 0 && norm->hidden != jobs[0].w.cols)))
    throw Error("linear_group: the norm must write x (out == x) for all m=" + std::to_string(m) +
                " rows of width " + (n_jobs > 0 ? std::to_string(jobs[0].w.cols) : std::string("?")) +
                " from a residual and a weight, got n=" + std::to_string(norm->n) + " hidden=" +
                std::to_string(norm->hidden));
  if (m == 0) return;
  if (n_jobs == 0) {
    if (norm) launch_add_rmsnorm(*norm, stream);
    return;
  }
  if (!x) throw Error("linear_group: x must be a device pointer");
  // One launch where every job would take the CUDA-core GEMV on its own. FP8 jobs are grouped
  // even where one alone would take the tensor-core GEMV (FP8 q_proj): measured on an H200, the
  // one grouped launch (with the norm folded in) beat the tensor-core q_proj + CUDA-core kv_a
  // by 28 us a decode step (docs/perf/matmul.md); RS_GEMV_AB=nofp8group keeps them apart.
  bool one_launch = n_jobs > 1 && m <= kern::gemv_max_tokens() && !kern::gemv_ab(kern::GemvAb::kNoGroup);
  for (int i = 0; i < n_jobs && one_launch; ++i) {
    const DeviceMatrix& w = jobs[i].w;
    const bool fp8 = w.type == WeightType::FP8_E4M3_BLOCK;
    one_launch = w.type == jobs[0].w.type && vector_path_ok(w, x) &&
                 (!gemv_takes_tensor_cores(w, m) || (fp8 && !kern::gemv_ab(kern::GemvAb::kNoFp8Group)) ||
                  kern::gemv_stream_on(kern::kGemvStreamGroup, m, fp8));
  }
  // The norm as the launch's prologue where the prologue takes it.
  const bool fold = norm && one_launch && !kern::gemv_ab(kern::GemvAb::kNoFold) && gemv_norm_prologue_ok(*norm, m);
  if (norm && !fold) {
    launch_add_rmsnorm(*norm, stream);
    check_launch("linear_group (add + rmsnorm)");
  }
  if (!one_launch) {
    for (int i = 0; i < n_jobs; ++i) linear(jobs[i].w, x, m, jobs[i].y, ws, stream);
    return;
  }
  kern::DenseGemvParams p;
  for (int i = 0; i < n_jobs; ++i) {
    p.w[i] = jobs[i].w;
    p.y[i] = jobs[i].y;
  }
  p.jobs = n_jobs;
  p.x = x;
  p.m = m;
  if (fold) set_gemv_norm_prologue(p, *norm);
  if (!kern::launch_gemv_dense_jobs(p, sm_count(), stream))
    throw Error(std::string("linear_group: the grouped GEMV did not launch (") + (fold ? "with" : "without") +
                " the norm prologue)");
  check_launch(fold ? "linear_group (add + rmsnorm + grouped gemv)" : "linear_group (grouped gemv)");
}

void swiglu(const __nv_bfloat16* gu, int m, int inter, __nv_bfloat16* h, cudaStream_t stream) {
  if (m < 0 || inter <= 0) throw Error("swiglu: bad shape m=" + std::to_string(m) + " inter=" + std::to_string(inter));
  if (m == 0) return;
  if (!gu || !h) throw Error("swiglu: null pointer");
  kern::launch_swiglu(gu, m, inter, h, stream);
  check_launch("swiglu");
}

size_t moe_workspace_bytes(int m_max, int top_k, const MoeExperts& experts) {
  check_experts(experts, top_k);
  const int m_small = std::min(std::max(m_max, 0), kern::kExpertGemvMaxTokens);
  // Room for folded-in shared experts (moe_can_fuse_shared) whatever `experts` says, so a
  // workspace sized from the routed set alone serves the fused calls of batched decode too.
  const int ns = kern::kMaxSharedExperts;
  size_t bytes = expert_gemv_bytes(m_small, top_k, experts.num_experts, experts.inter, ns);
  // Any m above the (tunable) GEMV threshold may take a grouped path with the shared experts
  // folded in, from m = 3 on by default (was sized only above the compiled GEMV maximum of 8:
  // m = 3 with shared experts asked for 15360 bytes of a 12288-byte workspace; experts helper).
  if (m_max > 0) {
    const ExpertGemmLayout l(std::min(m_max, kExpertTcMaxTokens), top_k, experts.num_experts, experts.hidden,
                             experts.inter, 16, ns);
    bytes = std::max(bytes, l.bytes);
  }
  // Any m may take the grouped path (the GEMV limit is tunable); the smallest tile has the
  // most tiles, so size for it and every m <= m_max fits.
  if (m_max > 0) {
    const ExpertGemmLayout l(m_max, top_k, experts.num_experts, experts.hidden, experts.inter, 16);
    bytes = std::max(bytes, l.bytes);
  }
  if (lt_experts_wanted(experts, m_max)) {
    const LtExpertLayout l(m_max, top_k, experts.num_experts, experts.hidden, experts.inter);
    bytes = std::max(bytes, l.bytes);
  }
  return std::max<size_t>(bytes, 256);
}

bool moe_can_fuse_shared(const MoeExperts& experts, int m) {
  if (!kern::expert_decode() || m <= 0 || !shared_unfusable_reason(experts).empty()) return false;
  if (m <= kern::expert_gemv_max_tokens()) return true;               // few-token kernels
  if (experts.type == WeightType::BF16) return m <= kExpertTcMaxTokens;  // grouped TC GEMV or mma tile
  return m <= kExpertTcMaxTokens;                                      // FP8: mma tile with views
}

namespace {

void require_moe_workspace(const MoeWorkspace& ws, size_t need, int m) {
  if (ws.bytes < need)
    throw Error("moe_experts: workspace of " + std::to_string(ws.bytes) + " bytes is below the " +
                std::to_string(need) + " needed for m=" + std::to_string(m));
}

// The few-token expert kernels' params over the workspace (h), after checking it is big enough.
kern::ExpertGemvParams expert_gemv_params(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                                          const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                                          const MoeWorkspace& ws, int n_shared) {
  require_moe_workspace(ws, expert_gemv_bytes(m, top_k, experts.num_experts, experts.inter, n_shared), m);
  kern::ExpertGemvParams p;
  p.experts = experts;
  p.x = x;
  p.m = m;
  p.top_k = top_k;
  p.topk_ids = topk_ids;
  p.topk_weights = topk_weights;
  // RS_ROUTING_COMPACT=0: the general routing path for one token too (A/B runs).
  static const bool compact = kern::env_int("RS_ROUTING_COMPACT", 1, 0, 1) == 1;
  p.compact_routing = compact;
  p.h = static_cast<__nv_bfloat16*>(ws.ptr);
  p.out = out;
  return p;
}

// The grouped (token-tile) expert kernels' params, their tables laid out in the workspace.
kern::ExpertGemmParams expert_gemm_params(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                                          const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                                          const MoeWorkspace& ws, int bn, int n_shared) {
  const ExpertGemmLayout l(m, top_k, experts.num_experts, experts.hidden, experts.inter, bn, n_shared);
  if (l.max_tiles > 65535)
    throw Error("moe_experts: m=" + std::to_string(m) + " needs " + std::to_string(l.max_tiles) +
                " token tiles, above the grid limit of 65535; split the batch");
  require_moe_workspace(ws, l.bytes, m);
  auto* base = static_cast<uint8_t*>(ws.ptr);
  kern::ExpertGemmParams p;
  p.experts = experts;
  p.x = x;
  p.m = m;
  p.top_k = top_k;
  p.topk_ids = topk_ids;
  p.topk_weights = topk_weights;
  p.tile_tokens = bn;
  p.max_tiles = l.max_tiles;
  p.pair_token = reinterpret_cast<int*>(base + l.pair_token);
  p.pair_of = reinterpret_cast<int*>(base + l.pair_of);
  p.tile_expert = reinterpret_cast<int*>(base + l.tile_expert);
  p.tile_p0 = reinterpret_cast<int*>(base + l.tile_p0);
  p.tile_n = reinterpret_cast<int*>(base + l.tile_n);
  p.n_tiles = reinterpret_cast<int*>(base + l.n_tiles);
  p.h = reinterpret_cast<__nv_bfloat16*>(base + l.h);
  p.y = reinterpret_cast<__nv_bfloat16*>(base + l.y);
  p.out = out;
  return p;
}

// Whether the few-token expert kernels (expert_decode.cuh) take m tokens of this type.
bool expert_decode_small(const MoeExperts& experts, int m) {
  return kern::expert_decode() && m <= kern::expert_gemv_max_tokens_for(experts.type == WeightType::FP8_E4M3_BLOCK);
}

// The decode-time expert kernels (expert_decode.cuh), and every call that folds in shared
// experts. Returns false where they do not apply (no shared experts and m beyond them).
bool moe_experts_decode(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                        const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                        const MoeWorkspace& ws, cudaStream_t stream) {
  const int ns = experts.n_shared;
  if (ns != 0 && !moe_can_fuse_shared(experts, m)) {
    const std::string why = shared_unfusable_reason(experts);
    throw Error("moe_experts: cannot fold " + std::to_string(ns) + " shared experts in at m=" + std::to_string(m) +
                (why.empty() ? std::string(" (only up to ") + std::to_string(kExpertTcMaxTokens) + " tokens)" : ": " + why) +
                "; run them with linear() (ask moe_can_fuse_shared first)");
  }
  const bool fp8 = experts.type == WeightType::FP8_E4M3_BLOCK;
  const bool small = expert_decode_small(experts, m);
  const bool tc = expert_tc_gemv_for(experts, m, top_k);
  if (!small && !tc && ns == 0) return false;
  if (small) {
    const kern::ExpertGemvParams p = expert_gemv_params(experts, x, m, top_k, topk_ids, topk_weights, out, ws, ns);
    kern::launch_expert_decode_small(p, fp8, sm_count(), stream);
    check_launch("moe_experts (decode gemv)");
    return true;
  }
  const int bn = tc ? 16 : tile_tokens_for((int64_t(m) * (top_k + ns) + experts.num_experts + ns - 1) /
                                           (experts.num_experts + ns));
  const kern::ExpertGemmParams p = expert_gemm_params(experts, x, m, top_k, topk_ids, topk_weights, out, ws, bn, ns);
  if (tc) kern::launch_expert_decode_grouped(p, sm_count(), stream);
  else kern::launch_expert_gemm(p, fp8, stream);  // the mma.sync tile reads shared views too
  check_launch(tc ? "moe_experts (grouped tensor-core gemv)" : "moe_experts (grouped gemm, shared experts)");
  return true;
}

}  // namespace

bool gemv_vector_path_ok(const DeviceMatrix& w, const void* x) { return vector_path_ok(w, x); }

bool gemv_norm_prologue_ok(const AddRmsNormParams& norm, int m) {
  auto aligned = [](const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; };
  return m <= kern::kGemvNormMaxTokens && int64_t(m) * norm.hidden <= kern::kGemvNormMaxElems && norm.hidden % 4 == 0 &&
         aligned(norm.residual, 16) && aligned(norm.weight, 16) && aligned(norm.delta0, 8) && aligned(norm.delta1, 8) &&
         aligned(norm.delta2, 8);
}

void set_gemv_norm_prologue(kern::DenseGemvParams& p, const AddRmsNormParams& norm) {
  p.norm_residual = norm.residual;
  p.norm_out = norm.out;
  p.norm_delta[0] = norm.delta0;
  p.norm_delta[1] = norm.delta1;
  p.norm_delta[2] = norm.delta2;
  p.norm_weight = norm.weight;
  p.norm_eps = norm.eps;
}

bool moe_experts_decode_params(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                               const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                               const MoeWorkspace& ws, kern::ExpertGemvParams* params) {
  check_experts(experts, top_k);
  if (m <= 0 || !x || !out || !topk_ids || !topk_weights || !ws.ptr || !aligned16(x) || !aligned16(out) ||
      !aligned16(ws.ptr))
    return false;
  if (!expert_decode_small(experts, m)) return false;
  if (experts.n_shared != 0 && !moe_can_fuse_shared(experts, m)) return false;
  *params = expert_gemv_params(experts, x, m, top_k, topk_ids, topk_weights, out, ws, experts.n_shared);
  return true;
}

bool moe_experts_routed(const MoeExperts& experts, const kern::ExpertRouteParams& rt, __nv_bfloat16* out,
                        const MoeWorkspace& ws, cudaStream_t stream) {
  check_experts(experts, rt.r.top_k);
  const __nv_bfloat16* xn = rt.norm.out;
  if (!xn || !out || !ws.ptr || !aligned16(xn) || !aligned16(out) || !aligned16(ws.ptr)) return false;
  if (!expert_decode_small(experts, 1)) return false;
  if (experts.n_shared != 0 && !moe_can_fuse_shared(experts, 1)) return false;
  const kern::ExpertGemvParams p = expert_gemv_params(experts, xn, 1, rt.r.top_k, rt.r.topk_ids, rt.r.topk_weights,
                                                      out, ws, experts.n_shared);
  if (!kern::launch_expert_decode_routed(p, rt, experts.type == WeightType::FP8_E4M3_BLOCK, sm_count(), stream))
    return false;
  check_launch("moe_experts (router folded in)");
  return true;
}

void moe_experts(const MoeExperts& experts, const __nv_bfloat16* x, int m, int top_k,
                 const int* topk_ids, const float* topk_weights, __nv_bfloat16* out,
                 const MoeWorkspace& ws, cudaStream_t stream) {
  check_experts(experts, top_k);
  if (m < 0) throw Error("moe_experts: m must be >= 0, got " + std::to_string(m));
  if (m == 0) return;
  if (!x || !out || !topk_ids || !topk_weights || !ws.ptr)
    throw Error("moe_experts: x, out, topk_ids, topk_weights and the workspace must be device pointers");
  if (!aligned16(x) || !aligned16(out) || !aligned16(ws.ptr))
    throw Error("moe_experts: x, out and the workspace must be 16-byte aligned");
  if (moe_experts_decode(experts, x, m, top_k, topk_ids, topk_weights, out, ws, stream)) return;
  if (moe_experts_cublaslt(experts, x, m, top_k, topk_ids, topk_weights, out, ws, stream)) return;
  const bool fp8 = experts.type == WeightType::FP8_E4M3_BLOCK;
  if (m <= kern::expert_gemv_max_tokens()) {
    const kern::ExpertGemvParams p = expert_gemv_params(experts, x, m, top_k, topk_ids, topk_weights, out, ws, 0);
    kern::launch_expert_gemv(p, fp8, sm_count(), stream);
    check_launch("moe_experts (gemv)");
    return;
  }
  const int bn = tile_tokens_for((int64_t(m) * top_k + experts.num_experts - 1) / experts.num_experts);
  const kern::ExpertGemmParams p = expert_gemm_params(experts, x, m, top_k, topk_ids, topk_weights, out, ws, bn, 0);
  kern::launch_expert_gemm(p, fp8, stream);
  check_launch("moe_experts (grouped gemm)");
}

bool expert_view_at(const DeviceMatrix& first, const DeviceMatrix& w, int64_t offset) {
  const auto at = [](const void* ptr) { return reinterpret_cast<intptr_t>(ptr); };
  return w.type == first.type && w.rows == first.rows && w.cols == first.cols && w.block_rows == first.block_rows &&
         w.block_cols == first.block_cols && at(w.data) == at(first.data) + offset &&
         (w.type != WeightType::FP8_E4M3_BLOCK || at(w.scale_inv) == at(first.scale_inv) + offset);
}

void validate_moe_experts(const MoeExperts& e) {
  check_experts(e, 1);
  const char* names[3] = {"gate", "up", "down"};
  const DeviceMatrix* arrays[3] = {e.gate, e.up, e.down};
  std::vector<DeviceMatrix> host(e.num_experts);
  for (int k = 0; k < 3; ++k) {
    const cudaError_t err = cudaMemcpy(host.data(), arrays[k], sizeof(DeviceMatrix) * e.num_experts,
                                       cudaMemcpyDeviceToHost);
    if (err != cudaSuccess)
      throw Error(std::string("moe_experts: cannot read the ") + names[k] + " array: " + cudaGetErrorString(err));
    for (int i = 0; i < e.num_experts; ++i) {
      const DeviceMatrix& w = host[i];
      const std::string what = "expert " + std::to_string(i) + " " + names[k];
      check_matrix(w, what);
      const int64_t want_rows = k == 2 ? e.hidden : e.inter, want_cols = k == 2 ? e.inter : e.hidden;
      if (w.rows != want_rows || w.cols != want_cols)
        throw Error(what + ": shape " + describe(w) + ", expected [" + std::to_string(want_rows) + " x " +
                    std::to_string(want_cols) + "]");
      if (w.type != e.type) throw Error(what + ": type " + describe(w) + " differs from the expert set's type");
      if (!aligned16(w.data)) throw Error(what + ": data is not 16-byte aligned");
      if (w.type == WeightType::FP8_E4M3_BLOCK && w.block_cols % 16 != 0)
        throw Error(what + ": FP8 block_cols must be a multiple of 16, got " + std::to_string(w.block_cols));
      // The kernels compute a routed expert's view from first[k] and the stride (MoeExperts): it
      // must be the array's view exactly.
      if (e.stride != 0 && !expert_view_at(e.first[k], w, int64_t(i) * e.stride))
        throw Error(what + ": not at expert 0's view plus " + std::to_string(i) + " * stride " +
                    std::to_string(e.stride) + " bytes");
    }
  }
}

}  // namespace rs::cuda
