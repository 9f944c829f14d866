// wgmma_probe.h's checks and rates.
//
// Layout under test (the one a GEMV would use): one 64-row x 128-column tile of e4m3 weights as
// wgmma's A from registers, four k-steps of 32. mma's k positions are a permutation of the
// tile's columns, the same for A and B: lane t of a row's four lanes loads bytes [32t, 32t + 32)
// of the row as two 16-byte words; word s of the first is k = 4t..4t+3 of step s (A's a0 / a1
// registers), word s of the second k = 16 + 4t.. (a2 / a3). B for step s is two core matrices
// (k 0-15, 16-31) of 8 columns x 16 bytes, column n's byte 4t + i of the second holding
// x_n[32t + 16 + 4s + i], of the first x_n[32t + 4s + i]. The PTX ISA's K-major unswizzled
// canonical layout, ((8,m),(T,2k)):((1T,SBO),(1,LBO)), puts the two core matrices along k LBO
// apart and 8-row groups SBO apart: (128, 256) here; the others are checked as well, and A's
// register order both ways, so that one run settles it.
#include "kernels/bench/wgmma_probe.h"
#include "kernels/common/bf16_fp8.cuh"

namespace rs::kern {
namespace {

constexpr int kRows = kWgmmaProbeRows, kCols = kWgmmaProbeCols;

__device__ __forceinline__ uint64_t smem_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = (addr >> 4) & 0x3FFFull;
  d |= static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16;
  d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;
  return d;  // base offset 0, no swizzle
}

// D += A B (scale-d = 1): A 64x32 e4m3 in registers (this warp's 16 rows), B 32x8 by descriptor.
__device__ __forceinline__ void wgmma_e4m3_m64n8k32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                    uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// One warpgroup: out[row][col] for the 64 x 8 product of w (row-major 64 x 128) and B's columns
// (x_hi, x_lo, six zero).
template <int kAOrder>
__global__ void layout_check_kernel(const uint8_t* w, const uint8_t* xhi, const uint8_t* xlo, float* out, uint32_t lbo,
                                    uint32_t sbo) {
  // The tile's B is 1 KB (four k-steps of 256 bytes); zeros past it, so that a descriptor whose
  // strides reach past a step (lbo up to 1024 from step 3 at 768) reads zeros, not past the array.
  __shared__ __align__(128) uint8_t bt[2048];
  for (int idx = threadIdx.x; idx < 2048; idx += blockDim.x) {
    const int s = idx / 256, h = idx / 128 % 2, n = idx / 16 % 8, b = idx % 16;
    const int k = 32 * (b / 4) + 16 * h + 4 * s + b % 4;
    bt[idx] = idx >= 1024 ? 0 : n == 0 ? xhi[k] : n == 1 ? xlo[k] : 0;
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy stores, read by wgmma
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const uint4 a_lo0 = *reinterpret_cast<const uint4*>(w + r0 * kCols + 32 * t);
  const uint4 a_hi0 = *reinterpret_cast<const uint4*>(w + r0 * kCols + 32 * t + 16);
  const uint4 a_lo1 = *reinterpret_cast<const uint4*>(w + r1 * kCols + 32 * t);
  const uint4 a_hi1 = *reinterpret_cast<const uint4*>(w + r1 * kCols + 32 * t + 16);
  const uint32_t l0[4] = {a_lo0.x, a_lo0.y, a_lo0.z, a_lo0.w}, h0[4] = {a_hi0.x, a_hi0.y, a_hi0.z, a_hi0.w};
  const uint32_t l1[4] = {a_lo1.x, a_lo1.y, a_lo1.z, a_lo1.w}, h1[4] = {a_hi1.x, a_hi1.y, a_hi1.z, a_hi1.w};
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint64_t desc = smem_desc(bt + s * 256, lbo, sbo);
    if constexpr (kAOrder == 0) wgmma_e4m3_m64n8k32(d, l0[s], l1[s], h0[s], h1[s], desc);
    else wgmma_e4m3_m64n8k32(d, l0[s], h0[s], l1[s], h1[s], desc);
  }
  wgmma_commit();
  wgmma_wait<0>();
  out[r0 * 8 + 2 * t] = d[0];
  out[r0 * 8 + 2 * t + 1] = d[1];
  out[r1 * 8 + 2 * t] = d[2];
  out[r1 * 8 + 2 * t + 1] = d[3];
}

// Rates: `iters` x 4 x kChains instructions on constant registers, two groups in flight. Each of
// the kChains accumulator sets is a chain of dependent instructions; the chains are independent,
// so 1 chain measures a dependent instruction's latency and 4 how fast independent ones issue.
template <int kChains>
__global__ void wgmma_rate_kernel(float* sink, int iters) {
  __shared__ __align__(128) uint8_t bt[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) bt[i] = 0x30;
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[kChains][4] = {};
  const uint32_t a = 0x30303030u + (threadIdx.x & 7);
  const uint8_t* b = bt + (threadIdx.x / 128 & 1) * 512;
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();  // d is the previous group's, still in flight (the same accumulator chains)
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int c = 0; c < kChains; ++c)
        wgmma_e4m3_m64n8k32(d[c], a, a + 1, a + 2, a + 3, smem_desc(b + (s & 1) * 256, 128, 256));
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
__global__ void mma_rate_kernel(float* sink, int iters) {
  float c[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t a = 0x30303030u + (threadIdx.x & 7);
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int s = 0; s < 4; s += 2) {
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                   : "r"(a), "r"(a + 1), "r"(a + 2), "r"(a + 3), "r"(a + s), "r"(a + 5));
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : "+f"(e[0]), "+f"(e[1]), "+f"(e[2]), "+f"(e[3])
                   : "r"(a + 1), "r"(a + 2), "r"(a + 3), "r"(a + 4), "r"(a + s), "r"(a + 6));
    }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = c[0] + c[1] + c[2] + c[3] + e[0] + e[1] + e[2] + e[3];
}
__global__ void core_rate_kernel(float* sink, int iters) {
  const uint32_t a = 0x30303030u + (threadIdx.x & 7);
  const uint4 x0 = make_uint4(0x3c003c00u, a, a, a), x1 = make_uint4(a, a, a, 0x3c003c00u);
  __half2 acc[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[j] = __float2half2_rn(0.f);
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] = dot16_e4m3_f16_acc(make_uint4(a + it, a + j, a, a), x0, x1, acc[j]);
  sink[blockIdx.x * blockDim.x + threadIdx.x] = half2_sum(acc[0]) + half2_sum(acc[1]) + half2_sum(acc[2]) + half2_sum(acc[3]);
}

