// __global__ wrappers and launchers for the decode-time expert kernels (expert_decode.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "kernels/common/carveout.h"
#include "kernels/common/env_int.h"
#include "kernels/common/l2_sides.h"
#include "kernels/common/sm_count.h"
#include "kernels/common/smem_optin.h"
#include "kernels/ops/expert_decode.cuh"
#include "kernels/ops/expert_gemm.cuh"
#include "kernels/ops/expert_stream_ffn.cuh"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/moe_decode_launch.h"

namespace rs::kern {

static_assert(kMaxSharedExperts == kMaxSharedSlots, "one limit for host and device");

namespace {

// RS_EXPERT_DECODE=0 starts a process with the earlier expert kernels (A/B runs of whole
// forward steps from one binary); set_expert_decode() switches at run time.
bool g_expert_decode = env_int("RS_EXPERT_DECODE", 1, 0, 1) == 1;

// One and two tokens fit 2 blocks of 256 threads per SM (<= 128 registers); more tokens hold
// more partial sums and get one.
template <int MT>
constexpr int small_min_blocks() { return MT <= 2 ? 2 : 1; }

// kF16: FP8 with the activations staged as f16 in the launch's dynamic shared memory
// (expert_decode.cuh: x for gate_up, every slot's h for down).
template <bool kFp8, int MT, int U, int RP, bool kF16 = false>
__global__ void __launch_bounds__(kGemvThreads, small_min_blocks<MT>()) expert_decode_gate_up_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  extern __shared__ __align__(16) uint8_t f16_smem[];
  fused_gate_up_op<kFp8, MT, U, RP, kF16>(p, sr, launch_work_grid(), reinterpret_cast<__half*>(f16_smem));
}

template <bool kFp8, int MT, int U, int DR, bool kF16 = false>
__global__ void __launch_bounds__(kGemvThreads, small_min_blocks<MT>()) expert_decode_down_kernel(ExpertGemvParams p) {
  __shared__ SmallRouting sr;
  __shared__ float red[kGemvWarps * DR * MT];
  extern __shared__ __align__(16) uint8_t f16_smem[];
  fused_down_op<kFp8, MT, U, DR, kF16>(p, sr, red, launch_work_grid(), reinterpret_cast<__half*>(f16_smem));
  pdl_probe_mark(kProbeEnd);
}

template <int U, int DR>
__global__ void __launch_bounds__(kGemvThreads, 2) expert_decode_down_spec_kernel(ExpertGemvParams p, int rounds,
                                                                                  bool miss_guess, int prewait_rounds) {
  __shared__ float red[kGemvWarps * DR];
  extern __shared__ __align__(16) uint8_t spec_smem[];
  fp8_down_one_token_spec_op<U, DR>(p, red, launch_work_grid(), spec_smem, rounds, miss_guess, prewait_rounds);
  pdl_probe_mark(kProbeEnd);
}

// One FP8 token's down (set_down_spec): 1 fp8_down_one_token_spec_op (default), 0 fused_down_op,
// which finds the routing after its wait (RS_DOWN_SPEC=0 for A/B runs from one binary), 2 the
// speculative op guessing wrong (tests).
int g_down_spec = env_int("RS_DOWN_SPEC", 1, 0, 2);
uint64_t g_down_spec_launches = 0;  // tests: that the speculative down ran where it should

// The one-token streaming launches' grid-wide wait counters (expert_stream_ffn.cuh): zero at
// module load, zeroed again by every launch. A device global is per device, so tensor-parallel
// ranks have their own.
__device__ unsigned g_xs_sync[kXsSyncWords];

template <bool kFp8, bool kRoute>
__global__ void __launch_bounds__(kXsThreads, 1)
    expert_stream_gate_up_kernel(const __grid_constant__ ExpertGemvParams p, const __grid_constant__ ExpertStreamGeom g,
                                 const __grid_constant__ ExpertRouteParams rt) {
  extern __shared__ __align__(128) uint8_t xs_smem[];
  expert_stream_op<kFp8, kXsStages, false, kRoute>(p, g, xs_smem, g_xs_sync, rt);
}

template <bool kFp8, bool kRoute>
__global__ void __launch_bounds__(kXsThreads, 1)
    expert_stream_ffn_kernel(const __grid_constant__ ExpertGemvParams p, const __grid_constant__ ExpertStreamGeom g,
                             const __grid_constant__ ExpertRouteParams rt) {
  extern __shared__ __align__(128) uint8_t xs_smem[];
  expert_stream_op<kFp8, kXsStages, true, kRoute>(p, g, xs_smem, g_xs_sync, rt);
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

// which: bit 0 the gate_up launch, bit 1 the down launch.
template <bool kFp8, int MT, int RP, int DR, bool kF16 = false>
void small_mt_rows(const ExpertGemvParams& p, int sm_count, cudaStream_t s, unsigned which, size_t smem_gu = 0,
                   size_t smem_d = 0) {
  // Weight chunks per lane per batch: a whole 2048-wide gate/up row (bf16 256 chunks, FP8 128);
  // for down one batch covers a whole 1408-wide row of every DR rows (bf16 176 <= 192,
  // FP8 88 <= 96).
  constexpr int U = kFp8 ? 4 : 8, UD = kFp8 ? 3 : 6;
  auto* gate_up = expert_decode_gate_up_kernel<kFp8, MT, U, RP, kF16>;
  auto* down = expert_decode_down_kernel<kFp8, MT, UD, DR, kF16>;
  // The occupancy depends on the dynamic shared memory (f16 activations: the model's widths).
  if (which & 1u) {
    (void)allow_dynamic_smem(gate_up, static_cast<int>(smem_gu));  // a refusal shows as the launch's error
    const int occ = resident_blocks_per_sm(gate_up, kGemvThreads, smem_gu);
    const int64_t slots = p.experts.n_shared + std::min(p.experts.num_experts, p.m * p.top_k);
    const int64_t items = slots * ((p.experts.inter + RP - 1) / RP);
    const int64_t blocks = (items + kGemvWarps - 1) / kGemvWarps;
    const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t(sm_count) * occ)));
    apply_carveout(gate_up, "experts");
    launch_pdl(gate_up, dim3(grid), dim3(kGemvThreads), smem_gu, s, p);
  }
  if constexpr (kFp8 && kF16 && MT == 1) {
    // One token, every row in one weight batch, every slot's h in one staging pass.
    const int64_t nchunks = p.experts.inter / chunk_elems<true>();
    if ((which & 2u) && g_down_spec && p.m == 1 && p.compact_routing && p.top_k <= 32 && nchunks <= 32 * UD &&
        p.experts.inter <= 256 * kDownStageChunks) {
      // Two blocks an SM, as the register down; as many of a block's row-group rounds copied
      // before the wait as their shared memory allows (V2-Lite: both).
      auto* spec = expert_decode_down_spec_kernel<UD, DR>;
      const int64_t groups = (p.experts.hidden + DR - 1) / DR;
      const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, int64_t(sm_count) * 2)));
      const Fp8DownSpecSmem lay(p.experts.n_shared + std::min(p.experts.num_experts, p.top_k), p.experts.inter, DR);
      static const int max_rounds = env_int("RS_DOWN_SPEC_ROUNDS", kDownSpecMaxRounds, 1, kDownSpecMaxRounds);
      int rounds = static_cast<int>(std::min<int64_t>(max_rounds, (groups + grid - 1) / grid));
      auto fits = [&](int r) {
        const size_t b = static_cast<size_t>(lay.bytes(r, kGemvWarps));
        return allow_dynamic_smem(spec, static_cast<int>(b)) && resident_blocks_per_sm(spec, kGemvThreads, b) >= 2;
      };
      while (rounds > 1 && !fits(rounds)) --rounds;
      if (fits(rounds)) {
        const size_t smem_spec = static_cast<size_t>(lay.bytes(rounds, kGemvWarps));
        apply_carveout(spec, "experts");
        static const int prewait = env_int("RS_DOWN_SPEC_PREWAIT", kDownSpecPrewaitRounds, 0, kDownSpecMaxRounds);
        launch_pdl(spec, dim3(grid), dim3(kGemvThreads), smem_spec, s, p, rounds, g_down_spec == 2, prewait);
        ++g_down_spec_launches;
        which &= ~2u;
      }
    }
  }
  if (which & 2u) {
    (void)allow_dynamic_smem(down, static_cast<int>(smem_d));
    const int occ = resident_blocks_per_sm(down, kGemvThreads, smem_d);
    const int64_t groups = (p.experts.hidden + DR - 1) / DR;
    const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, int64_t(sm_count) * occ)));
    apply_carveout(down, "experts");
    launch_pdl(down, dim3(grid), dim3(kGemvThreads), smem_d, s, p);
  }
}

