// The kernel timeline (src/backend/cuda/kernel_timeline.*) on a real graph: two kernels that
// each spin a known time, captured in order, traced through CUPTI. Every kernel of the last
// replay is recorded, in order, with its name, and the durations and the order on the GPU are
// what the kernels did. Skips with a message where there is no GPU or CUPTI cannot be loaded.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "backend/cuda/kernel_timeline.h"
#include "kernels/common/global_timer.cuh"

namespace {

// Two kernels of their own names, each spinning for at least `ns` of GPU time.
__device__ void spin_for(unsigned long long ns) {
  const uint64_t t0 = rs::kern::global_time_ns();
  while (rs::kern::global_time_ns() - t0 < ns) {
  }
}
__global__ void timeline_spin_a(unsigned long long ns) { spin_for(ns); }
__global__ void timeline_spin_b(unsigned long long ns) { spin_for(ns); }

}  // namespace

TEST_SUITE("gpu.timeline") {
TEST_CASE("CUPTI kernel timeline of a two-kernel graph: both kernels, in order, with their durations") {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    std::printf("[gpu.timeline] skipped, no CUDA device\n");
    return;
  }
  std::string why;
  if (!rs::cuda::kernel_timeline_available(&why)) {
    std::printf("[gpu.timeline] skipped: %s\n", why.c_str());
    return;
  }
  cudaStream_t s;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  cudaGraph_t g;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  timeline_spin_a<<<1, 32, 0, s>>>(50000);  // 50 us
  timeline_spin_b<<<1, 32, 0, s>>>(20000);  // 20 us
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t e;
  REQUIRE(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
  const auto spans = rs::cuda::trace_graph_replays(g, e, s, 3);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].kernel.find("timeline_spin_a") != std::string::npos);
  CHECK(spans[1].kernel.find("timeline_spin_b") != std::string::npos);
  const double a_us = (spans[0].end_ns - spans[0].start_ns) / 1e3, b_us = (spans[1].end_ns - spans[1].start_ns) / 1e3;
  INFO("a " << a_us << " us, b " << b_us << " us, b starts " << (double(spans[1].start_ns) - double(spans[0].end_ns)) / 1e3
            << " us after a ends");
  CHECK(a_us >= 49.0);
  CHECK(a_us < 1000.0);
  CHECK(b_us >= 19.0);
  CHECK(b_us < a_us);
  CHECK(spans[1].start_ns >= spans[0].end_ns);  // no PDL here: b waits for a
  std::printf("[gpu.timeline] a %.1f us, b %.1f us, gap %.1f us\n", a_us, b_us,
              (double(spans[1].start_ns) - double(spans[0].end_ns)) / 1e3);
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}
}
