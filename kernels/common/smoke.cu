// Keeps the CUDA toolchain exercised in CI until real kernels land.
__global__ void rs_smoke_kernel(float* x) { x[threadIdx.x] += 1.0f; }
