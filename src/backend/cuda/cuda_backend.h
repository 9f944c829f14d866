#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/graph_ablation.h"
#include "backend/cuda/kernel_timeline.h"
#include "kernels/common/wait_probe.h"

namespace rs {
// Number of usable CUDA devices; 0 (with `why` set) when there is no driver or no GPU.
int cuda_device_count(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(const ModelSpec& spec, const Weights& weights);
// Dummy weights created on the GPU alone (no host copy); bytes equal Weights::dummy(spec, seed).
// spec.quant.fp8_block selects block-FP8 linear weights (`--quantization fp8`).
std::unique_ptr<Backend> make_cuda_backend_dummy(const ModelSpec& spec, uint64_t seed);

// What the CUDA backend's last execute() had to read from HBM, for `bench forward`'s roofline:
// every weight the step touched (each selected routed expert once), and the latent KV attended.
struct CudaStepTraffic {
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  double experts_per_moe_layer = 0;  // distinct routed experts touched, averaged over MoE layers
  std::vector<std::vector<int32_t>> first_row_routing;  // per MoE layer: the step's first row's top-k ids
};
// Throws rs::Error if `b` is not the CUDA backend. Reads the last step's routing from the device.
CudaStepTraffic cuda_last_step_traffic(Backend& b);
// For each row of the last step (rows in batch order, decode sequences first), the smallest gap
// at any MoE layer's discrete routing choice (group cut or k-th expert) as the GPU router saw it:
// where it is below bf16 noise, a GPU/CPU difference at that row is a routing flip, not a bug.
// Recorded only after cuda_record_routing_margins(b, true) (off by default: the margin costs the
// batch-1 step's router one more selection round); otherwise it throws rs::Error.
void cuda_record_routing_margins(Backend& b, bool on);
std::vector<float> cuda_last_step_routing_margins(Backend& b);
// The batch-1 decode megakernel (kernels/mega/): whether the backend's one-token decode steps
// run on it, and if not, why ("" before the first one-token decode step).
struct CudaMegakernelState {
  bool active = false;
  std::string off_reason;
  std::string profile;  // RS_MEGA_PROFILE=1: the last launch's time per kind of instruction
};
CudaMegakernelState cuda_megakernel_state(Backend& b);
// Row `row` of the last step's logits as the device holds them (a decode step computes every
// row of its bucket), for tests comparing decode paths. Throws rs::Error if `b` is not the CUDA
// backend.
std::vector<float> cuda_last_step_logits(Backend& b, int row);
// In-graph cost of each kernel of the last decode step's CUDA graph (graph_ablation.h), for
// `bench forward --ablate`. Throws rs::Error if `b` is not the CUDA backend or no decode graph ran.
cuda::GraphAblation cuda_decode_graph_ablation(Backend& b, int replays);

// When each kernel of the last decode step's CUDA graph ran, from the last of `replays` replays
// traced through CUPTI (kernel_timeline.h), for `bench forward --timeline`.
std::vector<cuda::KernelSpan> cuda_decode_graph_timeline(Backend& b, int replays);
// Every PDL wait of one replay of the last decode step's CUDA graph (kernels/common/wait_probe.h),
// for `bench forward --wait-probe`; an rs::Error unless the binary was built with RS_WAIT_PROBE.
std::vector<kern::WaitProbeRecord> cuda_decode_graph_wait_probe(Backend& b);
// A step's block tables go up in the same copy as its other metadata while their row padding
// is at most this many bytes (default 64 KB), else in a second, strided copy. Tests set 0 to
// run the second copy on small batches.
void set_cuda_upload_one_copy_pad(size_t bytes);

}  // namespace rs
