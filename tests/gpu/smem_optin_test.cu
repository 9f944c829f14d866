// gpu.cuda: kern::allow_dynamic_smem (kernels/common/smem_optin.h) opts a kernel in whenever its
// static and dynamic shared memory together pass 48 KB, also with 48 KB or less of dynamic
// memory (a kernel with 5.4 KB of static arrays and 48 KB of dynamic memory failed to launch
// before, 2026-12-01), and above 48 KB of dynamic memory as before.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <vector>

#include "kernels/common/smem_optin.h"
#include "tests/gpu/cu_test_util.h"

namespace rs::smem_optin_test {
namespace {

using rs::cutest::skip_without_gpu;

constexpr int kStatic = 8 * 1024;

// Fills both arrays and writes back their sum per thread, so neither is optimised away.
__global__ void static_and_dynamic(int dyn_words, int* out) {
  __shared__ int st[kStatic / 4];
  extern __shared__ int dyn[];
  for (int i = threadIdx.x; i < kStatic / 4; i += blockDim.x) st[i] = i;
  for (int i = threadIdx.x; i < dyn_words; i += blockDim.x) dyn[i] = 2 * i;
  __syncthreads();
  out[threadIdx.x] = st[threadIdx.x % (kStatic / 4)] + (dyn_words > 0 ? dyn[dyn_words - 1 - threadIdx.x % dyn_words] : 0);
}

// Launches with `dyn` bytes of dynamic memory after the opt-in; the launch's error.
cudaError_t launch(int dyn, int* out) {
  if (!rs::kern::allow_dynamic_smem(static_and_dynamic, dyn)) return cudaErrorInvalidValue;
  static_and_dynamic<<<1, 128, dyn>>>(dyn / 4, out);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

}  // namespace

TEST_CASE("allow_dynamic_smem: static + dynamic shared memory past 48 KB launches, below and above 48 KB dynamic" *
          doctest::test_suite("gpu.cuda")) {
  if (skip_without_gpu("allow_dynamic_smem")) return;
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, 128 * sizeof(int)) == cudaSuccess);
  // 8 KB static + 44 KB dynamic (the case the opt-in used to skip), then 8 + 100 KB, then a
  // small launch that needs no opt-in at all.
  for (int dyn : {44 * 1024, 100 * 1024, 4 * 1024}) {
    INFO("dynamic bytes " << dyn);
    const cudaError_t e = launch(dyn, out);
    CHECK_MESSAGE(e == cudaSuccess, cudaGetErrorString(e));
    std::vector<int> h(128);
    REQUIRE(cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    const int words = dyn / 4;
    for (int t = 0; t < 128; ++t) CHECK(h[t] == t + 2 * (words - 1 - t % words));
  }
  cudaFree(out);
}

}  // namespace rs::smem_optin_test
