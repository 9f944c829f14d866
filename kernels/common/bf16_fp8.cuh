#pragma once
// Conversions and wide loads shared by the matmul kernels. Weights stream through once per step,
// so they are read with 16-byte non-coherent loads that skip L1 allocation; activations are small
// and re-read by many warps, so they use the ordinary read-only path (kept in L1/L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace rs::kern {

// 16 bytes of weights that no one else touches during the kernel: do not pollute L1.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes of activations: read-only cached path. The non-coherent path is only valid for data
// that does not change during the kernel, which holds for an op launched as its own kernel (its
// inputs are a predecessor's outputs). The decode megakernel (kernels/mega/) runs the same ops in
// one launch, where an activation buffer is rewritten every layer by other CTAs and a stale L1
// line of the previous layer could be returned: its translation unit defines RS_MEGAKERNEL_TU
// before any include, and activations are then read with ordinary loads, which the grid
// barrier's acquire orders after the writers' release.
__device__ __forceinline__ uint4 ld_cached16(const void* p) {
#ifdef RS_MEGAKERNEL_TU
  return *reinterpret_cast<const uint4*>(p);
#else
  return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// Dot product of 8 bf16 weights with 8 bf16 activations, fp32 accumulation.
__device__ __forceinline__ float dot8_bf16(const uint4& w, const uint4& x, float acc) {
  acc = fmaf(bf16_lo(w.x), bf16_lo(x.x), acc);
  acc = fmaf(bf16_hi(w.x), bf16_hi(x.x), acc);
  acc = fmaf(bf16_lo(w.y), bf16_lo(x.y), acc);
  acc = fmaf(bf16_hi(w.y), bf16_hi(x.y), acc);
  acc = fmaf(bf16_lo(w.z), bf16_lo(x.z), acc);
  acc = fmaf(bf16_hi(w.z), bf16_hi(x.z), acc);
  acc = fmaf(bf16_lo(w.w), bf16_lo(x.w), acc);
  acc = fmaf(bf16_hi(w.w), bf16_hi(x.w), acc);
  return acc;
}

// Two e4m3 values (low 16 bits of v) -> two fp32. e4m3 is exactly representable in fp16, and
// sm_90 converts e4m3x2 -> f16x2 in one instruction.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t v) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu),
                                             __NV_E4M3);
  return __half22float2(*reinterpret_cast<__half2*>(&h));
}

// Dot product of 4 e4m3 weights (one 32-bit word) with 4 bf16 activations (two words).
__device__ __forceinline__ float dot4_e4m3(uint32_t w, uint32_t x01, uint32_t x23, float acc) {
  float2 a = e4m3x2_to_float2(w);
  float2 b = e4m3x2_to_float2(w >> 16);
  acc = fmaf(a.x, bf16_lo(x01), acc);
  acc = fmaf(a.y, bf16_hi(x01), acc);
  acc = fmaf(b.x, bf16_lo(x23), acc);
  acc = fmaf(b.y, bf16_hi(x23), acc);
  return acc;
}

// 16 e4m3 weights against 16 bf16 activations held in two uint4.
__device__ __forceinline__ float dot16_e4m3(const uint4& w, const uint4& x0, const uint4& x1) {
  float acc = 0.f;
  acc = dot4_e4m3(w.x, x0.x, x0.y, acc);
  acc = dot4_e4m3(w.y, x0.z, x0.w, acc);
  acc = dot4_e4m3(w.z, x1.x, x1.y, acc);
  acc = dot4_e4m3(w.w, x1.z, x1.w, acc);
  return acc;
}

// a / b for a >= 0 and b > 0, the FP8 block arithmetic of the dot loops: a shift where b is a
// power of two (the block sizes of every DeepSeek checkpoint, 128), which the compiler keeps out
// of the loops. The 64-bit division it replaces ran once a chunk in every FP8 dot loop (PTX: 23
// div.s64 in the streamed FP8 gate_up kernel against 12 in the bf16 one), a few dozen
// instructions against the ~20 of the chunk's dot product, and twice a row for the row's scale
// pointer.
template <class T>
__device__ __forceinline__ T fp8_block_div(T a, int b) {
  const unsigned ub = static_cast<unsigned>(b);
  return (ub & (ub - 1u)) == 0u ? a >> (__ffs(b) - 1) : a / static_cast<T>(b);
}

// The scale column of 16-element chunk c of an FP8 row: (c * 16) / block_cols, in 32 bits (the
// chunks of a row are far below 2^28).
__device__ __forceinline__ int fp8_scale_col(int64_t c, int block_cols) {
  return static_cast<int>(fp8_block_div(static_cast<unsigned>(c) * 16u, block_cols));
}

// 16 e4m3 weights against 16 activations given as f16 (eight f16x2 words in two uint4, already
// scaled into f16's range: |x| < 8, see stage_f16 in expert_decode.cuh), for the FP8 expert
// GEMVs, whose time went into per-element conversions (dot16_e4m3: ~56 instructions a chunk, so
// an FP8 item took as long as a bf16 item of twice its bytes). Here: 8 conversions e4m3x2 ->
// f16x2 and 8 packed f16 FMAs, the 16 products summed in f16 (each half-lane sums 8 products of
// |w| <= 448 and |x| < 8: below 28672, inside f16's 65504), then one conversion of the two
// halves to fp32. The f16 partial rounds to 11 bits per product over 8 products (~1e-3
// relative of a 16-element partial); the partials are summed in fp32 as before.
// The 16 products added to acc in f16 (dot16_e4m3_f16 without its conversion): a caller may add
// two chunks into one accumulator, 16 products a half-lane, below 16 x 448 x 8 = 57344 < 65504.
__device__ __forceinline__ __half2 dot16_e4m3_f16_acc(const uint4& w, const uint4& x0, const uint4& x1, __half2 acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ws[q] & 0xffffu), __NV_E4M3);
    __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ws[q] >> 16), __NV_E4M3);
    acc = __hfma2(*reinterpret_cast<__half2*>(&lo), *reinterpret_cast<const __half2*>(&xs[2 * q]), acc);
    acc = __hfma2(*reinterpret_cast<__half2*>(&hi), *reinterpret_cast<const __half2*>(&xs[2 * q + 1]), acc);
  }
  return acc;
}
__device__ __forceinline__ float half2_sum(__half2 h) {
  const float2 f = __half22float2(h);
  return f.x + f.y;
}
__device__ __forceinline__ float dot16_e4m3_f16(const uint4& w, const uint4& x0, const uint4& x1) {
  return half2_sum(dot16_e4m3_f16_acc(w, x0, x1, __float2half2_rn(0.f)));
}

// Two fp32 -> packed bf16x2 (round to nearest even), low half = a.
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

// Four e4m3 (one word) scaled by s -> four bf16 (two words). Used where tensor cores take bf16.
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t w, float s) {
  float2 a = e4m3x2_to_float2(w);
  float2 b = e4m3x2_to_float2(w >> 16);
  return make_uint2(pack_bf16x2(a.x * s, a.y * s), pack_bf16x2(b.x * s, b.y * s));
}

}  // namespace rs::kern
