// __global__ wrappers and launchers for the dense matmul ops (gemv.cuh, gemm.cuh, swiglu.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/common/carveout.h"
#include "kernels/common/env_int.h"
#include "kernels/common/sm_count.h"
#include "kernels/common/smem_optin.h"
#include "kernels/ops/gemm.cuh"
#include "kernels/ops/gemv.cuh"
#include "kernels/ops/gemv_stream.cuh"
#include "kernels/ops/gemv_tc.cuh"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/swiglu.cuh"

namespace rs::kern {
namespace {

// One-row, few-token variants are latency-bound on small matrices: ask for 3 resident blocks
// (<= 85 registers) so 24 warps per SM keep loads in flight (first run: 68 registers, 3 blocks).
template <int RPW, int MT>
constexpr int gemv_min_blocks() { return RPW == 1 && MT <= 2 ? 3 : 1; }

template <bool kFp8, int RPW, int MT, int U, bool kPdl, class OutT>
__global__ void __launch_bounds__(kGemvThreads, gemv_min_blocks<RPW, MT>())
    gemv_dense_kernel(const __grid_constant__ DenseGemvParams p) {
  __shared__ float red[kGemvWarps * RPW * MT];
  gemv_dense_op<kFp8, RPW, MT, U, kPdl, OutT>(p, red);
  if constexpr (kPdl) pdl_probe_mark(kProbeEnd);
}

// The same GEMV with the attention input's add + RMSNorm as its prologue (few tokens: the
// decode q_proj + kv_a launch); RPW rows a warp as in gemv_dense_kernel.
template <bool kFp8, int RPW, int MT, int U, bool kPdl>
__global__ void __launch_bounds__(kGemvThreads, gemv_min_blocks<RPW, MT>())
    gemv_norm_dense_kernel(const __grid_constant__ DenseGemvParams p) {
  __shared__ float red[kGemvWarps * RPW * MT];
  __shared__ __align__(16) __nv_bfloat16 xs[kGemvNormMaxElems];
  gemv_dense_op<kFp8, RPW, MT, U, kPdl, __nv_bfloat16, true>(p, red, xs);
  if constexpr (kPdl) pdl_probe_mark(kProbeEnd);
}

// The weight-streaming GEMV (gemv_stream.cuh): one block per SM, a bulk-copy ring.
template <bool kFp8, int MT, class OutT, bool kNorm>
__global__ void __launch_bounds__(kStreamThreads, 1)
    gemv_stream_kernel(const __grid_constant__ DenseGemvParams p, const __grid_constant__ GemvStreamGeom g) {
  extern __shared__ __align__(128) uint8_t stream_smem[];
  gemv_stream_op<kFp8, MT, OutT, kNorm>(p, g, stream_smem);
}

// The norm prologue's last-block ticket: zero at module load, re-zeroed by every launch's last
// block. One per device; launches that use it run on one stream at a time (a forward pass).
__device__ unsigned g_gemv_norm_counter;

template <bool kFp8, int U, bool kPdl>
__global__ void __launch_bounds__(kTcGemvThreads, 2) gemv_tc_kernel(rs::cuda::DeviceMatrix w,
                                                                  const __nv_bfloat16* x, int m,
                                                                  __nv_bfloat16* y) {
  __shared__ float red[kTcGemvWarps * 32 * 4];
  gemv_tc_op<kFp8, U, kPdl>(w, x, m, y, red);
}

__global__ void __launch_bounds__(kGemvThreads) gemv_scalar_kernel(rs::cuda::DeviceMatrix w,
                                                                   const __nv_bfloat16* x, int m,
                                                                   __nv_bfloat16* y) {
  gemv_scalar_op(w, x, m, y);
}

template <bool kFp8, int BN>
__global__ void __launch_bounds__(mma::THREADS, 2) gemm_dense_kernel(DenseGemmParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  dense_gemm_op<kFp8, BN>(p, smem);
}

__global__ void splitk_reduce_kernel(const float* partial, int splits, int64_t n, __nv_bfloat16* y) {
  pdl_launch_dependents();
  pdl_wait();
  splitk_reduce_op(partial, splits, n, y);
}

__global__ void swiglu_kernel(const __nv_bfloat16* gu, int m, int inter, __nv_bfloat16* h) {
  pdl_launch_dependents();
  pdl_wait();
  swiglu_op(gu, m, inter, h);
}

bool g_matmul_pdl = true;

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27; x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(uint16_t* p, size_t n16, uint64_t seed, bool fp8) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ULL + i);
    if (fp8) {
      auto byte = [](uint64_t b) {
        const uint32_t e = uint32_t(b % 11), m = uint32_t((b >> 8) & 7), s = uint32_t((b >> 12) & 1);
        const uint32_t v = (s << 7) | (e << 3) | m;
        return (v & 0x7f) == 0 ? 0x38u : v;
      };
      p[i] = uint16_t(byte(r) | (byte(r >> 16) << 8));
    } else {
      const float f = 0.01f + 0.99f * float(r >> 40) * (1.0f / 16777216.0f);
      p[i] = __bfloat16_as_ushort(__float2bfloat16_rn((r & 1) ? -f : f));
    }
  }
}


