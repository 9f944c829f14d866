#include "kernels/common/smem_optin.h"
#include "kernels/ops/mla_prefill.cuh"

namespace rs::cuda {
namespace {

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) mla_prefill_kernel(const MlaPrefillParams p) {
  extern __shared__ __align__(128) char smem[];
  // Longest first: blockIdx.y = 0 is the last query tile (the most causal key tiles), and the
  // heads of one query tile are consecutive, so they walk the same K/V prefix together. (A
  // head-major order, one head's tiles together, measured 20% slower at 8K.)
  mla_prefill_block<C>(p, gridDim.y - 1 - blockIdx.y, blockIdx.x, smem);
}

template <class C>
cudaError_t launch(const MlaPrefillParams& p, cudaStream_t stream) {
  if (!kern::allow_dynamic_smem(mla_prefill_kernel<C>, int(C::kSmem))) return cudaErrorInvalidConfiguration;
  const dim3 grid(p.heads, (p.T + C::kRows - 1) / C::kRows);
  mla_prefill_kernel<C><<<grid, C::kThreads, C::kSmem, stream>>>(p);
  return cudaGetLastError();
}

// DeepSeek-V2/V3 head dims: 8 warps x 32 rows = 256 queries a block, 32-key tiles, one block
// (145 KB of shared memory, 238 registers a thread) per SM. Measured on an H200 against 64- and
// 128-row blocks (docs/perf/cuda.md): the larger query tile halves the K/V bytes each FLOP pulls
// from L2 into shared memory, and two m-tiles per warp use every K/V fragment twice.
//                                  nope rope  v  warps mt tile blocks/SM
using V2 = mla_prefill::Config<128, 64, 128, 8, 2, 32, 1>;
// Fixture head dims (tiny models): 64-query blocks, Q fragments resident.
using Tiny = mla_prefill::Config<32, 16, 32, 4, 1, 64, 2>;

bool is_v2(int nope, int rope, int vdim) { return nope == 128 && rope == 64 && vdim == 128; }
bool is_tiny(int nope, int rope, int vdim) { return nope == 32 && rope == 16 && vdim == 32; }

}  // namespace

bool mla_prefill_supported(int nope, int rope, int vdim) { return is_v2(nope, rope, vdim) || is_tiny(nope, rope, vdim); }

cudaError_t mla_prefill_enqueue(const MlaPrefillParams& p, cudaStream_t stream) {
  if (p.T <= 0) return cudaSuccess;
  if (is_v2(p.nope, p.rope, p.vdim)) return launch<V2>(p, stream);
  if (is_tiny(p.nope, p.rope, p.vdim)) return launch<Tiny>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace rs::cuda
