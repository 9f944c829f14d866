#pragma once
// Launchers of the decode-time expert kernels (kernels/ops/expert_decode.cuh, wrappers in
// moe_decode_kernels.cu): routed experts with the shared experts folded in as extra slots.
// Plain C++: src/ includes it.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops/expert_route_params.h"
#include "kernels/ops/matmul_launch.h"

namespace rs::kern {

constexpr int kMaxSharedExperts = 4;  // = kMaxSharedSlots of expert_decode.cuh

// Few tokens (m <= kExpertGemvMaxTokens), bf16 or FP8: gate_up (+SwiGLU) then down (+routing
// weights, + shared experts), 2 kernels. p.h holds (n_shared + min(E, m*top_k)) * m * inter bf16.
void launch_expert_decode_small(const ExpertGemvParams& p, bool fp8, int sm_count, cudaStream_t stream);

// One token with its router folded in (expert_stream_route.cuh): the post-attention add +
// RMSNorm, the logits and the selection of rt, then the experts on that norm's output (p.x and
// p's routing are not read; rt's outputs are stored as the fused router stores them). False,
// launching nothing, where the streamed launches do not take the shapes or a block an SM cannot
// be resident: the caller launches the router and the experts as before.
bool launch_expert_decode_routed(const ExpertGemvParams& p, const ExpertRouteParams& rt, bool fp8, int sm_count,
                                 cudaStream_t stream);
// Which experts launch_expert_decode_routed() takes: mode 0 none (the default; environment
// RS_ROUTE_IN_EXPERTS starts another), 1 FP8 only, 2 bf16 and FP8.
void set_route_in_experts(int mode);
int route_in_experts();

// Many tokens, bf16 only: group (p.tile_tokens must be 16; shared experts as ids E..) ->
// tensor-core GEMV gate_up (+SwiGLU) -> tensor-core GEMV down -> combine, 4 kernels.
void launch_expert_decode_grouped(const ExpertGemmParams& p, int sm_count, cudaStream_t stream);

// A/B switch for measurements and tests (default on; environment RS_EXPERT_DECODE=0 starts
// off): off, moe_experts() takes the earlier kernels (gemv_experts.cuh / the mma.sync grouped
// GEMM) and moe_can_fuse_shared() says no, so shared experts run as a dense MLP again.
void set_expert_decode(bool on);
// One token's gate_up through the streaming kernel (expert_stream.cuh; default on, environment
// RS_EXPERT_STREAM=0 starts off); off, the register kernel of expert_decode.cuh.
void set_expert_stream(bool on);
// With the streaming gate_up on: one token's whole FFN (gate_up, then down) in one launch
// (expert_stream_ffn.cuh) for mode 1 bf16 experts (the default; environment RS_EXPERT_FFN
// starts another), mode 2 bf16 and FP8; otherwise (and mode 0) the streamed gate_up and the
// register down kernel.
void set_expert_ffn(int mode);
int expert_ffn();
// One FP8 token's register down (kernels/ops/expert_decode.cuh): mode 1 reads the routing on
// speculation before its wait (fp8_down_one_token_spec_op; the default, environment RS_DOWN_SPEC
// starts another), 0 after it (fused_down_op), 2 speculates wrong on purpose (tests: the reload
// path). The same bits in every mode.
void set_down_spec(int mode);
int down_spec();
// Launches of that speculative down so far in this process (tests: that it is the path taken).
uint64_t down_spec_launches();
// The whole FFN's grid-wide wait on one counter copy a side of the L2 (kernels/common/l2_sides.h),
// each block polling its own side's, where the sides were measured (on by default; environment
// RS_XS_L2_SIDES=0 starts off); off, one counter. Tests run both.
void set_xs_l2_sides(bool on);
// One token's streamed expert launches reading x and the routing from the cluster router's copies
// on their own L2 side, where it wrote them (on by default; environment RS_XS_L2_INPUTS=0 starts
// off). The same bits either way.
void set_xs_l2_inputs(bool on);
// Streamed expert launches that read those copies so far in this process (tests).
uint64_t xs_l2_input_launches();
// Whether moe_experts() runs m tokens of `experts` (its shared experts folded in as set) with the
// streaming gate_up: the forward pass picks the router in front of it by this.
bool expert_stream_takes(const rs::cuda::MoeExperts& experts, int m, int top_k);
bool expert_decode();

}  // namespace rs::kern
