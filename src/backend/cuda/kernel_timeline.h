#pragma once
// When each kernel of a captured decode step starts and ends on the GPU, read from CUPTI's
// activity records (the device machine has no Nsight Systems). The graph ablation
// (graph_ablation.h) says what a kernel costs; this says where the step's time goes between
// kernels: the overlap PDL buys, the bubbles where no kernel runs, and which kernel waits on
// which. libcupti is loaded at run time, like NCCL (dlopen; RS_CUPTI_LIB names it where the
// usual paths do not), so the binary stays static and runs without it.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rs::cuda {

struct KernelSpan {
  std::string kernel;  // short_kernel_name (kernel_name.h)
  uint64_t start_ns = 0, end_ns = 0;  // GPU timestamps
  uint32_t blocks = 0, threads = 0;   // the launch's grid and block sizes
};

// Whether CUPTI can be used here; `why` says what is missing when not.
bool kernel_timeline_available(std::string* why);

// Every kernel of the last of `replays` replays of `exec` (instantiated from `graph`), in start
// order. The earlier replays warm up CUPTI's tracing. Throws rs::Error when CUPTI cannot be
// loaded or its records do not cover one whole replay.
std::vector<KernelSpan> trace_graph_replays(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int replays);

}  // namespace rs::cuda