// Rows per warp-item: bf16 one gate/up row pair and two down rows. FP8 items take twice the rows
// (the same bytes in flight per warp: an item costs one memory round trip whatever its size);
// RS_EXPERT_FP8_ROWS=1 starts a process with FP8 at bf16's row counts, for A/B runs.
const bool g_fp8_single_rows = env_int("RS_EXPERT_FP8_ROWS", 2, 1, 2) == 1;

// FP8 one-token items read their activations as f16 from shared memory (expert_decode.cuh,
// dot16_e4m3_f16); RS_EXPERT_FP8_F16=0 starts a process with the fp32 conversions, for A/B runs.
const bool g_fp8_f16 = env_int("RS_EXPERT_FP8_F16", 1, 0, 1) == 1;
constexpr size_t kMaxF16Smem = 200 * 1024;

// One token's gate_up through the streaming kernel (expert_stream.cuh) where the shapes fit it;
// RS_EXPERT_STREAM=0 or set_expert_stream(false) keeps the register kernel (A/B runs, tests).
bool g_expert_stream = env_int("RS_EXPERT_STREAM", 1, 0, 1) == 1;
constexpr uint32_t kXsSmemBudget = 216 * 1024;  // + the kernel's static shared memory (~7 KB) <= 227 KB
// Copies before griddepcontrol.wait: more held the router before it back (H200: all four bf16
// stages, 192 KB an SM, 2.17 ms a step against 2.16 with two).
constexpr uint32_t kXsPrewaitBytes = 96 * 1024;
const int g_route_overlap = env_int("RS_XS_ROUTE_OVERLAP", 1, 0, 1);
const int g_inflight = env_int("RS_XS_INFLIGHT", -1, -1, kXsStages - 1);  // -1: the default below

