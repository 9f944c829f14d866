#include "kernels/common/carveout.h"
#include "kernels/common/env_int.h"
#include "kernels/common/smem_optin.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/mla_v_up_o.cuh"

namespace rs::cuda {
// Its successor (the router or the dense MLP) may be scheduled at once: it only loads weights
// before its own wait.
template <bool kFp8, bool kBulk>
__global__ void __launch_bounds__(kVUpOThreads, 1) mla_v_up_o_kernel(const MlaVUpOParams p) {
  pdl::launch_dependents();
  extern __shared__ __align__(16) uint8_t vupo_wo[];
  mla_v_up_o_block<kFp8, kBulk>(p, blockIdx.x / kVUpOCluster, blockIdx.x % kVUpOCluster, vupo_wo);
  pdl::probe_mark(kern::kProbeEnd);
}

namespace {
bool g_vup_o = kern::env_int("RS_VUP_O", 1, 0, 1) == 1;
// The weights by bulk copies into shared memory (mla_v_up_o.cuh, kBulk) instead of register loads
// and cp.async: 0 neither type, 1 bf16 (default), 2 both (environment RS_VUPO_BULK,
// set_mla_v_up_o_bulk). H200, V2-Lite b1, one call, four rounds: bf16 1.836-1.837 against
// 1.840-1.843 ms a step (launch advance 6.14 against 6.40 us); FP8, whose 32 KB slice fits in
// registers, 1.597-1.600 against 1.558-1.561 (advance 6.66 against 5.38 us: 384 copies of 128 bytes
// a block, twice bf16's count per byte).
int g_vupo_bulk = kern::env_int("RS_VUPO_BULK", 1, 0, 2);
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
}  // namespace

void set_mla_v_up_o(bool on) { g_vup_o = on; }
void set_mla_v_up_o_bulk(int mode) { g_vupo_bulk = mode; }
int mla_v_up_o_bulk() { return g_vupo_bulk; }

bool mla_v_up_o_supported(const MlaVUpOParams& p) {
  const DeviceMatrix& o = p.o;
  const bool fp8 = o.type == WeightType::FP8_E4M3_BLOCK;
  const bool o_ok = o.data && aligned16(o.data) && o.rows == kVUpOHidden && o.cols == int64_t(p.vu.heads) * kVUpOVdim &&
                    (!fp8 || (o.scale_inv && o.block_rows > 0 && o.block_cols > 0 && o.block_cols % 16 == 0));
  return g_vup_o && o_ok && p.vu.part_o && p.vu.part_lse && p.vu.kv_b && aligned16(p.vu.kv_b) && p.out && p.partials &&
         p.counters && p.vu.splits >= 1 && p.vu.splits <= kMlaDecodeMaxSplits && p.vu.kv_lora == kVUpOLatent && p.vu.vdim == kVUpOVdim &&
         p.vu.heads >= 1 && p.vu.nope >= 0;
}

template <bool kFp8, bool kBulk>
void launch_v_up_o(const MlaVUpOParams& p, cudaStream_t stream) {
  constexpr int smem = kBulk ? mla_v_up_o_bulk_smem_bytes<kFp8>() : mla_v_up_o_smem_bytes<kFp8>();
  auto* kernel = mla_v_up_o_kernel<kFp8, kBulk>;
  kern::apply_carveout(kernel, "attention");
  kern::allow_dynamic_smem(kernel, smem);  // a refusal shows as the launch's error
  (void)kern::launch_with_pdl(kernel, dim3(p.vu.heads * kVUpOCluster), dim3(kVUpOThreads), kVUpOCluster, smem, stream,
                              kern::matmul_pdl(), p);
}

void launch_mla_v_up_o(const MlaVUpOParams& p, cudaStream_t stream) {
  const bool fp8 = p.o.type == WeightType::FP8_E4M3_BLOCK;
  if (g_vupo_bulk >= (fp8 ? 2 : 1)) fp8 ? launch_v_up_o<true, true>(p, stream) : launch_v_up_o<false, true>(p, stream);
  else fp8 ? launch_v_up_o<true, false>(p, stream) : launch_v_up_o<false, false>(p, stream);
}
}  // namespace rs::cuda
