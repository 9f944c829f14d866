#pragma once
// One FP8 token's streamed gate_up on the tensor cores: the consumer side of expert_stream.cuh's
// ring for block-scaled e4m3 experts (128-column blocks), in place of the CUDA-core rows of
// xs_gate_up_rows.
//
// Why: the CUDA-core FP8 consumers are bound by issued instructions, not bytes. Per 16 weights a
// lane ran 8 conversions e4m3x2 -> f16x2, 8 packed FMAs, a block scale's index and load, the f16
// partial's conversion, and each row ended in two warp reductions; 16 integer instructions more
// per 16 weights cost ~18% of the gate_up (H200, docs/perf/cuda.md, thirty-first session). Here
// the weights go from the ring straight into `mma.sync.m16n8k32.e4m3` fragments: no conversion,
// 512 products an instruction, and the tensor core does the reduction over k.
//
// The token x in e4m3 (the weights' type, as mma needs): each 128-element block of x scaled by a
// power of two into [128, 256), then split into hi = e4m3(x s) and lo = e4m3(16 (x s - hi)), so
// hi + lo / 16 keeps ~8 significant bits of every element (bf16's precision, which x had), not
// e4m3's 4. The two parts are B's columns 0 and 1 (the other six repeat them), so one mma gives
// both W.hi and W.lo. Products of two e4m3 are exact in fp32; each 128-column block's four mma
// accumulate in fp32 from zero, then the block's weight scale and x's 2^-s apply in fp32 (the
// per-block promotion DeepSeek-V3's FP8 GEMMs use, so the tensor core's limited-precision
// accumulation never spans more than one block).
//
// A tile is 8 intermediate rows of one stage: A's rows 0..7 their gate rows, 8..15 their up rows,
// so lane (g, t = 0) ends with gate and up of row g in its own registers. A warp takes whole
// tiles (all of k), dealt round the 16 consumer warps over the block's stages as xs_gate_up_rows
// deals rows: a stage is held only by the warps that own its tiles, and the others go on to the
// next stages. (Every warp on a k-slice of every stage, the parts summed by the stage's last
// warp, was slower than the CUDA-core rows: H200, V2-Lite FP8 b1, 1.729 against 1.519 ms, the
// gate_up's advance 24.3 against 16.9 us: each warp then ran a latency chain on every stage.)
//
// k order inside a block: mma's k positions are a permutation of the block's columns, the same
// for A and B (a dot product does not care): lane t's two 16-byte loads of a row, bytes
// [32t, 32t + 32) of the block, give its four k steps' registers (word s of the first load is
// k = 4t..4t+3 of step s, word s of the second k = 16 + 4t..), and x's bytes are taken the same
// way. Rows are 2 KB apart in the stage, so two rows' lanes share banks: 2-way conflicts on the
// weight loads, which the shared-memory pipe absorbs at these rates.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/common/bf16_fp8.cuh"
#include "kernels/common/mma_ptx.cuh"
#include "kernels/ops/expert_decode.cuh"
#include "kernels/ops/expert_stream_geom.h"

namespace rs::kern {

// The act region of the tensor-core gate_up (ExpertStreamGeom::act_offset): x's hi and lo bytes
// and each block's 2^-s.
struct XsMma {
  uint8_t* hi;
  uint8_t* lo;
  float* xinv;
};
__device__ __forceinline__ XsMma xs_mma_act(uint8_t* act, int hidden) {
  return XsMma{act, act + hidden, reinterpret_cast<float*>(act + 2 * hidden)};
}

// Four e4m3 from four floats already in e4m3's range (round to nearest even, saturating).
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | hi << 16;
}

// x (each thread's kXsXVecs vectors of 8 bf16, xs_load_x's) into the act region as hi / lo e4m3
// with one power-of-two scale a 128-element block. Every thread of the
// block calls it (16 consecutive lanes hold a block: blockDim.x is a multiple of 16); the caller
// syncs after. hidden <= kXsXVecs * blockDim.x * 8 (the launcher checks).
__device__ __forceinline__ void xs_stage_x_e4m3(const ExpertGemvParams& p, const XsX& x, uint8_t* act) {
  const int hidden = p.experts.hidden, vecs = hidden / 8;
  const XsMma a = xs_mma_act(act, hidden);
#pragma unroll
  for (int k = 0; k < kXsXVecs; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    float f[8];
    rs::cuda::bf16x8_to_float(x.v[k], f);  // zero past the end
    float m = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(f[i]));
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    // m 2^s in [128, 256): hi's largest magnitudes keep e4m3's full 4 bits and lo = 16 r stays
    // below 448 (|r| <= half of hi's spacing, 8 at most).
    const int s = m > 0.f ? 7 - ilogbf(m) : 0;
    if (v >= vecs) continue;
    float hs[8], ls[8];
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const float u = ldexpf(f[i], s), w = ldexpf(f[i + 1], s);
      const __nv_fp8x2_storage_t h = __nv_cvt_float2_to_fp8x2(make_float2(u, w), __NV_SATFINITE, __NV_E4M3);
      const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(h, __NV_E4M3);
      const float2 hf = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      hs[i] = hf.x;
      hs[i + 1] = hf.y;
      ls[i] = (u - hf.x) * 16.f;  // exact: u and hf.x are within a factor of two or hf.x is 0
      ls[i + 1] = (w - hf.y) * 16.f;
    }
    reinterpret_cast<uint2*>(a.hi)[v] = make_uint2(e4m3x4(hs[0], hs[1], hs[2], hs[3]), e4m3x4(hs[4], hs[5], hs[6], hs[7]));
    reinterpret_cast<uint2*>(a.lo)[v] = make_uint2(e4m3x4(ls[0], ls[1], ls[2], ls[3]), e4m3x4(ls[4], ls[5], ls[6], ls[7]));
    if ((v & 15) == 0) a.xinv[v / 16] = ldexpf(1.f, -s);
  }
}

