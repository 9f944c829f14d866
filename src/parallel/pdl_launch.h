#pragma once
// Host side of programmatic dependent launch: every comm kernel goes through here, with the
// programmatic stream serialization attribute, so it may start while the previous kernel in its
// stream runs (it waits in griddepcontrol.wait; kernels/common/pdl.cuh). The attribute is
// recorded into CUDA graphs as a programmatic edge, so the overlap survives capture.
#include <cuda_runtime.h>

#include <utility>

namespace rs::parallel {

template <class... KernelArgs, class... Args>
cudaError_t launch_maybe_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                             size_t smem_bytes, cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The same, as thread block clusters of cluster_x CTAs along x (grid.x a multiple of it).
template <class... KernelArgs, class... Args>
cudaError_t launch_maybe_pdl_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, int cluster_x,
                                     size_t smem_bytes, cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  attribute[1].id = cudaLaunchAttributeClusterDimension;
  attribute[1].val.clusterDim.x = static_cast<unsigned>(cluster_x);
  attribute[1].val.clusterDim.y = 1;
  attribute[1].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 2;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace rs::parallel
