#include "kernels/common/carveout.h"
#include "kernels/common/env_int.h"
#include "kernels/common/smem_optin.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/mla_v_up_o.cuh"

namespace rs::cuda {
// Its successor (the router or the dense MLP) may be scheduled at once: it only loads weights
// before its own wait.
template <bool kFp8>
__global__ void __launch_bounds__(kVUpOThreads, 1) mla_v_up_o_kernel(const MlaVUpOParams p) {
  pdl::launch_dependents();
  extern __shared__ __align__(16) uint8_t vupo_wo[];
  mla_v_up_o_block<kFp8>(p, blockIdx.x / kVUpOCluster, blockIdx.x % kVUpOCluster, vupo_wo);
  pdl::probe_mark(kern::kProbeEnd);
}

namespace {
bool g_vup_o = kern::env_int("RS_VUP_O", 1, 0, 1) == 1;
bool g_vup_o_fixed = kern::env_int("RS_VUP_O_FIXED", 1, 0, 1) == 1;
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
}  // namespace

void set_mla_v_up_o(bool on) { g_vup_o = on; }
bool mla_v_up_o_fixed_sum_on() { return g_vup_o_fixed; }
void set_mla_v_up_o_fixed_sum(bool on) { g_vup_o_fixed = on; }

bool mla_v_up_o_supported(const MlaVUpOParams& p) {
  const DeviceMatrix& o = p.o;
  const bool fp8 = o.type == WeightType::FP8_E4M3_BLOCK;
  const bool o_ok = o.data && aligned16(o.data) && o.rows == kVUpOHidden && o.cols == int64_t(p.vu.heads) * kVUpOVdim &&
                    (!fp8 || (o.scale_inv && o.block_rows > 0 && o.block_cols > 0 && o.block_cols % 16 == 0));
  const bool sum_ok = p.fixed ? aligned16(p.fixed) : p.out && p.partials && p.counters;
  return g_vup_o && o_ok && p.vu.part_o && p.vu.part_lse && p.vu.kv_b && aligned16(p.vu.kv_b) && sum_ok &&
         p.vu.splits >= 1 && p.vu.splits <= kMlaDecodeMaxSplits && p.vu.kv_lora == kVUpOLatent &&
         p.vu.vdim == kVUpOVdim && p.vu.heads >= 1 && p.vu.nope >= 0;
}

template <bool kFp8>
void launch_v_up_o(const MlaVUpOParams& p, cudaStream_t stream) {
  constexpr int smem = mla_v_up_o_smem_bytes<kFp8>();
  kern::apply_carveout(mla_v_up_o_kernel<kFp8>, "attention");
  kern::allow_dynamic_smem(mla_v_up_o_kernel<kFp8>, smem);  // a refusal shows as the launch's error
  (void)kern::launch_with_pdl(mla_v_up_o_kernel<kFp8>, dim3(p.vu.heads * kVUpOCluster), dim3(kVUpOThreads),
                              kVUpOCluster, smem, stream, kern::matmul_pdl(), p);
}

void launch_mla_v_up_o(const MlaVUpOParams& p, cudaStream_t stream) {
  if (p.o.type == WeightType::FP8_E4M3_BLOCK) launch_v_up_o<true>(p, stream);
  else launch_v_up_o<false>(p, stream);
}
}  // namespace rs::cuda
