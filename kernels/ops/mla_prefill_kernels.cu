#include "kernels/ops/mla_prefill.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(mla_prefill::kThreads) mla_prefill_kernel(const MlaPrefillParams p) {
  extern __shared__ __align__(128) char smem[];
  mla_prefill_block(p, blockIdx.x, blockIdx.y, smem);
}
size_t mla_prefill_smem_bytes(int nope, int rope, int vdim) { return mla_prefill::Layout(nope, rope, vdim).total; }
void launch_mla_prefill(const MlaPrefillParams& p, cudaStream_t stream) {
  if (p.T <= 0) return;
  const size_t smem = mla_prefill_smem_bytes(p.nope, p.rope, p.vdim);
  static size_t configured = 0;
  if (smem > configured) {
    cudaFuncSetAttribute(mla_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    configured = smem;
  }
  const dim3 grid((p.T + mla_prefill::kRows - 1) / mla_prefill::kRows, p.heads);
  mla_prefill_kernel<<<grid, mla_prefill::kThreads, smem, stream>>>(p);
}
}  // namespace rs::cuda
