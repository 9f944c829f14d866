#pragma once
// One decode token's input norm, q_proj + kv_a GEMV and MLA query absorption in one launch
// (qkv_absorb.cuh says why and how). Plain C++: src/ includes it.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/ops/linear_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/mla_absorb_params.h"

namespace rs::cuda {

// Latent column chunks of kAbsorbCols a head (kv_lora 512), spread over the head's cluster of 4
// to 7 blocks (qkv_absorb.cuh says which).
constexpr int kQkvAbsorbChunks = 8;
constexpr int kQkvAbsorbMinCluster = 4;

struct QkvAbsorbParams {
  // The grouped GEMV as linear_group builds it: w[0] = q_proj, w[1] = kv_a (bf16), y[0] = q,
  // y[1] = kv_a's output, m = 1, with the add + RMSNorm prologue (norm_* set).
  kern::DenseGemvParams gemv;
  // The absorption, as for launch_mla_absorb_q_kv_write: q = gemv.y[0], n = 1, positions set (q's
  // rope part is rotated here). The cache row is not written here: the decode attention forms it
  // (launch_mla_decode's new_kv).
  MlaAbsorbQParams absorb;
};

// Launches it, or returns false (nothing launched) where it does not apply: not one bf16 token
// with the norm prologue, a head shape other than nope 128 / kv_lora 512, rows the streaming
// GEMV does not take, more heads than clusters of 4 blocks fit the GPU at once, or
// switched off (RS_QKV_ABSORB=0, read once; set_qkv_absorb for tests).
bool launch_qkv_absorb(QkvAbsorbParams p, int sm_count, cudaStream_t stream);
void set_qkv_absorb(bool on);
uint64_t qkv_absorb_launches();  // launches so far in this process (tests: the path was taken)
const std::string& qkv_absorb_refusal();
int qkv_absorb_cluster_size();  // blocks a head of the last launch  // why this thread's last refused call was refused

}  // namespace rs::cuda