uint32_t align128(uint32_t b) { return (b + 127u) & ~127u; }

// The streaming launch's geometry for m tokens of `experts` (shared experts folded in as set):
// gate_up alone, or with `ffn` the whole FFN (x and then h after the ring, and the down stages);
// false where the streaming kernel does not take them (more than one token, shapes that do not
// fit it).
// route_act: the in-launch router's bytes at act_offset (expert_stream_route.cuh), or 0.
bool expert_stream_geometry(const rs::cuda::MoeExperts& experts, int m, int top_k, ExpertStreamGeom& g,
                            bool ffn = false, uint32_t route_act = 0) {
  const bool fp8 = experts.type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  const int64_t esize = fp8 ? 1 : 2, E = fp8 ? 16 : 8;
  const int64_t hidden = experts.hidden, inter = experts.inter;
  const int slots = experts.n_shared + std::min(experts.num_experts, top_k);
  if (m != 1 || slots > kMaxSharedSlots + kMaxTopK || hidden % E || inter % E || hidden < 1 || inter < 1)
    return false;
  // Stages of whole gate/up row pairs of one slot; x (bf16, or f16 for FP8) after the ring, and
  // for the FFN every slot's h (bf16, or f16) in the same place once x is dead.
  const int64_t pair = 2 * hidden * esize;
  const int64_t act = std::max<int64_t>(std::max<int64_t>(hidden * 2, route_act), ffn ? int64_t(slots) * inter * 2 : 0);
  if (act >= kXsSmemBudget) return false;
  const uint32_t act_bytes = align128(static_cast<uint32_t>(act));
  const int64_t rows = std::min<int64_t>((kXsSmemBudget - act_bytes) / kXsStages / pair, inter);
  if (rows < 1) return false;
  g.slots = slots;
  g.rows_per_stage = static_cast<int>(rows);
  g.stage_bytes = align128(static_cast<uint32_t>(rows * pair));
  g.act_offset = g.stage_bytes * kXsStages;
  g.smem_bytes = g.act_offset + act_bytes;
  g.prewait_stages = static_cast<int>(std::max<uint32_t>(1u, kXsPrewaitBytes / g.stage_bytes));
  g.down_rows_per_stage = ffn ? static_cast<int>(g.stage_bytes / (inter * esize)) : 0;
  g.route_overlap = g_route_overlap;
  g.inflight_stages = g_inflight >= 0 ? g_inflight : (ffn ? 2 : 0);
  if (ffn && g.down_rows_per_stage < 1) return false;
  return true;
}

