#pragma once
// Where a captured decode step's time goes *inside* its CUDA graph. ncu times each kernel alone,
// serialised and (by default) with cold caches, which overstates small kernels and hides what
// PDL overlap buys; this measures the graph itself: all nodes of one kernel function are disabled
// (cudaGraphNodeSetEnabled) and the graph is replayed, and the drop in replay time is that
// kernel's in-graph cost, overlap included. While a kernel is disabled the step computes garbage
// (stale router ids, stale KV rows); only times are read, and every node is re-enabled after.
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace rs::cuda {

struct KernelGraphCost {
  std::string kernel;  // demangled, namespaces dropped
  int nodes = 0;       // kernel nodes of this function in the graph
  double replay_ms = 0;  // median replay time with them disabled
  double cost_us = 0;    // baseline - replay_ms, per step
};

struct GraphAblation {
  double baseline_ms = 0;  // median replay time of the whole graph
  int kernel_nodes = 0;
  std::vector<KernelGraphCost> kernels;  // by cost, largest first
};

// The kernel nodes of `graph`, in cudaGraphGetNodes order.
std::vector<cudaGraphNode_t> graph_kernel_nodes(cudaGraph_t graph);

// `graph` is the template `exec` was instantiated from (node handles come from it).
GraphAblation ablate_graph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int replays);

}  // namespace rs::cuda
