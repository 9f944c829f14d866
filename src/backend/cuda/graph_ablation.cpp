#include "backend/cuda/graph_ablation.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_name.h"

namespace rs::cuda {
namespace {

std::string kernel_name(const void* func) {
  const char* mangled = nullptr;
  if (cudaFuncGetName(&mangled, func) != cudaSuccess) mangled = nullptr;
  return short_kernel_name(mangled);
}

double median_replay_ms(cudaGraphExec_t exec, cudaStream_t stream, int replays) {
  cudaEvent_t a, b;
  RS_CUDA(cudaEventCreate(&a));
  RS_CUDA(cudaEventCreate(&b));
  RS_CUDA(cudaGraphLaunch(exec, stream));  // warm: the previous configuration's tail drains
  std::vector<double> ms;
  for (int i = 0; i < replays; ++i) {
    RS_CUDA(cudaEventRecord(a, stream));
    RS_CUDA(cudaGraphLaunch(exec, stream));
    RS_CUDA(cudaEventRecord(b, stream));
    RS_CUDA(cudaEventSynchronize(b));
    float t = 0;
    RS_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

std::vector<cudaGraphNode_t> graph_kernel_nodes(cudaGraph_t graph) {
  size_t count = 0;
  RS_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  RS_CUDA(cudaGraphGetNodes(graph, nodes.data(), &count));
  std::vector<cudaGraphNode_t> kernels;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType type;
    RS_CUDA(cudaGraphNodeGetType(n, &type));
    if (type == cudaGraphNodeTypeKernel) kernels.push_back(n);
  }
  return kernels;
}

GraphAblation ablate_graph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int replays) {
  std::map<std::string, std::vector<cudaGraphNode_t>> by_kernel;
  GraphAblation out;
  for (cudaGraphNode_t n : graph_kernel_nodes(graph)) {
    cudaKernelNodeParams kp{};
    RS_CUDA(cudaGraphKernelNodeGetParams(n, &kp));
    by_kernel[kernel_name(kp.func)].push_back(n);
    ++out.kernel_nodes;
  }
  out.baseline_ms = median_replay_ms(exec, stream, replays);
  for (auto& [name, ns] : by_kernel) {
    for (cudaGraphNode_t n : ns) RS_CUDA(cudaGraphNodeSetEnabled(exec, n, 0));
    KernelGraphCost c;
    c.kernel = name;
    c.nodes = static_cast<int>(ns.size());
    c.replay_ms = median_replay_ms(exec, stream, replays);
    c.cost_us = (out.baseline_ms - c.replay_ms) * 1e3;
    for (cudaGraphNode_t n : ns) RS_CUDA(cudaGraphNodeSetEnabled(exec, n, 1));
    out.kernels.push_back(c);
  }
  RS_CUDA(cudaStreamSynchronize(stream));
  std::sort(out.kernels.begin(), out.kernels.end(),
            [](const KernelGraphCost& x, const KernelGraphCost& y) { return x.cost_us > y.cost_us; });
  return out;
}

}  // namespace rs::cuda
