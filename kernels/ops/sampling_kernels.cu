#include "kernels/ops/sampling.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(kSamplingThreads) sampling_kernel(const SamplingParamsDev p) { sample_row(p, blockIdx.x); }
void launch_sampling(const SamplingParamsDev& p, cudaStream_t stream) {
  if (p.n > 0) sampling_kernel<<<p.n, kSamplingThreads, 0, stream>>>(p);
}
}  // namespace rs::cuda
