// The batch-1 decode megakernel: one persistent CTA per SM interprets the step's program
// (decode_program.h), running each instruction's share with the same __device__ ops the per-op
// kernels wrap, and meeting the other CTAs at a grid barrier after it.
//
// RS_MEGAKERNEL_TU, before any include, tells the shared op headers they are compiled into the
// megakernel: activations are rewritten by other CTAs of this same launch (every layer reuses
// the buffers), so they are read with coherent loads (kernels/common/bf16_fp8.cuh), and the ops'
// PDL waits wait for the previous instruction instead (instruction_wait.cuh).
#define RS_MEGAKERNEL_TU 1

#include "kernels/mega/decode_megakernel.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/common/smem_optin.h"
#include "kernels/common/work_grid.cuh"
#include "kernels/mega/grid_barrier.cuh"
#include "kernels/ops/activation.cuh"
#include "kernels/ops/embed.cuh"
#include "kernels/ops/expert_decode.cuh"
#include "kernels/ops/gemv.cuh"
#include "kernels/ops/mla_absorb.cuh"
#include "kernels/ops/mla_decode.cuh"
#include "kernels/ops/moe_router.cuh"
#include "kernels/ops/rmsnorm.cuh"

namespace rs::kern::mega {
namespace {

static_assert(kThreads == kGemvThreads && kThreads == rs::cuda::kAbsorbThreads &&
                  kThreads == rs::cuda::kVUpWarps * 32 && kThreads == rs::cuda::kRouterThreads &&
                  kThreads == rs::cuda::kAddRmsNormThreads,
              "the megakernel runs every op with its own block size");

constexpr int kInstrVecs = static_cast<int>(sizeof(Instr) / 16);
static_assert(kInstrVecs <= kThreads, "one 16-byte piece of the next instruction per thread");

template <class T>
__device__ __forceinline__ const T& body_as(const Instr& in) {
  return *reinterpret_cast<const T*>(in.body);
}

__device__ __noinline__ void run_gemv(const DenseGemvParams& p, float* red, __nv_bfloat16* xs) {
  constexpr int R = kGemvRowsPerWarp;
  const WorkGrid wg = launch_work_grid();  // the megakernel's CTAs
  const bool norm = p.norm_residual != nullptr;
  if (p.w[0].type == rs::cuda::WeightType::FP8_E4M3_BLOCK) {
    if (norm) gemv_dense_op<true, R, 1, 4, true, __nv_bfloat16, true>(p, red, xs, wg);
    else gemv_dense_op<true, R, 1, 4, true, __nv_bfloat16, false>(p, red, xs, wg);
  } else if (p.out_fp32) {
    if (norm) gemv_dense_op<false, R, 1, 8, true, float, true>(p, red, xs, wg);
    else gemv_dense_op<false, R, 1, 8, true, float, false>(p, red, xs, wg);
  } else {
    if (norm) gemv_dense_op<false, R, 1, 8, true, __nv_bfloat16, true>(p, red, xs, wg);
    else gemv_dense_op<false, R, 1, 8, true, __nv_bfloat16, false>(p, red, xs, wg);
  }
}

// Rows per item as the per-op launcher picks them for one token (moe_decode_kernels.cu): FP8
// items carry twice the rows of bf16 ones. Each variant its own function (own register
// allocation, see below).
template <bool kFp8, int U, int RP>
__device__ __noinline__ void gate_up_leaf(const ExpertGemvParams& p, SmallRouting& sr, WorkGrid wg) {
  fused_gate_up_op<kFp8, 1, U, RP>(p, sr, wg);
}
template <bool kFp8, int U, int DR>
__device__ __noinline__ void down_leaf(const ExpertGemvParams& p, SmallRouting& sr, float* red, WorkGrid wg) {
  fused_down_op<kFp8, 1, U, DR>(p, sr, red, wg);
}

__device__ __forceinline__ void run_experts(const Instr& in, SmallRouting& sr, float* red) {
  const ExpertGemvParams& p = body_as<ExpertGemvParams>(in);
  const WorkGrid wg = launch_work_grid();  // the megakernel's CTAs
  const bool fp8 = p.experts.type == rs::cuda::WeightType::FP8_E4M3_BLOCK;
  if (in.op == Op::kExpertGateUp) {
    if (fp8) gate_up_leaf<true, 4, 2>(p, sr, wg);
    else gate_up_leaf<false, 8, 1>(p, sr, wg);
  } else {
    if (fp8) down_leaf<true, 3, 4>(p, sr, red, wg);
    else down_leaf<false, 6, 2>(p, sr, red, wg);
  }
}

// The block-style ops, each its own function (own register allocation: inlined into one switch
// the busiest op's live ranges made the others spill).
__device__ __noinline__ void absorb_unit(const AbsorbKvArgs& a, int u, uint8_t* dyn) {
  using namespace rs::cuda;
  using Red = float[kAbsorbPassTokens][kAbsorbCols];
  const AbsorbSmem sm{reinterpret_cast<float(*)[256]>(dyn), reinterpret_cast<Red*>(dyn + sizeof(float) * kAbsorbTokens * 256)};
  mla_absorb_q_kv_write_block(a.absorb, a.kv, u, &sm);
}
__device__ __noinline__ void attention_unit(const rs::cuda::MlaDecodeParams& p, int x, int y, int z, uint8_t* dyn) {
  rs::cuda::mla_decode_split_block<8>(p, x, y, z, reinterpret_cast<char*>(dyn));
}
template <int kRows>
__device__ __noinline__ void v_up_unit(const rs::cuda::MlaVUpParams& p, int x, int y, int z, uint8_t* dyn) {
  using namespace rs::cuda;
  const int n0 = z * kAbsorbTokens, n1 = min(p.n, n0 + kAbsorbTokens);
  uint8_t* b = dyn;
  VUpSmem sm;
  sm.os = reinterpret_cast<float(*)[512]>(b);
  b += sizeof(float) * kAbsorbTokens * 512;
  sm.half1 = reinterpret_cast<float(*)[512]>(b);
  b += sizeof(float) * (kAbsorbTokens / 2) * 512;
  sm.wts = reinterpret_cast<float(*)[kMlaDecodeMaxSplits]>(b);
  b += sizeof(float) * kAbsorbTokens * kMlaDecodeMaxSplits;
  sm.active = reinterpret_cast<int*>(b);
  float w[kRows][16];
  mla_v_up_prefetch<kRows>(p, x, y, w);
  rs::pdl::wait();
  mla_v_up_compute<kRows>(p, x, y, n0, n1, w, sm);
}
__device__ __noinline__ void router_unit(const RouterArgs& a, int x, int y, uint8_t* dyn) {
  rs::cuda::moe_router_fused_block(a.logits, a.select, a.counters, a.norm, x, y, reinterpret_cast<float*>(dyn));
}
__device__ __noinline__ void small_unit(const Instr& in, int u) {
  using namespace rs::cuda;
  switch (in.op) {
    case Op::kEmbed: embed_row(body_as<EmbedParams>(in), u); break;
    case Op::kAddRmsNorm: {
      const AddRmsNormParams& p = body_as<AddRmsNormParams>(in);
      if (add_rmsnorm_vectorized(p.hidden)) add_rmsnorm_row(p, u);
      else add_rmsnorm_row_any(p, u);
      break;
    }
    case Op::kRmsNormRows:  // the op has no wait of its own (its kernel waits before calling it)
      rs::pdl::wait();
      rmsnorm_row(body_as<RmsNormRowsParams>(in), u);
      break;
    default: break;
  }
}

// One unit of a block-style op: what blockIdx (x, y, z) of its own kernel would do.
__device__ __forceinline__ void run_unit(const Instr& in, int u, uint8_t* dyn) {
  const int x = u % in.gx, y = (u / in.gx) % in.gy, z = u / (in.gx * in.gy);
  switch (in.op) {
    case Op::kAbsorbKv: absorb_unit(body_as<AbsorbKvArgs>(in), u, dyn); break;
    case Op::kAttention: attention_unit(body_as<rs::cuda::MlaDecodeParams>(in), x, y, z, dyn); break;
    case Op::kVUp:
      if (in.variant == 2) v_up_unit<2>(body_as<rs::cuda::MlaVUpParams>(in), x, y, z, dyn);
      else v_up_unit<1>(body_as<rs::cuda::MlaVUpParams>(in), x, y, z, dyn);
      break;
    case Op::kRouter: router_unit(body_as<RouterArgs>(in), x, y, dyn); break;
    default: small_unit(in, u);
  }
}

__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    decode_megakernel(const Instr* __restrict__ program, int n_instr, SyncWords* sync, uint64_t* stamps) {
  extern __shared__ __align__(128) uint8_t dyn[];
  // Raw bytes: Instr's default member initialisers would ask for a dynamic initialisation.
  __shared__ __align__(16) unsigned char inst_bytes[2][sizeof(Instr)];
  Instr* inst = reinterpret_cast<Instr*>(inst_bytes);
  __shared__ SmallRouting sr;
  __shared__ float red[kGemvWarps * 4];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(dyn);  // the GEMV norm prologue's x

  const uint4* src = reinterpret_cast<const uint4*>(program);
  if (threadIdx.x < kInstrVecs) reinterpret_cast<uint4*>(&inst[0])[threadIdx.x] = src[threadIdx.x];
  if (threadIdx.x == 0) s_instruction_wait = InstructionWait{&sync->barrier, 0u, 0u, 0};
  __syncthreads();
  if (stamps && blockIdx.x == 0 && threadIdx.x == 0) stamps[0] = global_time_ns();
  for (int i = 0; i < n_instr; ++i) {
    const Instr& in = inst[i & 1];
    // The next instruction, in flight while this one runs (the program is constant).
    uint4 next = make_uint4(0, 0, 0, 0);
    const bool has_next = i + 1 < n_instr;
    if (has_next && threadIdx.x < kInstrVecs) next = src[size_t(i + 1) * kInstrVecs + threadIdx.x];
    if (threadIdx.x == 0) {  // what the op's wait waits for: every CTA's arrival after instruction i - 1
      s_instruction_wait.target = static_cast<unsigned>(i) * gridDim.x;
      s_instruction_wait.instr = i;
    }
    // (thread 0 alone reads the wait state; the ops' own barriers order the rest)
    switch (in.op) {
      case Op::kGemv: run_gemv(body_as<GemvArgs>(in).p, red, xs); break;
      case Op::kExpertGateUp:
      case Op::kExpertDown: run_experts(in, sr, red); break;
      case Op::kSiluMul: {
        wait_for_previous_instruction();
        const rs::cuda::SiluMulParams& p = body_as<rs::cuda::SiluMulParams>(in);
        for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < p.count; e += int64_t(gridDim.x) * blockDim.x)
          rs::cuda::silu_mul_elem(p, e);
        break;
      }
      default:
        for (int u = blockIdx.x; u < in.units; u += gridDim.x) {
          run_unit(in, u, dyn);
          __syncthreads();  // the op's shared memory is reused by the next unit
        }
    }
    wait_for_previous_instruction();  // for ops (and CTAs without units) that did not wait
    if (has_next && threadIdx.x < kInstrVecs) reinterpret_cast<uint4*>(&inst[(i + 1) & 1])[threadIdx.x] = next;
    if (has_next) grid_arrive(&sync->barrier);
    if (stamps) {  // profile: the last CTA's arrival after each instruction
      __syncthreads();
      if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned long long*>(&stamps[i + 1]), global_time_ns());
    }
  }
  // Every CTA has waited for every instruction but the last before it counts itself out, so the
  // last one out may re-zero the words for the next launch.
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&sync->exited, 1u) == gridDim.x - 1) {
      sync->barrier = 0;
      sync->exited = 0;
      __threadfence();
    }
  }
}

}  // namespace