// This consumer warp's tiles of one landed gate_up stage (st, the slot's matrices m): tile j of
// the stage is the block's tile t0 + j and belongs to warp (t0 + j) % 16, which takes all of its
// k and writes its 8 rows of h. Rows of the stage: gate rows 0..cnt-1 then up rows, row_bytes =
// hidden apart.
__device__ __forceinline__ void xs_gate_up_mma(const ExpertGemvParams& p, const uint8_t* stage, const XsStage& st,
                                              int t0, const rs::cuda::DeviceMatrix (&m)[3], const XsMma& a,
                                              uint32_t row_bytes) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nkb = p.experts.hidden / kXsMmaBlockCols;
  const int tiles = (st.cnt + 7) / 8;
  // B's column g: x's hi (even g) or lo (odd g); C's columns 0 and 1 are hi and lo, the others
  // repeat them and are not read.
  const uint8_t* xb = (g & 1 ? a.lo : a.hi) + 32 * t;
  for (int j = (warp - t0 % kXsConsumerWarps + kXsConsumerWarps) % kXsConsumerWarps; j < tiles; j += kXsConsumerWarps) {
    const int q = 8 * j + g;  // this lane's row of the stage
    const bool valid = q < st.cnt;
    const uint8_t* wg = stage + static_cast<size_t>(q) * row_bytes + 32 * t;
    const uint8_t* wu = stage + static_cast<size_t>(st.cnt + q) * row_bytes + 32 * t;
    const float* sg = valid ? weight_row(m[0], st.r0 + q, true).scale : nullptr;
    const float* su = valid ? weight_row(m[1], st.r0 + q, true).scale : nullptr;
    float tg = 0.f, tu = 0.f;
#pragma unroll 1
    for (int kb = 0; kb < nkb; ++kb) {
      const int off = kb * kXsMmaBlockCols;
      uint4 ga = {}, gb = {}, ua = {}, ub = {};
      float s0 = 0.f, s1 = 0.f;
      if (valid) {
        s0 = __ldg(sg + kb);
        s1 = __ldg(su + kb);
        ga = *reinterpret_cast<const uint4*>(wg + off);
        gb = *reinterpret_cast<const uint4*>(wg + off + 16);
        ua = *reinterpret_cast<const uint4*>(wu + off);
        ub = *reinterpret_cast<const uint4*>(wu + off + 16);
      }
      const uint4 xa = *reinterpret_cast<const uint4*>(xb + off);
      const uint4 xc = *reinterpret_cast<const uint4*>(xb + off + 16);
      // Two chains of two mma each: half the dependent latency of one chain of four.
      float c[4] = {0.f, 0.f, 0.f, 0.f}, d[4] = {0.f, 0.f, 0.f, 0.f};
      rs::ptx::mma_e4m3_16832(c, ga.x, ua.x, gb.x, ub.x, xa.x, xc.x);
      rs::ptx::mma_e4m3_16832(d, ga.y, ua.y, gb.y, ub.y, xa.y, xc.y);
      rs::ptx::mma_e4m3_16832(c, ga.z, ua.z, gb.z, ub.z, xa.z, xc.z);
      rs::ptx::mma_e4m3_16832(d, ga.w, ua.w, gb.w, ub.w, xa.w, xc.w);
      // Lane (g, t = 0): [0], [1] = gate row g against hi, lo; [2], [3] = its up row.
      const float xi = a.xinv[kb];
      tg = fmaf(fmaf(c[1] + d[1], 0.0625f, c[0] + d[0]), s0 * xi, tg);
      tu = fmaf(fmaf(c[3] + d[3], 0.0625f, c[2] + d[2]), s1 * xi, tu);
    }
    if (valid && t == 0)
      p.h[static_cast<int64_t>(st.slot) * p.experts.inter + st.r0 + q] = __float2bfloat16_rn(silu(tg) * tu);
  }
}

}  // namespace rs::kern