template <bool kFp8, bool kRoute>
bool launch_expert_stream_gate_up(const ExpertGemvParams& p, const ExpertStreamGeom& g, int sm_count, cudaStream_t s,
                                  const ExpertRouteParams& rt = {}) {
  auto* gate_up = expert_stream_gate_up_kernel<kFp8, kRoute>;
  const bool smem_ok = allow_dynamic_smem(gate_up, static_cast<int>(g.smem_bytes));  // unrouted: a refusal shows as the launch's error
  // The router's grid-wide count needs every block resident: one an SM, no more than SMs.
  if (kRoute && (!smem_ok || resident_blocks_exact(gate_up, kXsThreads, g.smem_bytes) < 1)) return false;
  apply_carveout(gate_up, "experts");
  launch_pdl(gate_up, dim3(std::min(sm_count, p.experts.inter)), dim3(kXsThreads), g.smem_bytes, s, p, g, rt);
  return true;
}

// The whole FFN in one launch where it fits: one resident block an SM for every block of the grid
// (the grid-wide wait) and at most kXsDownRowsPerWarp down rows a consumer warp. Modes
// (set_expert_ffn, environment RS_EXPERT_FFN): 0 off (the streamed gate_up and the register
// down), 1 bf16 experts only (default: with FP8 experts the single launch measured slower, H200
// V2-Lite 2.13 against 1.98 ms a step), 2 bf16 and FP8 (tests, A/B runs).
int g_expert_ffn = env_int("RS_EXPERT_FFN", 1, 0, 2);

// The whole FFN's grid-wide wait on a counter homed on each L2 side (set_xs_l2_sides, environment
// RS_XS_L2_SIDES): 1 where l2_sides() found two (default), 0 the one counter.
int g_xs_l2_sides = env_int("RS_XS_L2_SIDES", 1, 0, 1);
// One token's streamed expert launches read x and the routing from the copies on their L2 side
// where the cluster router wrote them (RS_XS_L2_INPUTS=0: from the router's own outputs).
int g_xs_l2_inputs = env_int("RS_XS_L2_INPUTS", 1, 0, 1);
uint64_t g_xs_l2_input_launches = 0;  // tests: that the sided copies were read where they should be

int expert_ffn_grid(const rs::cuda::MoeExperts& experts, int sm_count) {
  return std::min(sm_count, experts.inter);
}

// The L2 sides' copies (kernels/common/l2_sides.h) for a launch without the router in it: x and the
// routing where the cluster router wrote them (sided_in), the FFN's grid-wide counters (counters).
void xs_sided(const ExpertGemvParams& p, ExpertStreamGeom& g, bool sided_in, bool counters) {
  const L2Sides& sides = l2_sides(false);  // measured when the backend started
  if (!sides.valid) return;
  if (counters && g_xs_l2_sides) {
    g.sm_side = sides.sm_side;
    g.sided_sync[0] = sides.page[0][0];
    g.sided_sync[1] = sides.page[1][0];
  }
  if (sided_in && g_xs_l2_inputs) {
    ++g_xs_l2_input_launches;
    g.sm_side = sides.sm_side;
    for (int side = 0; side < 2; ++side) {
      g.ids_side[side] = l2_side_ids(sides, side);
      g.weights_side[side] = l2_side_weights(sides, side);
      g.x_side[side] = l2_side_x(sides, side);
    }
  }
}

