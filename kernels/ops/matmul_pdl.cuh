#pragma once
// Programmatic dependent launch (PDL) for the matmul kernels. Every matmul kernel lets the next
// kernel in the stream start early (launch_dependents at entry) and waits for its own
// predecessor (griddepcontrol.wait) only before it first reads anything a predecessor may have
// written (activations, routing, workspaces) or writes anything. Weights are constant during a
// step, so they may be streamed in before the wait: that overlaps a kernel's weight traffic with
// the tail of the previous kernel. wait() returns once every prerequisite grid has completed and
// its memory is visible; without the launch attribute both instructions are no-ops.
namespace rs::kern {

__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace rs::kern

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <utility>

namespace rs::kern {

bool matmul_pdl();  // linear_kernels.cu; set_matmul_pdl() in matmul_launch.h

// Launch with programmatic stream serialization, so this kernel may start while its
// predecessor drains (see pdl_wait above for what it may and may not touch before the wait).
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  if (!matmul_pdl()) {  // plain launch: no attribute to carry
    kernel<<<grid, block, smem, s>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // Errors surface through cudaGetLastError(), which the host dispatch checks after launching.
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace rs::kern
#endif
