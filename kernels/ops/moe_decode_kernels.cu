// __global__ wrappers and launchers for the decode-time expert kernels (expert_decode.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/ops/expert_decode.cuh"
#include "kernels/ops/expert_stream.cuh"
#include "kernels/ops/expert_gemm.cuh"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/moe_decode_launch.h"

namespace rs::kern {

static_assert(kMaxSharedExperts == kMaxSharedSlots, "one limit for host and device");

namespace {

// RS_EXPERT_DECODE=0 starts a process with the earlier expert kernels (A/B runs of whole
// forward steps from one binary); set_expert_decode() switches at run time.
bool expert_decode_default() {
  const char* v = std::getenv("RS_EXPERT_DECODE");
  return !(v && v[0] == '0');
}
bool g_expert_decode = expert_decode_default();

// RS_EXPERT_STREAM=1 starts a process with the bulk-copy streaming few-token kernels
// (expert_stream.cuh) for m <= 2 instead of the register-load ones; set_expert_stream() switches
// at run time. Default off: measured slower in the decode graph (docs/perf/cuda.md, 2026-11-30
// 06:22 UTC). RS_EXPERT_STREAM_KB (ring bytes per SM, default 192 KB) and RS_EXPERT_STREAM_BPS
// (blocks per SM, default 1) are for A/B runs of the ring's shape.
int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) return fallback;
  return static_cast<int>(x);
}
bool g_expert_stream = env_int("RS_EXPERT_STREAM", 0, 0, 1) != 0;
const int g_stream_ring_kb = env_int("RS_EXPERT_STREAM_KB", 192, 16, 220);
const int g_stream_bps = env_int("RS_EXPERT_STREAM_BPS", 1, 1, 4);
std::atomic<uint64_t> g_stream_launches{0};


// One and two tokens fit 2 blocks of 256 threads per SM (<= 128 registers); more tokens hold
// more partial sums and get one.
template <int MT>
constexpr int small_min_blocks() { return MT <= 2 ? 2 : 1; }

template <bool kFp8, int MT, int U>
__global__ void __launch_bounds__(kGemvThreads, small_min_blocks<MT>()) expert_decode_gate_up_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  fused_gate_up_op<kFp8, MT, U>(p, sr);
}

template <bool kFp8, int MT, int U>
__global__ void __launch_bounds__(kGemvThreads, small_min_blocks<MT>()) expert_decode_down_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  __shared__ float red[kGemvWarps * kDownRows * MT];
  fused_down_op<kFp8, MT, U>(p, sr, red);
}

template <bool kFp8, int MT>
__global__ void __launch_bounds__(kExpertStreamThreads, 1) expert_stream_gate_up_kernel(ExpertGemvParams p, ExpertStreamCfg c) {
  __shared__ SmallRouting sr;
  __shared__ BulkRing<kExpertStreamStages> ring;
  extern __shared__ __align__(128) uint8_t expert_stream_smem[];
  stream_gate_up_op<kFp8, MT>(p, c, sr, ring, expert_stream_smem);
}

template <bool kFp8, int MT>
__global__ void __launch_bounds__(kExpertStreamThreads, 1) expert_stream_down_kernel(ExpertGemvParams p, ExpertStreamCfg c) {
  __shared__ SmallRouting sr;
  __shared__ BulkRing<kExpertStreamStages> ring;
  extern __shared__ __align__(128) uint8_t expert_stream_smem[];
  stream_down_op<kFp8, MT>(p, c, sr, ring, expert_stream_smem,
                           reinterpret_cast<float*>(expert_stream_smem + size_t(kExpertStreamStages) * c.stage_bytes));
}

__global__ void __launch_bounds__(kMaxExperts) expert_decode_group_kernel(ExpertGemmParams p) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ GroupSmem s;
  expert_group_op(p, s);
}

template <int U>
__global__ void __launch_bounds__(kExpertTcThreads, 3) expert_tc_gate_up_kernel(ExpertGemmParams p) {
  expert_tc_gate_up_op<U>(p);
}

template <int U>
__global__ void __launch_bounds__(kExpertTcThreads, 4) expert_tc_down_kernel(ExpertGemmParams p) {
  expert_tc_down_op<U>(p);
}

__global__ void expert_decode_combine_kernel(ExpertGemmParams p) {
  pdl_launch_dependents();
  pdl_wait();
  expert_combine_op(p);
}