int blocks_for(int64_t work_items, int items_per_block, int sm_count, int max_waves) {
  const int64_t need = (work_items + items_per_block - 1) / items_per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(need, int64_t(sm_count) * max_waves)));
}

// The norm prologue's counter on the current device (per host thread: ranks launch from their
// own threads, so a shared cache would race); nullptr when it cannot be found.
unsigned* gemv_norm_counter() {
  thread_local unsigned* counter[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  if (!counter[dev] && cudaGetSymbolAddress(reinterpret_cast<void**>(&counter[dev]), g_gemv_norm_counter) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return counter[dev];
}

template <bool kFp8, int RPW, int MT, int U, bool kPdl, class OutT>
bool gemv_dense_launch_mt(DenseGemvParams& p, int sm_count, cudaStream_t s) {
  void (*kernel)(DenseGemvParams) = gemv_dense_kernel<kFp8, RPW, MT, U, kPdl, OutT>;
  static const int per_sm_plain = resident_blocks_per_sm(kernel, kGemvThreads);
  int per_sm = per_sm_plain;
  if constexpr (MT <= kGemvNormMaxTokens && std::is_same_v<OutT, __nv_bfloat16>) {
    if (p.norm_residual) {
      kernel = gemv_norm_dense_kernel<kFp8, RPW, MT, U, kPdl>;
      static const int per_sm_norm = resident_blocks_per_sm(kernel, kGemvThreads);
      per_sm = per_sm_norm;
      p.norm_counter = gemv_norm_counter();
      if (!p.norm_counter) return false;
    }
  }
  if (p.norm_residual && !p.norm_counter) return false;  // no norm variant for this shape
  int grid = gemv_dense_geometry(p, RPW, int64_t(per_sm) * sm_count);
  if (gemv_ab(GemvAb::kOldGrid)) {
    // Earlier rule: split the width until every SM has two blocks' worth of row groups, one block
    // per block group (a second, partly empty wave when that exceeds the resident blocks).
    const int64_t groups = p.group_end[p.jobs - 1], nchunks = p.w[0].cols / (kFp8 ? 16 : 8);
    int ks = 1;
    while (ks < kGemvWarps && groups * ks / kGemvWarps < 2 * sm_count && nchunks / (2 * ks) >= 32) ks *= 2;
    p.ks = ks;
    grid = blocks_for(groups * ks, kGemvWarps, sm_count, 32);
  }
  apply_carveout(kernel, "gemv");
  launch_pdl(kernel, dim3(grid), dim3(kGemvThreads), 0, s, p);
  return true;
}

// ---- The weight-streaming GEMV: shape checks, geometry, launch ------------------------------
std::atomic<uint64_t> g_gemv_stream_launches{0};

template <bool kFp8, int MT, class OutT, bool kNorm>
bool gemv_stream_launch_typed(const DenseGemvParams& p, const GemvStreamGeom& g, int grid, size_t smem,
                              cudaStream_t s) {
  void (*kernel)(DenseGemvParams, GemvStreamGeom) = gemv_stream_kernel<kFp8, MT, OutT, kNorm>;
  if (!allow_dynamic_smem(gemv_stream_kernel<kFp8, MT, OutT, kNorm>, kStreamMaxSmem)) return false;
  apply_carveout(kernel, "gemv");
  launch_pdl(kernel, dim3(grid), dim3(kStreamThreads), smem, s, p, g);
  g_gemv_stream_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <bool kFp8, class OutT, bool kNorm>
bool gemv_stream_launch_mt(const DenseGemvParams& p, const GemvStreamGeom& g, int grid, size_t smem,
                           cudaStream_t s) {
  return p.m == 1 ? gemv_stream_launch_typed<kFp8, 1, OutT, kNorm>(p, g, grid, smem, s)
                  : gemv_stream_launch_typed<kFp8, 2, OutT, kNorm>(p, g, grid, smem, s);
}

bool aligned_to(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

}  // namespace

// Refused: more than 2 tokens, shapes or addresses that are not 16-byte multiples (bulk copies and
// the 16-byte shared loads need them), FP8 scale blocks a chunk would straddle, x or a ring that
// does not fit shared memory.
bool gemv_stream_plan(DenseGemvParams& p, GemvStreamGeom& g, size_t& smem) {
  if (p.m < 1 || p.m > kGemvStreamMaxTokens || p.jobs < 1 || p.jobs > kMaxGemvJobs) return false;
  const rs::cuda::DeviceMatrix& w0 = p.w[0];
  const bool fp8 = w0.type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  if (p.out_fp32 && (fp8 || p.norm_residual)) return false;
  const int64_t cols = w0.cols, chunk = fp8 ? 16 : 8;
  if (cols <= 0 || cols % chunk != 0) return false;
  int64_t rows = 0;
  for (int j = 0; j < p.jobs; ++j) {
    const rs::cuda::DeviceMatrix& w = p.w[j];
    if (w.type != w0.type || w.cols != cols || w.rows <= 0 || !w.data || !aligned_to(w.data, 16) || !p.y[j]) return false;
    if (fp8 && (!w.scale_inv || w.block_rows <= 0 || w.block_cols <= 0 || w.block_cols % 16 != 0)) return false;
    p.group_end[j] = rows += w.rows;  // one row a group: cumulative rows
  }
  if (p.norm_residual) {
    if (int64_t(p.m) * cols > kGemvNormMaxElems || cols % 4 != 0) return false;
    p.norm_counter = gemv_norm_counter();
    if (!p.norm_counter) return false;
    static const int ticket0 = env_int("RS_GEMV_TICKET0", 0, 0, 1);
    p.norm_ticket_thread0 = ticket0;
  } else if (!p.x || !aligned_to(p.x, 16)) {
    return false;
  }
  g = GemvStreamGeom{};
  g.total_rows = rows;
  g.row_bytes = static_cast<uint32_t>(cols * (fp8 ? 1 : 2));
  const int64_t ring_bytes = int64_t(gemv_stream_ring_kb()) * 1024;
  const int64_t stage_target = ring_bytes / kStreamStages;
  const int64_t slot_target = stage_target / kStreamConsumerWarps;
  if (g.row_bytes <= slot_target) {  // whole rows, 8 or a multiple of 8 of them a stage
    g.pieces = 1;
    g.piece_bytes = g.row_bytes;
    g.rows_per_stage = kStreamConsumerWarps * static_cast<int>(slot_target / g.row_bytes);
  } else {  // column pieces of 8 rows; a multiple of 512 bytes keeps the 32 lanes' chunks even
    g.rows_per_stage = kStreamConsumerWarps;
    g.piece_bytes = static_cast<uint32_t>(std::max<int64_t>(512, slot_target / 512 * 512));
    g.pieces = static_cast<int>((g.row_bytes + g.piece_bytes - 1) / g.piece_bytes);
  }
  g.stage_bytes = static_cast<uint32_t>(g.rows_per_stage) * g.piece_bytes;
  g.xs_offset = static_cast<uint32_t>(kStreamStages) * g.stage_bytes;
  // Stages copied before griddepcontrol.wait. All of a share that fits the ring was measured
  // slower than part of it: the copies queue ahead of the loads that end the predecessor's chain
  // and of this launch's own input loads after the wait (bf16 V2-Lite b1 on an H200, 128 KB ring:
  // two stages for the q/kv launch with the norm prologue and one for the others, 1.916-1.930
  // against 1.951-1.952 ms with all four; none for the others, or one for q/kv, slower).
  // RS_GEMV_PREWAIT_NORM and RS_GEMV_PREWAIT set them for A/B runs.
  static const int prewait_norm = env_int("RS_GEMV_PREWAIT_NORM", kStreamPrewaitNormStages, 0, kStreamStages);
  static const int prewait = env_int("RS_GEMV_PREWAIT", kStreamPrewaitStages, 0, kStreamStages);
  g.prewait = static_cast<uint32_t>(p.norm_residual ? prewait_norm : prewait);
  smem = g.xs_offset + size_t(p.m) * cols * 2;
  return smem <= size_t(kStreamMaxSmem) && g.stage_bytes < (1u << 20);  // mbarrier tx-count limit
}

namespace {
// Launches the streaming GEMV for p, or returns false (nothing launched) where gemv_stream_plan
// refuses it; the caller then takes the register GEMV.
bool gemv_stream_launch(DenseGemvParams p, int sm_count, cudaStream_t s) {
  GemvStreamGeom g;
  size_t smem = 0;
  if (sm_count <= 0 || !gemv_stream_plan(p, g, smem)) return false;
  const bool fp8 = p.w[0].type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  // One block per SM, never more blocks than groups of 8 rows (each block a few rows per warp).
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(sm_count, (g.total_rows + kStreamConsumerWarps - 1) / kStreamConsumerWarps)));
  if (p.norm_residual) {
    return fp8 ? gemv_stream_launch_mt<true, __nv_bfloat16, true>(p, g, grid, smem, s)
               : gemv_stream_launch_mt<false, __nv_bfloat16, true>(p, g, grid, smem, s);
  }
  if (p.out_fp32) return gemv_stream_launch_mt<false, float, false>(p, g, grid, smem, s);
  return fp8 ? gemv_stream_launch_mt<true, __nv_bfloat16, false>(p, g, grid, smem, s)
             : gemv_stream_launch_mt<false, __nv_bfloat16, false>(p, g, grid, smem, s);
}

template <bool kFp8, int RPW, bool kPdl, class OutT>
bool gemv_dense_launch(DenseGemvParams& p, int sm_count, cudaStream_t s) {
  constexpr int U = kFp8 ? 4 : 8;  // 16-byte chunks per lane per row: a whole 2048-wide row
  if (p.m <= 1) return gemv_dense_launch_mt<kFp8, RPW, 1, U, kPdl, OutT>(p, sm_count, s);
  if (p.m <= 2) return gemv_dense_launch_mt<kFp8, RPW, 2, U, kPdl, OutT>(p, sm_count, s);
  if (p.m <= 4) return gemv_dense_launch_mt<kFp8, RPW, 4, U, kPdl, OutT>(p, sm_count, s);
  return gemv_dense_launch_mt<kFp8, RPW, 8, U, kPdl, OutT>(p, sm_count, s);
}

template <bool kFp8, int RPW, class OutT>
bool gemv_dense_pdl(DenseGemvParams& p, int sm_count, cudaStream_t s) {
  return matmul_pdl() ? gemv_dense_launch<kFp8, RPW, true, OutT>(p, sm_count, s)
                      : gemv_dense_launch<kFp8, RPW, false, OutT>(p, sm_count, s);
}

template <bool kFp8, int BN>
void gemm_dense_bn(const DenseGemmParams& p, int splits, cudaStream_t s) {
  constexpr int smem = mma::SmemLayout<kFp8, BN>::bytes;
  // A refusal shows up as a launch error, which the caller checks.
  (void)allow_dynamic_smem(gemm_dense_kernel<kFp8, BN>, smem);
  const dim3 grid(static_cast<unsigned>((p.w.rows + mma::BM - 1) / mma::BM),
                  static_cast<unsigned>((p.m + BN - 1) / BN), static_cast<unsigned>(splits));
  launch_pdl(gemm_dense_kernel<kFp8, BN>, grid, dim3(mma::THREADS), smem, s, p);
}

template <bool kFp8>
void gemm_dense_typed(const DenseGemmParams& p, int bn, int splits, cudaStream_t s) {
  switch (bn) {
    case 16: gemm_dense_bn<kFp8, 16>(p, splits, s); break;
    case 32: gemm_dense_bn<kFp8, 32>(p, splits, s); break;
    case 64: gemm_dense_bn<kFp8, 64>(p, splits, s); break;
    default: gemm_dense_bn<kFp8, 128>(p, splits, s); break;
  }
}

}  // namespace

int gemv_dense_geometry(DenseGemvParams& p, int rows_per_warp, int64_t resident_blocks) {
  int64_t groups = 0;
  for (int j = 0; j < p.jobs; ++j) p.group_end[j] = groups += (p.w[j].rows + rows_per_warp - 1) / rows_per_warp;
  const int64_t nchunks = p.w[0].cols / (p.w[0].type == rs::cuda::WeightType::FP8_E4M3_BLOCK ? 16 : 8);
  auto blocks = [&](int ks) { return (groups * ks + kGemvWarps - 1) / kGemvWarps; };
  // Split the width as far as the work still fits one wave of resident blocks (more warps in
  // flight for narrow matrices such as kv_a_proj), keeping >= 32 chunks a slice; then launch at
  // most one wave and let the balanced shares cover the rest.
  int ks = 1;
  while (ks < kGemvWarps && blocks(2 * ks) <= resident_blocks && nchunks / (2 * ks) >= 32) ks *= 2;
  p.ks = ks;
  return static_cast<int>(std::max<int64_t>(1, std::min(blocks(ks), resident_blocks)));
}

bool matmul_pdl() { return g_matmul_pdl; }
void set_matmul_pdl(bool on) { g_matmul_pdl = on; }

namespace {
int g_gemv_max_tokens = kGemvDefaultMaxTokens;
bool g_gemv_tc = true;
int g_expert_gemv_max_tokens = kExpertGemvDefaultMaxTokens;
int g_expert_gemv_max_tokens_bf16 = kExpertGemvDefaultMaxTokensBf16;
}  // namespace
int gemv_max_tokens() { return g_gemv_max_tokens; }
int expert_gemv_max_tokens() { return std::max(g_expert_gemv_max_tokens, g_expert_gemv_max_tokens_bf16); }
int expert_gemv_max_tokens_for(bool fp8) { return fp8 ? g_expert_gemv_max_tokens : g_expert_gemv_max_tokens_bf16; }
void set_gemv_max_tokens(int linear_m, int experts_m) {
  g_gemv_max_tokens = std::clamp(linear_m, 0, kGemvMaxTokens);
  g_expert_gemv_max_tokens = g_expert_gemv_max_tokens_bf16 = std::clamp(experts_m, 0, kExpertGemvMaxTokens);
}
GemvThresholds gemv_thresholds() { return {g_gemv_max_tokens, g_expert_gemv_max_tokens, g_expert_gemv_max_tokens_bf16}; }
void set_gemv_thresholds(const GemvThresholds& t) {
  g_gemv_max_tokens = std::clamp(t.linear, 0, kGemvMaxTokens);
  g_expert_gemv_max_tokens = std::clamp(t.experts_fp8, 0, kExpertGemvMaxTokens);
  g_expert_gemv_max_tokens_bf16 = std::clamp(t.experts_bf16, 0, kExpertGemvMaxTokens);
}

namespace {
// Calls fn(token) for each comma-separated token of an environment value.
template <class F>
void for_each_token(const std::string& s, F&& fn) {
  for (size_t b = 0; b <= s.size();) {
    const size_t e = std::min(s.find(',', b), s.size());
    fn(s.substr(b, e - b));
    b = e + 1;
  }
}

constexpr unsigned kGemvAbCount = static_cast<unsigned>(GemvAb::kCount);
const char* const kGemvAbNames[kGemvAbCount] = {"oldgrid",  "nogroup", "oldlmhead",    "nofp8group",
                                                "nofold",   "nofp8tc", "nofp8normpair", "fp8tc1"};
unsigned parse_gemv_ab() {
  const char* v = std::getenv("RS_GEMV_AB");
  unsigned bits = 0;
  for_each_token(v ? v : "", [&](const std::string& t) {
    for (unsigned i = 0; i < kGemvAbCount; ++i)
      if (t == kGemvAbNames[i]) bits |= 1u << i;
  });
  return bits;
}
const unsigned g_gemv_ab = parse_gemv_ab();
}  // namespace

bool gemv_ab(GemvAb which) { return g_gemv_ab & (1u << static_cast<unsigned>(which)); }

namespace {
// Where the streaming GEMV runs (RS_GEMV_STREAM, read once; set_gemv_stream for tests and A/B):
// a comma list of "group" (grouped launches, the q/kv + norm one), "dense" (single-matrix
// linear() calls: o_proj, the dense MLP), "lmhead" (fp32 outputs), "fp8" (FP8 weights too), "m2"
// (2-token calls too), or "all" / "none" (also "1" / "0"). Default: kGemvStreamDefaultUses.
unsigned parse_gemv_stream() {
  const char* v = std::getenv("RS_GEMV_STREAM");
  if (!v) return kGemvStreamDefaultUses;
  unsigned bits = 0;
  for_each_token(v, [&](const std::string& t) {
    if (t == "all" || t == "1") bits |= kGemvStreamAll;
    else if (t == "group") bits |= kGemvStreamGroup;
    else if (t == "dense") bits |= kGemvStreamDense;
    else if (t == "lmhead") bits |= kGemvStreamLmHead;
    else if (t == "fp8") bits |= kGemvStreamFp8;
    else if (t == "m2") bits |= kGemvStreamTwoTokens;
  });
  return bits;
}
int parse_gemv_stream_ring_kb() {
  const char* v = std::getenv("RS_GEMV_STREAM_RING_KB");
  const int kb = v ? std::atoi(v) : kGemvStreamDefaultRingKb;
  return std::clamp(kb, 8, 192);
}
unsigned g_gemv_stream_uses = parse_gemv_stream();
int g_gemv_stream_ring_kb = parse_gemv_stream_ring_kb();
}  // namespace

unsigned gemv_stream_uses() { return g_gemv_stream_uses; }
void set_gemv_stream_uses(unsigned uses) { g_gemv_stream_uses = uses & kGemvStreamAll; }
int gemv_stream_ring_kb() { return g_gemv_stream_ring_kb; }
void set_gemv_stream_ring_kb(int kb) { g_gemv_stream_ring_kb = std::clamp(kb, 8, 192); }
bool gemv_stream_on(unsigned use, int m, bool fp8) {
  return (g_gemv_stream_uses & use) && (!fp8 || (g_gemv_stream_uses & kGemvStreamFp8)) &&
         (m == 1 || (m == 2 && (g_gemv_stream_uses & kGemvStreamTwoTokens)));
}

bool launch_gemv_stream(const DenseGemvParams& p, int sm_count, cudaStream_t s) {
  return gemv_stream_launch(p, sm_count, s);
}
uint64_t gemv_stream_launches() { return g_gemv_stream_launches.load(std::memory_order_relaxed); }

bool launch_gemv_dense_jobs(DenseGemvParams p, int sm_count, cudaStream_t s) {
  if (p.jobs <= 0 || p.jobs > kMaxGemvJobs || p.m <= 0) return false;
  const unsigned use = p.out_fp32 ? kGemvStreamLmHead : (p.jobs > 1 || p.norm_residual) ? kGemvStreamGroup : kGemvStreamDense;
  if (gemv_stream_on(use, p.m, p.w[0].type == rs::cuda::WeightType::FP8_E4M3_BLOCK) && gemv_stream_launch(p, sm_count, s))
    return true;
  // Two rows per warp doubles the loads in flight, but only pays when there are enough rows
  // to give every SM several warps. FP8 rows are half the bytes, so FP8 pairs rows from half as
  // many rows on.
  const bool fp8 = p.w[0].type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  int64_t rows = 0;
  for (int j = 0; j < p.jobs; ++j) rows += p.w[j].rows;
  // The norm prologue's launch pairs rows only for FP8, where an item's bytes are what a warp
  // keeps in flight per round trip (as the FP8 expert items; RS_GEMV_AB=nofp8normpair for A/B).
  const bool pair_ok = !p.norm_residual || (fp8 && !gemv_ab(GemvAb::kNoFp8NormPair));
  const bool two_rows = pair_ok && rows >= int64_t(sm_count) * kGemvWarps * 2 * (fp8 ? 1 : 2);
  if (p.out_fp32) {  // bf16 weights only (the lm_head and router weights); see matmul_launch.h
    if (fp8) return false;
    return two_rows ? gemv_dense_pdl<false, 2, float>(p, sm_count, s) : gemv_dense_pdl<false, 1, float>(p, sm_count, s);
  }
  if (fp8)
    return two_rows ? gemv_dense_pdl<true, 2, __nv_bfloat16>(p, sm_count, s)
                    : gemv_dense_pdl<true, 1, __nv_bfloat16>(p, sm_count, s);
  return two_rows ? gemv_dense_pdl<false, 2, __nv_bfloat16>(p, sm_count, s)
                  : gemv_dense_pdl<false, 1, __nv_bfloat16>(p, sm_count, s);
}

bool launch_gemv_dense(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x, int m,
                       __nv_bfloat16* y, int sm_count, cudaStream_t s) {
  DenseGemvParams p;
  p.w[0] = w;
  p.y[0] = y;
  p.jobs = 1;
  p.x = x;
  p.m = m;
  return launch_gemv_dense_jobs(p, sm_count, s);
}

bool gemv_tc_ok(const rs::cuda::DeviceMatrix& w) {
  if (!g_gemv_tc) return false;
  if (w.type == rs::cuda::WeightType::BF16) return true;
  return w.block_rows % 16 == 0 && w.block_cols % 64 == 0;
}
void set_gemv_tc(bool on) { g_gemv_tc = on; }

void launch_gemv_tc(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x, int m,
                    __nv_bfloat16* y, int sm_count, cudaStream_t s) {
  // Two resident blocks per SM (launch bounds), each looping over 16-row tiles.
  const int64_t tiles = (w.rows + 15) / 16;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles, int64_t(sm_count) * 2))), b(kTcGemvThreads);
  const bool fp8 = w.type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  void (*kernel)(rs::cuda::DeviceMatrix, const __nv_bfloat16*, int, __nv_bfloat16*) =
      fp8 ? (matmul_pdl() ? gemv_tc_kernel<true, 4, true> : gemv_tc_kernel<true, 4, false>)
          : (matmul_pdl() ? gemv_tc_kernel<false, 8, true> : gemv_tc_kernel<false, 8, false>);
  apply_carveout(kernel, "gemv");
  launch_pdl(kernel, grid, b, 0, s, w, x, m, y);
}

