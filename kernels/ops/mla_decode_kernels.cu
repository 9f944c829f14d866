#include "kernels/ops/mla_decode.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(mla_decode::kThreads) mla_decode_split_kernel(const MlaDecodeParams p) {
  extern __shared__ __align__(128) char smem[];
  mla_decode_split_block(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
}
__global__ void mla_decode_combine_kernel(const MlaDecodeParams p) {
  mla_decode_combine_block(p, blockIdx.x / p.heads, blockIdx.x % p.heads);
}
size_t mla_decode_smem_bytes(int kv_lora, int kv_dim) { return mla_decode::Layout(kv_lora, kv_dim).total; }
void launch_mla_decode(const MlaDecodeParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return;
  const size_t smem = mla_decode_smem_bytes(p.kv_lora, p.kv_dim);
  static size_t configured = 0;  // opt-in above 48 KiB once per size (host-side, not captured)
  if (smem > configured) {
    cudaFuncSetAttribute(mla_decode_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    configured = smem;
  }
  const dim3 grid(p.splits, (p.heads + mla_decode::kHeads - 1) / mla_decode::kHeads, p.batch);
  mla_decode_split_kernel<<<grid, mla_decode::kThreads, smem, stream>>>(p);
  mla_decode_combine_kernel<<<p.batch * p.heads, 128, 0, stream>>>(p);
}
}  // namespace rs::cuda
