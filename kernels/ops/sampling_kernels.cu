#include "kernels/ops/sampling.cuh"

namespace rs::cuda {
__global__ void __launch_bounds__(256) logit_stats_kernel(const SamplingParamsDev p) {
  sampling::logit_stats_segment(p, blockIdx.y, blockIdx.x);
}
__global__ void __launch_bounds__(kSamplingThreads) sampling_kernel(const SamplingParamsDev p) { sample_row(p, blockIdx.x); }
void launch_sampling(const SamplingParamsDev& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  static_assert(kLogitStatsMaxSegments <= kSamplingThreads, "one segment summary per sampler thread");
  logit_stats_kernel<<<dim3(logit_stats_segments(p.vocab), p.n), 256, 0, stream>>>(p);
  sampling_kernel<<<p.n, kSamplingThreads, 0, stream>>>(p);
}
}  // namespace rs::cuda
