#include "kernels/common/carveout.h"
#include "kernels/common/sm_count.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/kv_cache.cuh"
#include "kernels/ops/mla_absorb.cuh"

// Launched with programmatic stream serialization (kern::launch_pdl): each kernel fetches its
// weights, waits for its predecessor before touching anything else, then lets its successor get
// scheduled early.
namespace rs::cuda {
__global__ void __launch_bounds__(kAbsorbThreads, 3) mla_absorb_q_kernel(const MlaAbsorbQParams p) {
  const int n0 = blockIdx.z * kAbsorbTokens;
  mla_absorb_q_block(p, blockIdx.x, blockIdx.y, n0, min(p.n, n0 + kAbsorbTokens));
}
template <int kRows>
__global__ void __launch_bounds__(kVUpWarps * 32) mla_v_up_kernel(const MlaVUpParams p) {
  pdl::launch_dependents();  // mla_v_up_block waits once its weight rows are in registers
  const int n0 = blockIdx.z * kAbsorbTokens;
  mla_v_up_block<kRows>(p, blockIdx.x, blockIdx.y, n0, min(p.n, n0 + kAbsorbTokens));
  pdl::probe_mark(kern::kProbeEnd);
}
// Blocks [0, kw.n) write one token's cache row each (first, so they overlap the absorb blocks
// instead of forming a last wave of their own), the rest are the absorb grid (heads x column
// chunks x token chunks, x fastest).
__global__ void __launch_bounds__(kAbsorbThreads, 3) mla_absorb_q_kv_write_kernel(const MlaAbsorbQParams p,
                                                                                   const KvWriteParams kw) {
  mla_absorb_q_kv_write_block(p, kw, blockIdx.x);
  pdl::probe_mark(kern::kProbeEnd);
}
void launch_mla_absorb_q_kv_write(const MlaAbsorbQParams& a, const KvWriteParams& kw, cudaStream_t stream) {
  const int blocks = mla_absorb_q_kv_write_blocks(a, kw);
  if (blocks == 0) return;
  kern::apply_carveout(mla_absorb_q_kv_write_kernel, "attention");
  kern::launch_pdl(mla_absorb_q_kv_write_kernel, dim3(blocks), dim3(kAbsorbThreads), 0, stream, a, kw);
}
void launch_mla_absorb_q(const MlaAbsorbQParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const dim3 grid(p.heads, p.kv_lora / kAbsorbCols, (p.n + kAbsorbTokens - 1) / kAbsorbTokens);
  kern::apply_carveout(mla_absorb_q_kernel, "attention");
  kern::launch_pdl(mla_absorb_q_kernel, grid, dim3(kAbsorbThreads), 0, stream, p);
}
void launch_mla_v_up(const MlaVUpParams& p_in, cudaStream_t stream) {
  if (p_in.n <= 0) return;
  const int sm_query = kern::current_sm_count();
  const int sms = sm_query > 0 ? sm_query : 132;  // sizes the grid only
  MlaVUpParams p = p_in;
  const int chunks = (p.n + kAbsorbTokens - 1) / kAbsorbTokens;
  p.rows_per_warp = mla_v_up_rows_per_warp(p, sms);
  const int rows_per_block = kVUpWarps * p.rows_per_warp;
  const dim3 grid(p.heads, (p.vdim + rows_per_block - 1) / rows_per_block, chunks);
  if (p.rows_per_warp == 2) {
    kern::apply_carveout(mla_v_up_kernel<2>, "attention");
    kern::launch_pdl(mla_v_up_kernel<2>, grid, dim3(kVUpWarps * 32), 0, stream, p);
  } else {
    kern::apply_carveout(mla_v_up_kernel<1>, "attention");
    kern::launch_pdl(mla_v_up_kernel<1>, grid, dim3(kVUpWarps * 32), 0, stream, p);
  }
}
}  // namespace rs::cuda
