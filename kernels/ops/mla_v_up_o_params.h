#pragma once
// One decode token's attention output in one launch: the split merge, W_UV and o_proj
// (kernels/ops/mla_v_up_o.cuh). At batch 1 the three are short, latency-bound steps (a few MB of
// weights each); as two launches (v_up with the merge, then the o_proj GEMV) the o_proj waited
// for the whole v_up grid and re-read its input through a kernel boundary.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/ops/linear_params.h"
#include "kernels/ops/mla_absorb_params.h"

namespace rs::cuda {

// Geometry the kernel is written for (V2-Lite's attention): a cluster of 8 blocks a head, block
// c merging latent columns [64c, 64c + 64) and computing o_proj rows [256c, 256c + 256) of the
// head's 128 value columns.
constexpr int kVUpOCluster = 8;
constexpr int kVUpOThreads = 256;
constexpr int kVUpOLatent = 512;
constexpr int kVUpOVdim = 128;
constexpr int kVUpOHidden = 2048;

// vu: the two-launch path's v_up merging one token's splits (its part_o, part_lse, splits, kv_b
// and shapes; its out is not written here).
struct MlaVUpOParams {
  MlaVUpParams vu;
  DeviceMatrix o;                      // o_proj [hidden, heads * v], bf16 or block-scaled e4m3
  __nv_bfloat16* out = nullptr;        // [hidden]
  float* partials = nullptr;           // [heads, hidden] scratch
  int* counters = nullptr;             // [kVUpOCluster], zero between launches (the kernel leaves them so)
  // Nullable. Set: the heads' sum goes into these [hidden] words as fixed-point int64 (units of
  // 2^-32, kernels/common/fixed_point.cuh), added by every block with red.global.add, so no
  // block waits for the others (no ticket, no last block); out, partials and counters are then
  // unused. The words must be zero on entry; the consumer (the cluster router,
  // RouterNormIn::delta_fixed) rounds the sums to bf16 and zeroes them again.
  unsigned long long* fixed = nullptr;
};

// Whether the fused launch computes this token's output (else: launch_mla_v_up + the o_proj linear).
bool mla_v_up_o_supported(const MlaVUpOParams& p);
// RS_VUP_O_FIXED=0 keeps the ticket's head sum where the fixed-point one applies (A/B runs);
// set at run time by tests (read when the forward pass records a step).
bool mla_v_up_o_fixed_sum_on();
void set_mla_v_up_o_fixed_sum(bool on);
void launch_mla_v_up_o(const MlaVUpOParams& p, cudaStream_t stream);
// RS_VUP_O=0 turns the fused launch off (A/B runs); set at run time by tests.
void set_mla_v_up_o(bool on);

}  // namespace rs::cuda
