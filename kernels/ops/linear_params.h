#pragma once
// Shared by host and device: how a weight matrix and an MoE expert set look on the GPU.
// Contract between the CUDA executor (src/backend/cuda/) and the matmul kernels
// (kernels/ops/gemv*, expert_gemm*, src/backend/cuda/linear.*).
#include <cstdint>

namespace rs::cuda {

enum class WeightType : uint8_t { BF16, FP8_E4M3_BLOCK };

// A Linear weight as HF stores it: row-major [rows = out_features, cols = in_features].
struct DeviceMatrix {
  WeightType type = WeightType::BF16;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;        // bf16 or e4m3 elements
  const float* scale_inv = nullptr;  // FP8: fp32 [ceil(rows/128), ceil(cols/128)], row-major
  int block_rows = 128, block_cols = 128;
};

// The routed experts of one MoE layer. Arrays are device arrays indexed by expert id.
// out[t] = sum_j topk_weight[t,j] * down_e(silu(gate_e(x[t])) * up_e(x[t])),  e = topk_ids[t,j]
struct MoeExperts {
  int num_experts = 0;
  int hidden = 0;        // x and out width
  int inter = 0;         // moe_intermediate_size
  const DeviceMatrix* gate = nullptr;  // [num_experts] each [inter, hidden]
  const DeviceMatrix* up = nullptr;    // [num_experts] each [inter, hidden]
  const DeviceMatrix* down = nullptr;  // [num_experts] each [hidden, inter]
  // All expert matrices share one type, held here on the host because the arrays above live on
  // the device and cannot be read while a graph is being captured (matmul room, additive).
  WeightType type = WeightType::BF16;
  // Uniform layout (set by the loader, checked by validate_moe_experts): when every routed
  // expert's matrices and scales lie `stride` bytes after the previous expert's, expert e's
  // views are first[part] moved by e * stride. Why: the kernel then computes a routed expert's
  // view from its parameters instead of loading it from the arrays above, a dependent global
  // load on the critical path between the routing and the first weight byte. 0: read the arrays.
  int64_t stride = 0;
  DeviceMatrix first[3];  // expert 0's gate, up, down
  // Shared experts run inside the routed-expert kernels (optional; matmul room, additive):
  // n_shared always-selected experts of width `inter` and weight 1, stored as HF's concatenated
  // shared MLP: shared_gate / shared_up [n_shared * inter, hidden], shared_down
  // [hidden, n_shared * inter] (host copies of the DeviceMatrix, device data). Shared expert k
  // is rows / columns [k * inter, (k + 1) * inter) of those. Set only where
  // moe_can_fuse_shared() says so (src/backend/cuda/linear.h); n_shared = 0: routed only.
  int n_shared = 0;
  DeviceMatrix shared_gate, shared_up, shared_down;
};
// Shared experts: set n_shared / shared_* above where moe_can_fuse_shared() allows (decode
// sizes); elsewhere run them as dense linear() calls (gate, up, SwiGLU, down) and add the result
// to moe_experts()' output.

}  // namespace rs::cuda