// One buffer for every op that needs more than a few words of shared memory: instructions run one
// after another, so each carves it from the start.
size_t dynamic_smem_bytes(int kv_dim, int router_experts) {
  const size_t attn = rs::cuda::mla_decode::Layout(kv_dim, 2).total;
  const size_t router = size_t(rs::cuda::kRouterWarps) * rs::cuda::router_warp_scratch_floats(router_experts) * 4;
  const size_t gemv_x = size_t(kGemvNormMaxElems) * sizeof(__nv_bfloat16);
  return std::max({attn, router, gemv_x, rs::cuda::kAbsorbSmemBytes, rs::cuda::kVUpSmemBytes});
}

int resident_ctas_per_sm(size_t dynamic_smem) {
  if (!allow_dynamic_smem(decode_megakernel, static_cast<int>(dynamic_smem))) return 0;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_megakernel, kThreads, dynamic_smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void launch_decode_megakernel(const Instr* program, int n_instr, SyncWords* sync, uint64_t* stamps, int grid,
                              size_t dynamic_smem, cudaStream_t stream) {
  (void)allow_dynamic_smem(decode_megakernel, static_cast<int>(dynamic_smem));  // a refusal shows as the launch's error
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = dynamic_smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, decode_megakernel, program, n_instr, sync, stamps);
}

}  // namespace rs::kern::mega