template <bool kFp8, bool kRoute>
bool launch_expert_stream_ffn(const ExpertGemvParams& p, int sm_count, cudaStream_t s, const ExpertRouteParams& rt = {},
                              uint32_t route_act = 0, bool sided_in = false) {
  ExpertStreamGeom g;
  if (!expert_stream_geometry(p.experts, p.m, p.top_k, g, true, route_act)) return false;
  const int grid = expert_ffn_grid(p.experts, sm_count);
  if (!kRoute) {  // behind the cluster router's launch (expert_stream_geom.h); RS_XS_LATE / _Q for A/B
    static const int late = env_int("RS_XS_LATE", kXsLateBlocks, 0, 64);
    static const int late_q = env_int("RS_XS_LATE_Q", kXsLateQuarters, 0, 4);
    g.late_blocks = std::min(late, grid - 1);
    g.late_quarters = late_q;
  }
  const int rows_per_block = (p.experts.hidden + grid - 1) / grid;
  if (rows_per_block > kXsConsumerWarps * kXsDownRowsPerWarp) return false;
  xs_sided(p, g, sided_in, true);
  auto* ffn = expert_stream_ffn_kernel<kFp8, kRoute>;
  if (!allow_dynamic_smem(ffn, static_cast<int>(g.smem_bytes))) return false;
  if (resident_blocks_exact(ffn, kXsThreads, g.smem_bytes) < 1) return false;  // the grid-wide wait needs one an SM
  apply_carveout(ffn, "experts");
  launch_pdl(ffn, dim3(grid), dim3(kXsThreads), g.smem_bytes, s, p, g, rt);
  return true;
}

// The register kernels' launches of `which`.
template <bool kFp8, int MT>
void register_parts(const ExpertGemvParams& p, int sm_count, cudaStream_t s, unsigned which) {
  if constexpr (kFp8 && MT == 1) {  // (two tokens: the larger items spill, measured slower)
    const size_t smem_gu = size_t(p.experts.hidden) * 2;
    const size_t smem_d = size_t(p.experts.n_shared + std::min(p.experts.num_experts, p.top_k)) * p.experts.inter * 2;
    if (g_fp8_f16 && !g_fp8_single_rows && smem_gu <= kMaxF16Smem && smem_d <= kMaxF16Smem)
      return small_mt_rows<kFp8, MT, 2, 4, true>(p, sm_count, s, which, smem_gu, smem_d);
    if (!g_fp8_single_rows) return small_mt_rows<kFp8, MT, 2, 4>(p, sm_count, s, which);
  }
  small_mt_rows<kFp8, MT, 1, 2>(p, sm_count, s, which);
}

// One token: gate_up streamed where the shapes fit (then the register down), otherwise (and for
// every larger m) both register kernels.
template <bool kFp8, int MT>
void small_mt(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  ExpertStreamGeom g;
  // The cluster router's copies of x and the routing on each L2 side, where it wrote them for these inputs.
  const bool sided_in = MT == 1 && l2_sided_inputs_take(p.x, p.topk_ids, p.topk_weights);
  if (MT == 1 && g_expert_stream && g_expert_ffn >= (kFp8 ? 2 : 1) &&
      launch_expert_stream_ffn<kFp8, false>(p, sm_count, s, {}, 0, sided_in))
    return;
  if (MT == 1 && g_expert_stream && expert_stream_geometry(p.experts, p.m, p.top_k, g)) {
    xs_sided(p, g, sided_in, false);
    launch_expert_stream_gate_up<kFp8, false>(p, g, sm_count, s);
    return register_parts<kFp8, MT>(p, sm_count, s, 2u);
  }
  register_parts<kFp8, MT>(p, sm_count, s, 3u);
}

template <bool kFp8>
void small_typed(const ExpertGemvParams& p, int sm_count, cudaStream_t s) {
  if (p.m <= 1) small_mt<kFp8, 1>(p, sm_count, s);
  else if (p.m <= 2) small_mt<kFp8, 2>(p, sm_count, s);
  else if (p.m <= 4) small_mt<kFp8, 4>(p, sm_count, s);
  else small_mt<kFp8, 8>(p, sm_count, s);
}

