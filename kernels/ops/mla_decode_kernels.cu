#include "kernels/common/carveout.h"
#include "kernels/common/sm_count.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_optin.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/mla_decode.cuh"


namespace rs::cuda {
// Both kernels are launched with programmatic stream serialization and let the next kernel's
// blocks be scheduled (and its weight prologue start) while they run. The combine waits for the
// previous grid before touching anything; the split kernel starts its first cache tile before
// its wait (see mla_decode_split_block for why that tile is safe to read early).
template <int kNumWarps>
__global__ void __launch_bounds__(kNumWarps * 32, kNumWarps == 4 ? 2 : 1) mla_decode_split_kernel(const MlaDecodeParams p) {
  extern __shared__ __align__(128) char smem[];
  mla_decode_split_block<kNumWarps>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
  pdl::probe_mark(kern::kProbeEnd);
}
template <int kNumWarps>
__global__ void __launch_bounds__(kNumWarps * 32, kNumWarps == 4 ? 2 : 1)
    mla_decode_split_new_row_kernel(const MlaDecodeParams p, const KvWriteParams new_kv) {
  extern __shared__ __align__(128) char smem[];
  mla_decode_split_block<kNumWarps, true>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem, &new_kv);
  pdl::probe_mark(kern::kProbeEnd);
}
__global__ void __launch_bounds__(kCombineThreads) mla_decode_combine_kernel(const MlaDecodeParams p) {
  pdl::wait();
  pdl::launch_dependents();
  mla_decode_combine_block(p, blockIdx.x / p.heads, blockIdx.x % p.heads);
}
size_t mla_decode_smem_bytes(int /*kv_lora*/, int kv_dim) { return mla_decode::Layout(kv_dim).total; }
namespace {
template <int kNumWarps>
void launch_split(const MlaDecodeParams& p, cudaStream_t stream, const KvWriteParams* new_kv) {
  const size_t smem = mla_decode::Layout(p.kv_dim, kNumWarps / 4, new_kv != nullptr).total;
  const dim3 grid(p.splits, (p.heads + mla_decode::kHeads - 1) / mla_decode::kHeads, p.batch);
  auto launch = [&](auto* kernel, const auto&... args) {
    kern::allow_dynamic_smem(kernel, int(smem));  // a refusal shows as the launch's error
    kern::apply_carveout(kernel, kNumWarps == 8 ? "attention1" : "attention");
    kern::launch_pdl(kernel, grid, dim3(kNumWarps * 32), smem, stream, args...);
  };
  if (new_kv) launch(mla_decode_split_new_row_kernel<kNumWarps>, p, *new_kv);
  else launch(mla_decode_split_kernel<kNumWarps>, p);
}
}  // namespace
void launch_mla_decode(const MlaDecodeParams& p, cudaStream_t stream, const KvWriteParams* new_kv) {
  if (p.batch <= 0) return;
  const int sm_query = kern::current_sm_count();
  const int sms = sm_query > 0 ? sm_query : 132;  // sizes the grid only
  // A grid of at most one block per SM (batch 1 and 2) leaves every SM's second slot empty, so its
  // blocks take 8 warps: each tile's S and P V chains are half as long (H200, batch 1: split
  // kernel 7.5 -> 6.8 us under ncu, step -0.04 ms at 1K and 4K). Larger grids keep 4 warps and
  // two blocks an SM. (8 warps own kv_lora / 64 n8 column tiles each: kv_lora a multiple of 64,
  // which the backend requires anyway.)
  const int64_t blocks = int64_t(p.splits) * ((p.heads + mla_decode::kHeads - 1) / mla_decode::kHeads) * p.batch;
  if (blocks <= sms && p.kv_lora % 64 == 0)
    launch_split<8>(p, stream, new_kv);
  else
    launch_split<mla_decode::kWarps>(p, stream, new_kv);
  if (p.out)  // otherwise the consumer (launch_mla_v_up with part_o) merges the splits
    kern::launch_pdl(mla_decode_combine_kernel, dim3(p.batch * p.heads), dim3(kCombineThreads), 0, stream, p);
}
}  // namespace rs::cuda