void launch_gemv_scalar(const rs::cuda::DeviceMatrix& w, const __nv_bfloat16* x, int m,
                        __nv_bfloat16* y, int sm_count, cudaStream_t s) {
  const int grid = blocks_for(w.rows * m, kGemvWarps, sm_count, 32);
  launch_pdl(gemv_scalar_kernel, dim3(grid), dim3(kGemvThreads), 0, s, w, x, m, y);
}

void launch_gemm_dense(const DenseGemmParams& p, int tile_tokens, int splits, cudaStream_t s) {
  if (p.w.type == rs::cuda::WeightType::FP8_E4M3_BLOCK) gemm_dense_typed<true>(p, tile_tokens, splits, s);
  else gemm_dense_typed<false>(p, tile_tokens, splits, s);
  if (splits > 1) {
    const int64_t n = int64_t(p.m) * p.w.rows;
    const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
    launch_pdl(splitk_reduce_kernel, dim3(grid), dim3(256), 0, s, static_cast<const float*>(p.partial), splits, n, p.y);
  }
}

void launch_fill_random(void* p, size_t bytes, uint64_t seed, bool fp8, cudaStream_t s) {
  fill_random_kernel<<<4096, 256, 0, s>>>(static_cast<uint16_t*>(p), bytes / 2, seed, fp8);
}

void launch_swiglu(const __nv_bfloat16* gu, int m, int inter, __nv_bfloat16* h, cudaStream_t s) {
  const int64_t n = int64_t(m) * inter;
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 4096)));
  launch_pdl(swiglu_kernel, dim3(grid), dim3(256), 0, s, gu, m, inter, h);
}

}  // namespace rs::kern