// One token's router inside the streamed expert launch (expert_stream_route.cuh), in the whole
// FFN's launch where it is taken, else the streamed gate_up's (then the register down). Modes
// (set_route_in_experts, environment RS_ROUTE_IN_EXPERTS): 0 off (default), 1 FP8 experts only,
// 2 bf16 and FP8. Off since the cluster router's selection runs warm (its dry run through one
// out-of-line copy): FP8 b1 then measured ~1% faster behind the cluster router than with the
// router in its gate_up launch (H200 V2-Lite, docs/perf/cuda.md, twenty-second session).
int g_route_in_experts = env_int("RS_ROUTE_IN_EXPERTS", 0, 0, 2);

template <bool kFp8>
bool routed_one_token(const ExpertGemvParams& p, const ExpertRouteParams& rt, int sm_count, cudaStream_t s) {
  const int rows = xs_route_rows(rt.r.experts, expert_ffn_grid(p.experts, sm_count));  // both launches' grid
  if (rows > kXsRouteMaxRows) return false;
  const uint32_t route_act = xs_route_act_bytes(p.experts.hidden, rows, rt.r.experts);
  if (g_expert_ffn >= (kFp8 ? 2 : 1) && launch_expert_stream_ffn<kFp8, true>(p, sm_count, s, rt, route_act)) return true;
  ExpertStreamGeom g;
  if (!expert_stream_geometry(p.experts, p.m, p.top_k, g, false, route_act)) return false;
  if (!launch_expert_stream_gate_up<kFp8, true>(p, g, sm_count, s, rt)) return false;
  register_parts<kFp8, 1>(p, sm_count, s, 2u);
  return true;
}

}  // namespace

bool launch_expert_decode_routed(const ExpertGemvParams& p, const ExpertRouteParams& rt, bool fp8, int sm_count,
                                 cudaStream_t s) {
  const rs::cuda::MoeRouterParams& r = rt.r;
  const rs::cuda::LmHeadParams& lg = rt.lg;
  const rs::cuda::RouterNormIn& nin = rt.norm;
  if (!g_expert_decode || !g_expert_stream || g_route_in_experts < (fp8 ? 1 : 2)) return false;
  if (p.m != 1 || r.n != 1 || lg.n != 1 || !nin.residual || !nin.delta || !nin.weight || !nin.out || !lg.w ||
      !lg.logits || !r.topk_ids || !r.topk_weights)
    return false;
  if (lg.hidden != p.experts.hidden || lg.vocab != r.experts || r.experts != p.experts.num_experts ||
      r.top_k != p.top_k || r.top_k > kMaxTopK || !rs::cuda::router_fused_supported(lg.hidden, r.experts, r.n_group, r.top_k))
    return false;
  return fp8 ? routed_one_token<true>(p, rt, sm_count, s) : routed_one_token<false>(p, rt, sm_count, s);
}

void set_route_in_experts(int mode) { g_route_in_experts = mode; }
int route_in_experts() { return g_route_in_experts; }

void set_expert_decode(bool on) { g_expert_decode = on; }
void set_expert_stream(bool on) { g_expert_stream = on; }
void set_expert_ffn(int mode) { g_expert_ffn = mode; }
void set_down_spec(int mode) { g_down_spec = mode; }
void set_xs_l2_sides(bool on) { g_xs_l2_sides = on; }
void set_xs_l2_inputs(bool on) { g_xs_l2_inputs = on; }
int down_spec() { return g_down_spec; }
uint64_t down_spec_launches() { return g_down_spec_launches; }
uint64_t xs_l2_input_launches() { return g_xs_l2_input_launches; }
int expert_ffn() { return g_expert_ffn; }
bool expert_stream_takes(const rs::cuda::MoeExperts& experts, int m, int top_k) {
  ExpertStreamGeom g;
  return g_expert_decode && g_expert_stream && expert_stream_geometry(experts, m, top_k, g);
}
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
  static const int occ_gu = resident_blocks_per_sm(expert_tc_gate_up_kernel<UG>, kExpertTcThreads);
  static const int occ_d = resident_blocks_per_sm(expert_tc_down_kernel<UD>, kExpertTcThreads);
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