// Resident blocks per SM of a kernel (asked once per instantiation, outside any capture in
// practice: the first call is a warm-up), at least 1.
template <class K>
int resident_blocks(K kernel, int threads) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0) != cudaSuccess) {
    cudaGetLastError();
    n = 1;
  }
  return std::max(n, 1);
}

template <bool kFp8, int MT>
void small_mt(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  // Weight chunks per lane per batch: a whole 2048-wide gate/up row (bf16 256 chunks, FP8 128);
  // for down one batch covers a whole 1408-wide row of every kDownRows rows (bf16 176 <= 192,
  // FP8 88 <= 96).
  constexpr int U = kFp8 ? 4 : 8, UD = kFp8 ? 3 : 6;
  auto* gate_up = expert_decode_gate_up_kernel<kFp8, MT, U>;
  auto* down = expert_decode_down_kernel<kFp8, MT, UD>;
  static const int occ_gu = resident_blocks(gate_up, kGemvThreads);
  static const int occ_d = resident_blocks(down, kGemvThreads);
  const int64_t slots = p.experts.n_shared + std::min(p.experts.num_experts, p.m * p.top_k);
  const int64_t gu_blocks = (slots * p.experts.inter + kGemvWarps - 1) / kGemvWarps;
  const int g1 = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(gu_blocks, int64_t(sm_count) * occ_gu)));
  launch_pdl(gate_up, dim3(g1), dim3(kGemvThreads), 0, s, p);
  const int64_t groups = (p.experts.hidden + kDownRows - 1) / kDownRows;
  const int g2 = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, int64_t(sm_count) * occ_d)));
  launch_pdl(down, dim3(g2), dim3(kGemvThreads), 0, s, p);
}

// Dynamic shared memory a kernel may take on the current device: the opt-in limit less its
// static part, after raising its attribute to that (once per kernel and device, keyed by the
// kernel's address: kernels of one signature share a template instance here; the first call of
// a process is a warm-up outside graph capture). 0 if the device cannot say.
template <class K>
int dynamic_smem_limit(K kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> limits;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), dev);
  const auto it = limits.find(key);
  if (it != limits.end()) return it->second;
  int optin = 0, lim = 0;
  cudaFuncAttributes a{};
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
      cudaFuncGetAttributes(&a, kernel) == cudaSuccess) {
    lim = optin - static_cast<int>(a.sharedSizeBytes);
    if (lim <= 0 || cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, lim) != cudaSuccess) lim = 0;
  }
  cudaGetLastError();
  limits.emplace(key, lim);
  return lim;
}

// The streaming kernels' layout for this call, or false where they do not apply: bulk copies
// need every row (and so every row start) on 16 bytes, a stage must hold one gate + up row pair
// and the ring must fit shared memory with the down op's partial sums.
bool stream_layout(const ExpertGemvParams& p, bool fp8, int grid, int gu_limit, int d_limit, ExpertStreamCfg& gu,
                   ExpertStreamCfg& d) {
  const int64_t esize = fp8 ? 1 : 2;
  const auto& x = p.experts;
  if (p.m < 1 || p.m > 2 || grid < 1 || x.hidden <= 0 || x.inter <= 0) return false;
  if ((x.hidden * esize) % 16 != 0 || (x.inter * esize) % 16 != 0) return false;
  if (int64_t(p.m) * p.top_k > kExpertStreamThreads) return false;  // small_routing: one thread per id
  if (x.n_shared > 0) {
    for (const rs::cuda::DeviceMatrix* w : {&x.shared_gate, &x.shared_up, &x.shared_down})
      if (reinterpret_cast<uintptr_t>(w->data) % 16 != 0 || (w->cols * esize) % 16 != 0) return false;
  }
  const int64_t target = int64_t(g_stream_ring_kb) * 1024 / (int64_t(kExpertStreamStages) * g_stream_bps);
  const int64_t pair = 2 * x.hidden * esize;  // one gate row + one up row
  gu.rows = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(target / pair, x.inter)));
  gu.stage_bytes = static_cast<uint32_t>(gu.rows * pair);
  const int64_t row = x.inter * esize;
  d.rows_cap = static_cast<int>((x.hidden + grid - 1) / grid);
  d.rows = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(target / row, d.rows_cap)));
  d.stage_bytes = static_cast<uint32_t>(d.rows * row);
  d.slots_cap = x.n_shared + std::min(x.num_experts, p.m * p.top_k);
  const int64_t gu_smem = int64_t(kExpertStreamStages) * gu.stage_bytes;
  const int64_t d_smem = int64_t(kExpertStreamStages) * d.stage_bytes + int64_t(d.slots_cap) * d.rows_cap * p.m * 4;
  return gu_smem <= gu_limit && d_smem <= d_limit;
}

