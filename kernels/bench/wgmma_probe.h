#pragma once
// The FP8 tensor-core instructions a batch-1 expert GEMV could use on Hopper (`rackserve bench
// wgmma`, kernels/bench/wgmma_probe.cu).
//
// Why: the FP8 expert dots' instructions hold ~9% of a V2-Lite FP8 batch-1 step (a measuring
// build with them near-free), and sm_90a has no native e4m3 mma.sync: it compiles to conversions
// and f16 HMMA (docs/perf/cuda.md, thirty-second session). wgmma reaches the FP8 tensor cores; a
// GEMV would take the weights as A from registers (loaded from its shared-memory ring) and the
// token as B from shared memory, 8 columns (x's hi and lo e4m3 parts, six zero). This runs that
// product for candidate B descriptor strides and A register orders (K-major, no swizzle, core
// matrices of 8 columns x 16 bytes; src/bench/wgmma.cpp checks them against the host's), and
// measures the rates of wgmma m64n8k32, mma.sync m16n8k32 and the CUDA-core dot
// (dot16_e4m3_f16) in e4m3 weights consumed. Plain C++: src/ includes it.
#include <cstdint>
#include <vector>

namespace rs::kern {

constexpr int kWgmmaProbeRows = 64, kWgmmaProbeCols = 128;

// One layout variant: B's descriptor strides (bytes) and A's register order: 0 = {row g k 0-15,
// row g+8 k 0-15, row g k 16-31, row g+8 k 16-31} (mma.sync m16n8k32's order), 1 = {row g k 0-15,
// row g k 16-31, row g+8 k 0-15, row g+8 k 16-31}.
struct WgmmaLayout {
  uint32_t lbo = 0, sbo = 0;
  int a_order = 0;
};
// For each layout, the 64 x 8 fp32 product (row-major) of w (e4m3, row-major 64 x 128) and B's
// columns (xhi, xlo, six zero) as the wgmma computed it. False on a CUDA error (*error says which);
// outs then holds the layouts run before it.
bool wgmma_layout_outputs(const uint8_t* w, const uint8_t* xhi, const uint8_t* xlo,
                          const std::vector<WgmmaLayout>& layouts, std::vector<std::vector<float>>* outs,
                          const char** error);

struct WgmmaRates {
  double wgmma_ns = 0, mma_ns = 0, core_ns = 0;  // one instruction (a dot16 call) of one warpgroup / warp
  double wgmma_wpns = 0, mma_wpns = 0, core_wpns = 0;  // e4m3 weights a nanosecond an SM
  // ns between an SM's wgmma m64n8k32 (kernel time / instructions an SM) with [1 or 4 independent
  // accumulator chains a warpgroup][1, 2 or 4 warpgroups an SM].
  double wgmma_sm_ns[2][3] = {};
};
// False (nothing measured) on a CUDA error (*error says which).
bool wgmma_rates(WgmmaRates* rates, const char** error);

}  // namespace rs::kern
