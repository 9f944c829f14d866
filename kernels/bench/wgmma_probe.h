#pragma once
// The FP8 tensor-core instructions a batch-1 expert GEMV could use on Hopper (`rackserve bench
// wgmma`, kernels/bench/wgmma_probe.cu).
//
// Why: the FP8 expert dots' instructions hold ~9% of a V2-Lite FP8 batch-1 step (a measuring
// build with them near-free), and sm_90a has no native e4m3 mma.sync: it compiles to conversions
// and f16 HMMA (docs/perf/cuda.md, thirty-second session). wgmma reaches the FP8 tensor cores; a
// GEMV would take the weights as A from registers (loaded from its shared-memory ring) and the
// token as B from shared memory, 8 columns (x's hi and lo e4m3 parts, six zero). This checks
// which B descriptor strides give the right product for that layout (K-major, no swizzle, core
// matrices of 8 columns x 16 bytes), and measures the rates of wgmma m64n8k32, mma.sync
// m16n8k32 and the CUDA-core dot (dot16_e4m3_f16) in e4m3 weights consumed. Plain C++: src/
// includes it.
#include <cstdint>
#include <vector>

namespace rs::kern {

struct WgmmaLayoutCheck {
  uint32_t lbo = 0, sbo = 0;  // descriptor strides tried (bytes)
  // A's registers: 0 = {row g k 0-15, row g+8 k 0-15, row g k 16-31, row g+8 k 16-31} (mma.sync
  // m16n8k32's order), 1 = {row g k 0-15, row g k 16-31, row g+8 k 0-15, row g+8 k 16-31}.
  int a_order = 0;
  bool ok = false;            // launched and completed
  double max_err = 0, max_ref = 0;  // columns 0-1 against the host's products
  double max_other = 0;             // columns 2-7 (zero B columns: must be 0)
};
struct WgmmaRates {
  double wgmma_ns = 0, mma_ns = 0, core_ns = 0;  // one instruction (a dot16 call) of one warpgroup / warp
  double wgmma_wpns = 0, mma_wpns = 0, core_wpns = 0;  // e4m3 weights a nanosecond an SM
};
// False (nothing measured) on a CUDA error (*error says which).
bool probe_wgmma_e4m3(std::vector<WgmmaLayoutCheck>* checks, WgmmaRates* rates, const char** error);

}  // namespace rs::kern
