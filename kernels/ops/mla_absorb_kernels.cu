#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/kv_cache.cuh"
#include "kernels/ops/mla_absorb.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel waits for its
// predecessor before touching memory, then lets its successor get scheduled early.
namespace rs::cuda {
__global__ void __launch_bounds__(kAbsorbThreads) mla_absorb_q_kernel(const MlaAbsorbQParams p) {
  pdl::wait();
  pdl::launch_dependents();
  const int n0 = blockIdx.z * kAbsorbTokens;
  mla_absorb_q_block(p, blockIdx.x, blockIdx.y, n0, min(p.n, n0 + kAbsorbTokens));
}
__global__ void __launch_bounds__(kVUpWarps * 32) mla_v_up_kernel(const MlaVUpParams p) {
  pdl::launch_dependents();  // mla_v_up_block waits once its weight row is in registers
  const int n0 = blockIdx.z * kAbsorbTokens;
  mla_v_up_block(p, blockIdx.x, blockIdx.y, n0, min(p.n, n0 + kAbsorbTokens));
}
// Blocks [0, absorb_blocks) are the absorb grid (heads x column chunks x token chunks, x fastest),
// the next kw.n blocks write one token's cache row each.
__global__ void __launch_bounds__(kAbsorbThreads) mla_absorb_q_kv_write_kernel(const MlaAbsorbQParams p,
                                                                                const KvWriteParams kw,
                                                                                int absorb_blocks) {
  pdl::wait();
  pdl::launch_dependents();
  const int b = blockIdx.x;
  if (b >= absorb_blocks) {
    kv_write_token(kw, b - absorb_blocks);
    return;
  }
  const int chunks = p.kv_lora / kAbsorbCols;
  const int head = b % p.heads, chunk = (b / p.heads) % chunks, z = b / (p.heads * chunks);
  const int n0 = z * kAbsorbTokens;
  mla_absorb_q_block(p, head, chunk, n0, min(p.n, n0 + kAbsorbTokens));
}
void launch_mla_absorb_q_kv_write(const MlaAbsorbQParams& a, const KvWriteParams& kw, cudaStream_t stream) {
  const int absorb_blocks = a.n > 0 ? a.heads * (a.kv_lora / kAbsorbCols) * ((a.n + kAbsorbTokens - 1) / kAbsorbTokens) : 0;
  const int blocks = absorb_blocks + (kw.n > 0 ? kw.n : 0);
  if (blocks == 0) return;
  kern::launch_pdl(mla_absorb_q_kv_write_kernel, dim3(blocks), dim3(kAbsorbThreads), 0, stream, a, kw, absorb_blocks);
}
void launch_mla_absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const dim3 grid(p.heads, p.kv_lora / kAbsorbCols, (p.n + kAbsorbTokens - 1) / kAbsorbTokens);
  kern::launch_pdl(mla_absorb_q_kernel, grid, dim3(kAbsorbThreads), 0, stream, p);
}
void launch_mla_v_up(const MlaVUpParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const dim3 grid(p.heads, (p.vdim + kVUpWarps - 1) / kVUpWarps, (p.n + kAbsorbTokens - 1) / kAbsorbTokens);
  kern::launch_pdl(mla_v_up_kernel, grid, dim3(kVUpWarps * 32), 0, stream, p);
}
}  // namespace rs::cuda