template <bool kFp8, int MT>
bool stream_mt(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  auto* gate_up = expert_stream_gate_up_kernel<kFp8, MT>;
  auto* down = expert_stream_down_kernel<kFp8, MT>;
  const int grid = sm_count * g_stream_bps;
  ExpertStreamCfg gu, d;
  if (!stream_layout(p, kFp8, grid, dynamic_smem_limit(gate_up), dynamic_smem_limit(down), gu, d)) return false;
  launch_pdl(gate_up, dim3(grid), dim3(kExpertStreamThreads), size_t(kExpertStreamStages) * gu.stage_bytes, s, p, gu);
  launch_pdl(down, dim3(grid), dim3(kExpertStreamThreads),
             size_t(kExpertStreamStages) * d.stage_bytes + size_t(d.slots_cap) * d.rows_cap * MT * 4, s, p, d);
  g_stream_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

template <bool kFp8>
void small_typed(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  if (g_expert_stream && p.m == 1 && stream_mt<kFp8, 1>(p, sm_count, s)) return;
  if (g_expert_stream && p.m == 2 && stream_mt<kFp8, 2>(p, sm_count, s)) return;
  if (p.m <= 1) small_mt<kFp8, 1>(p, sm_count, s);
  else if (p.m <= 2) small_mt<kFp8, 2>(p, sm_count, s);
  else if (p.m <= 4) small_mt<kFp8, 4>(p, sm_count, s);
  else small_mt<kFp8, 8>(p, sm_count, s);
}

}  // namespace

void set_expert_decode(bool on) { g_expert_decode = on; }
void set_expert_stream(bool on) { g_expert_stream = on; }
bool expert_stream() { return g_expert_stream; }
uint64_t expert_stream_launches() { return g_stream_launches.load(std::memory_order_relaxed); }
bool expert_decode() { return g_expert_decode; }

void launch_expert_decode_small(const ExpertGemvParams& p, bool fp8, int sm_count, cudaStream_t s) {
  if (fp8) small_typed<true>(p, sm_count, s);
  else small_typed<false>(p, sm_count, s);
}

void launch_expert_decode_grouped(const ExpertGemmParams& p, int sm_count, cudaStream_t s) {
  // 32 columns per step, U steps per batch: gate_up 4 x (4 weight + 2 token) 16-byte loads per
  // lane in flight (8 KB of weights per warp, 3 blocks of 4 warps per SM), down 4 x (2 + 2)
  // (4 KB per warp, 4 blocks per SM): ~100 KB / ~64 KB of weights in flight per SM.
  constexpr int UG = 4, UD = 4;
  static const int occ_gu = resident_blocks(expert_tc_gate_up_kernel<UG>, kExpertTcThreads);
  static const int occ_d = resident_blocks(expert_tc_down_kernel<UD>, kExpertTcThreads);
  launch_pdl(expert_decode_group_kernel, dim3(1), dim3(kMaxExperts), 0, s, p);
  const int64_t gu_items = int64_t(p.max_tiles) * ((p.experts.inter + 15) / 16);
  const int64_t d_items = int64_t(p.max_tiles) * ((p.experts.hidden + 15) / 16);
  auto blocks = [&](int64_t items, int occ) {
    const int64_t need = (items + kExpertTcWarps - 1) / kExpertTcWarps;
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(need, int64_t(sm_count) * occ)));
  };
  launch_pdl(expert_tc_gate_up_kernel<UG>, dim3(blocks(gu_items, occ_gu)), dim3(kExpertTcThreads), 0, s, p);
  launch_pdl(expert_tc_down_kernel<UD>, dim3(blocks(d_items, occ_d)), dim3(kExpertTcThreads), 0, s, p);
  launch_pdl(expert_decode_combine_kernel, dim3(p.m), dim3(256), 0, s, p);
}

}  // namespace rs::kern
