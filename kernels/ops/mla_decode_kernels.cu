#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/mla_decode.cuh"


namespace rs::cuda {
// Both kernels are launched with programmatic stream serialization and let the next kernel's
// blocks be scheduled (and its weight prologue start) while they run. The combine waits for the
// previous grid before touching anything; the split kernel starts its first cache tile before
// its wait (see mla_decode_split_block for why that tile is safe to read early).
__global__ void __launch_bounds__(mla_decode::kThreads, 2) mla_decode_split_kernel(const MlaDecodeParams p) {
  extern __shared__ __align__(128) char smem[];
  mla_decode_split_block(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
}
__global__ void __launch_bounds__(kCombineThreads) mla_decode_combine_kernel(const MlaDecodeParams p) {
  pdl::wait();
  pdl::launch_dependents();
  mla_decode_combine_block(p, blockIdx.x / p.heads, blockIdx.x % p.heads);
}
size_t mla_decode_smem_bytes(int /*kv_lora*/, int kv_dim) { return mla_decode::Layout(kv_dim).total; }
void launch_mla_decode(const MlaDecodeParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return;
  const size_t smem = mla_decode_smem_bytes(p.kv_lora, p.kv_dim);
  static size_t configured = 0;  // opt-in above 48 KiB once per size (host-side, not captured)
  if (smem > configured) {
    cudaFuncSetAttribute(mla_decode_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    configured = smem;
  }
  const dim3 grid(p.splits, (p.heads + mla_decode::kHeads - 1) / mla_decode::kHeads, p.batch);
  kern::launch_pdl(mla_decode_split_kernel, grid, dim3(mla_decode::kThreads), smem, stream, p);
  if (p.out)  // otherwise the consumer (launch_mla_v_up with part_o) merges the splits
    kern::launch_pdl(mla_decode_combine_kernel, dim3(p.batch * p.heads), dim3(kCombineThreads), 0, stream, p);
}
}  // namespace rs::cuda
