#include "kernels/ops/mla_absorb.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(kAbsorbThreads) mla_absorb_q_kernel(const MlaAbsorbQParams p) {
  mla_absorb_q_block(p, blockIdx.x, blockIdx.y);
}
__global__ void __launch_bounds__(kVUpWarps * 32) mla_v_up_kernel(const MlaVUpParams p) {
  mla_v_up_block(p, blockIdx.x, blockIdx.y);
}
void launch_mla_absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const dim3 grid(p.heads, p.kv_lora / kAbsorbCols);
  mla_absorb_q_kernel<<<grid, kAbsorbThreads, 0, stream>>>(p);
}
void launch_mla_v_up(const MlaVUpParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const dim3 grid(p.heads, (p.vdim + kVUpWarps - 1) / kVUpWarps);
  mla_v_up_kernel<<<grid, kVUpWarps * 32, 0, stream>>>(p);
}
}  // namespace rs::cuda