template <typename F>
bool timed(F launch, float* ms, const char** error) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();  // warm-up
  cudaEventRecord(a);
  launch();
  cudaEventRecord(b);
  const cudaError_t e = cudaEventSynchronize(b);
  cudaEventElapsedTime(ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (e != cudaSuccess || cudaGetLastError() != cudaSuccess) {
    *error = cudaGetErrorString(e);
    return false;
  }
  return true;
}

}  // namespace

bool wgmma_layout_outputs(const uint8_t* w, const uint8_t* xhi, const uint8_t* xlo,
                          const std::vector<WgmmaLayout>& layouts, std::vector<std::vector<float>>* outs,
                          const char** error) {
  uint8_t *dw = nullptr, *dh = nullptr, *dl = nullptr;
  float* dout = nullptr;
  bool good = cudaMalloc(&dw, kRows * kCols) == cudaSuccess && cudaMalloc(&dh, kCols) == cudaSuccess &&
              cudaMalloc(&dl, kCols) == cudaSuccess && cudaMalloc(&dout, kRows * 8 * 4) == cudaSuccess;
  if (!good) *error = "cudaMalloc failed";
  if (good) {
    cudaMemcpy(dw, w, kRows * kCols, cudaMemcpyHostToDevice);
    cudaMemcpy(dh, xhi, kCols, cudaMemcpyHostToDevice);
    cudaMemcpy(dl, xlo, kCols, cudaMemcpyHostToDevice);
  }
  for (size_t i = 0; good && i < layouts.size(); ++i) {
    const WgmmaLayout& l = layouts[i];
    cudaMemset(dout, 0, kRows * 8 * 4);
    if (l.a_order == 0) layout_check_kernel<0><<<1, 128>>>(dw, dh, dl, dout, l.lbo, l.sbo);
    else layout_check_kernel<1><<<1, 128>>>(dw, dh, dl, dout, l.lbo, l.sbo);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      *error = cudaGetErrorString(e);
      good = false;
      break;
    }
    std::vector<float> out(kRows * 8);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    outs->push_back(std::move(out));
  }
  cudaFree(dw);
  cudaFree(dh);
  cudaFree(dl);
  cudaFree(dout);
  return good;
}

bool wgmma_rates(WgmmaRates* rates, const char** error) {
  constexpr int blocks = 132, threads = 256, iters = 20000;
  float* sink = nullptr;
  if (cudaMalloc(&sink, size_t(blocks) * threads * 4) != cudaSuccess) {
    *error = "cudaMalloc failed";
    return false;
  }
  // mma.sync and the CUDA-core dot, weights a nanosecond an SM: instructions issued by one warp
  // times its weights, times the warps a block, over the kernel's time (one block an SM).
  const double instr = iters * 4.0, warps = threads / 32.0;
  // wgmma: from the grid below, its cell of one chain on this block's warpgroups.
  constexpr int wgs = threads / 128, wg_cell = wgs == 1 ? 0 : wgs == 2 ? 1 : 2;
  static_assert(wgs == 1 || wgs == 2 || wgs == 4, "the grid measures 1, 2 or 4 warpgroups");
  float ms = 0;
  bool good = true;
  // An SM's wgmma issue interval by chains and warpgroups (one block an SM of 128 x warpgroups).
  for (int ci = 0; good && ci < 2; ++ci)
    for (int wi = 0; good && wi < 3; ++wi) {
      const int chains = ci ? 4 : 1, w = 1 << wi, it = iters / chains;
      auto k = ci ? wgmma_rate_kernel<4> : wgmma_rate_kernel<1>;
      good = timed([&] { k<<<blocks, 128 * w>>>(sink, it); }, &ms, error);
      if (good) rates->wgmma_sm_ns[ci][wi] = ms * 1e6 / (double(it) * 4 * chains * w);
    }
  if (good) {
    // One dependent chain on each of a block's warpgroups: per warpgroup, an instruction every
    // wgs SM intervals; each brings 64 x 32 weights.
    const double sm_ns = rates->wgmma_sm_ns[0][wg_cell];
    rates->wgmma_ns = wgs * sm_ns;
    rates->wgmma_wpns = 64 * 32 / sm_ns;
    good = timed([&] { mma_rate_kernel<<<blocks, threads>>>(sink, iters); }, &ms, error);
  }
  if (good) {
    rates->mma_ns = ms * 1e6 / instr;
    rates->mma_wpns = warps * instr * 16 * 32 / (ms * 1e6);
    good = timed([&] { core_rate_kernel<<<blocks, threads>>>(sink, iters); }, &ms, error);
  }
  if (good) {
    rates->core_ns = ms * 1e6 / instr;
    rates->core_wpns = warps * instr * 32 * 16 / (ms * 1e6);
  }
  cudaFree(sink);
  return good;
}

}  // namespace rs::kern
