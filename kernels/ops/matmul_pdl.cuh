#pragma once
// Programmatic dependent launch (PDL) for the matmul and op kernels (launch_with_pdl below also
// serves the comm kernels). Every matmul kernel lets the next kernel in the stream start early
// (launch_dependents at entry) and waits for its own predecessor (griddepcontrol.wait) only
// before it first reads anything a predecessor may have written (activations, routing,
// workspaces) or writes anything. Weights are constant during a step, so they may be streamed in
// before the wait: that overlaps a kernel's weight traffic with the tail of the previous kernel.
// One exception reads a predecessor's output before the wait on speculation only: one FP8 token's
// down (expert_decode.cuh, fp8_down_one_token_spec_op) guesses its experts from the routing
// before the wait and checks the guess against a read after it.
// wait() returns once every prerequisite grid has completed and its memory is visible; without
// the launch attribute both instructions are no-ops. The device side is kernels/common/pdl.cuh's
// (which also says what they become inside the decode megakernel); these are its names here.
#include "kernels/common/pdl.cuh"

namespace rs::kern {

__device__ __forceinline__ void pdl_launch_dependents() { rs::pdl::launch_dependents(); }
__device__ __forceinline__ void pdl_wait() { rs::pdl::wait(); }
__device__ __forceinline__ void pdl_probe_mark(unsigned tag) { rs::pdl::probe_mark(tag); }

}  // namespace rs::kern

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <utility>

namespace rs::kern {

bool matmul_pdl();  // linear_kernels.cu; set_matmul_pdl() in matmul_launch.h

// The one host-side PDL launch of the project (the comm kernels call it directly): launch with
// the programmatic stream serialization attribute set to `pdl`, as thread block clusters of
// cluster_x CTAs along x when cluster_x > 1 (grid.x a multiple of it). The attribute is recorded
// into CUDA graphs as a programmatic edge, so the overlap survives capture.
template <class... KArgs, class... Args>
cudaError_t launch_with_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, int cluster_x, size_t smem,
                            cudaStream_t s, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.numAttrs = 1;
  if (cluster_x > 1) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  cfg.attrs = attr;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Launch with programmatic stream serialization, so this kernel may start while its
// predecessor drains (see pdl_wait above for what it may and may not touch before the wait).
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  if (!matmul_pdl()) {  // plain launch: no attribute to carry
    kernel<<<grid, block, smem, s>>>(std::forward<Args>(args)...);
    return;
  }
  // Errors surface through cudaGetLastError(), which the host dispatch checks after launching.
  (void)launch_with_pdl(kernel, grid, block, 1, smem, s, true, std::forward<Args>(args)...);
}

}  // namespace rs::kern
#endif
