#pragma once
// The model's weights in device memory, in the formats the kernels consume: bf16 or FP8
// (e4m3 + fp32 128x128 block scales) matrices, fp32 norms/router/bias. Built from rs::Weights
// (any stored float dtype converted on the device) or created in place from the dummy formula.
#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "kernels/ops/linear_params.h"
#include "model/model_spec.h"

namespace rs {
class Weights;
}

namespace rs::cuda {

struct DeviceMlp {
  DeviceMatrix gate, up, down;
};

struct DeviceLayer {
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  DeviceMatrix q_proj, q_a, q_b;  // q_proj when q_lora_rank == 0
  const float* q_a_norm = nullptr;
  DeviceMatrix kv_a, kv_b, o_proj;
  const __nv_bfloat16* kv_b_bf16 = nullptr;  // kv_b as bf16 for the decode absorption
  const float* kv_a_norm = nullptr;
  bool moe = false;
  DeviceMlp dense;
  const __nv_bfloat16* router = nullptr;  // bf16 [experts, hidden] (logits by the fp32-output GEMV)
  const float* router_bias = nullptr;  // fp32 [experts] (noaux_tc)
  MoeExperts experts;                  // device arrays of DeviceMatrix
  bool has_shared = false;
  DeviceMlp shared;
};

struct WeightBytes {
  uint64_t total = 0;          // everything resident
  uint64_t dense = 0;          // read by every decode step: attention, dense MLPs, shared experts, norms, router
  uint64_t lm_head = 0;
  uint64_t per_expert = 0;     // one routed expert (gate + up + down)
  uint64_t embed_row = 0;      // one embedding row
};

struct DeviceWeights {
  const __nv_bfloat16* embed = nullptr;
  const __nv_bfloat16* lm_head = nullptr;
  const float* final_norm = nullptr;
  std::vector<DeviceLayer> layers;
  WeightBytes bytes;
  bool fp8 = false;
  DeviceBuffer arena;
};

// From loaded weights. When spec.quant.fp8_block is set and a Linear weight is stored in a float
// dtype, it is quantised on the device (DeepSeek's 128x128 amax recipe). A dummy rs::Weights is
// recreated on the device from the formula instead of copied.
std::unique_ptr<DeviceWeights> upload_weights(const ModelSpec& spec, const Weights& w);
// Dummy weights created on the device alone (no host copy): the bytes equal Weights::dummy(spec, seed).
std::unique_ptr<DeviceWeights> dummy_device_weights(const ModelSpec& spec, uint64_t seed);

}  // namespace rs::cuda
