#include <algorithm>

#include "kernels/ops/weight_init.cuh"

namespace rs::cuda {
namespace {
int grid_for(int64_t count) { return int(std::min<int64_t>((count + 255) / 256, 1 << 16)); }
}  // namespace
__global__ void dummy_fill_kernel(const DummyFillParams p) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += int64_t(gridDim.x) * blockDim.x)
    dummy_fill_elem(p, i);
}
__global__ void convert_kernel(const ConvertParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    convert_elem(p, i);
}
__global__ void quantize_fp8_kernel(const QuantizeFp8Params p) { quantize_fp8_block(p, blockIdx.y, blockIdx.x); }
__global__ void fill_f32_kernel(float* out, int64_t count, float value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}
void launch_dummy_fill(const DummyFillParams& p, cudaStream_t stream) {
  if (p.count > 0) dummy_fill_kernel<<<grid_for(p.count), 256, 0, stream>>>(p);
}
void launch_convert(const ConvertParams& p, cudaStream_t stream) {
  if (p.rows * p.cols > 0) convert_kernel<<<grid_for(p.rows * p.cols), 256, 0, stream>>>(p);
}
void launch_quantize_fp8(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.rows * p.cols > 0)
    quantize_fp8_kernel<<<dim3((p.cols + 127) / 128, (p.rows + 127) / 128), 256, 0, stream>>>(p);
}
void launch_fill_f32(float* out, int64_t count, float value, cudaStream_t stream) {
  if (count > 0) fill_f32_kernel<<<grid_for(count), 256, 0, stream>>>(out, count, value);
}
}  // namespace rs::cuda
