// Host entry of the MLA prefill attention: head-dim check and launch errors as rs::Error.
#include <string>

#include "common/error.h"
#include "kernels/ops/mla_prefill_params.h"

namespace rs::cuda {

void launch_mla_prefill(const MlaPrefillParams& p, cudaStream_t stream) {
  if (p.T <= 0) return;
  if (!mla_prefill_supported(p.nope, p.rope, p.vdim))
    throw Error("mla prefill attention: no kernel for head dims qk_nope_head_dim " + std::to_string(p.nope) +
                ", qk_rope_head_dim " + std::to_string(p.rope) + ", v_head_dim " + std::to_string(p.vdim) +
                " (compiled: 128/64/128 and 32/16/32)");
  const cudaError_t e = mla_prefill_enqueue(p, stream);
  if (e != cudaSuccess) throw Error(std::string("mla prefill attention: launch failed: ") + cudaGetErrorString(e));
}

}  // namespace rs::cuda
