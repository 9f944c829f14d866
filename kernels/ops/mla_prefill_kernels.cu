#include "kernels/ops/mla_prefill.cuh"
#include "kernels/ops/mla_prefill_wmma.cuh"

namespace rs::cuda {
namespace {

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) mla_prefill_kernel(const MlaPrefillParams p) {
  extern __shared__ __align__(128) char smem[];
  // Longest first: blockIdx.y = 0 is the last query tile (the most causal key tiles), and the
  // heads of one query tile are consecutive so they share the K/V prefix in L2.
  mla_prefill_block<C>(p, gridDim.y - 1 - blockIdx.y, blockIdx.x, smem);
}

template <class C>
cudaError_t launch(const MlaPrefillParams& p, cudaStream_t stream) {
  static bool configured = false;  // opt-in above 48 KiB, once per instantiation
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(mla_prefill_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmem));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const dim3 grid(p.heads, (p.T + C::kRows - 1) / C::kRows);
  mla_prefill_kernel<C><<<grid, C::kThreads, C::kSmem, stream>>>(p);
  return cudaGetLastError();
}

//                                    nope rope  v  warps mt tile blocks/SM
using V2Default = mla_prefill::Config<128, 64, 128, 4, 1, 64, 2>;
using V2Tile32 = mla_prefill::Config<128, 64, 128, 4, 1, 32, 3>;
using V2Rows128 = mla_prefill::Config<128, 64, 128, 8, 1, 64, 1>;
using V2Mt2Tile32 = mla_prefill::Config<128, 64, 128, 4, 2, 32, 2>;
using V2Mt2Tile64 = mla_prefill::Config<128, 64, 128, 4, 2, 64, 1>;
using Tiny = mla_prefill::Config<32, 16, 32, 4, 1, 64, 2>;

__global__ void __launch_bounds__(mla_prefill_wmma::kThreads) mla_prefill_wmma_kernel(const MlaPrefillParams p) {
  extern __shared__ __align__(128) char smem[];
  mla_prefill_wmma_block(p, blockIdx.x, blockIdx.y, smem);
}
cudaError_t launch_wmma(const MlaPrefillParams& p, cudaStream_t stream) {
  const size_t smem = mla_prefill_wmma::Layout(p.nope, p.rope, p.vdim).total;
  static size_t configured = 0;
  if (smem > configured) {
    cudaFuncSetAttribute(mla_prefill_wmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    configured = smem;
  }
  const dim3 grid((p.T + mla_prefill_wmma::kRows - 1) / mla_prefill_wmma::kRows, p.heads);
  mla_prefill_wmma_kernel<<<grid, mla_prefill_wmma::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

bool is_v2(const MlaPrefillParams& p) { return p.nope == 128 && p.rope == 64 && p.vdim == 128; }
bool is_tiny(const MlaPrefillParams& p) { return p.nope == 32 && p.rope == 16 && p.vdim == 32; }

}  // namespace

bool mla_prefill_supported(int nope, int rope, int vdim) {
  MlaPrefillParams p;
  p.nope = nope;
  p.rope = rope;
  p.vdim = vdim;
  return is_v2(p) || is_tiny(p);
}

cudaError_t mla_prefill_enqueue(const MlaPrefillParams& p, cudaStream_t stream, int variant) {
  if (p.T <= 0) return cudaSuccess;
  if (!mla_prefill_supported(p.nope, p.rope, p.vdim)) return cudaErrorInvalidValue;
  if (variant < 0) return launch_wmma(p, stream);
  if (is_tiny(p)) return launch<Tiny>(p, stream);
  if (variant == 1) return launch<V2Tile32>(p, stream);
  if (variant == 2) return launch<V2Rows128>(p, stream);
  if (variant == 3) return launch<V2Mt2Tile32>(p, stream);
  if (variant == 4) return launch<V2Mt2Tile64>(p, stream);
  return launch<V2Default>(p, stream);
}

}  // namespace rs::cuda
