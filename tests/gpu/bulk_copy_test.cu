// gpu.cuda: the bulk-copy ring (kernels/common/bulk_copy.cuh) moves every byte exactly once and
// in order: data streamed through a few stages, many times round the ring (so both barrier
// parities and the stage-free waits are exercised), consumed by several warps in turn, must come
// out bit-identical.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/bulk_copy.cuh"
#include "tests/gpu/cu_test_util.h"

namespace rs::bulk_test {
namespace {

using rs::cutest::ok;
using rs::cutest::skip_without_gpu;

constexpr int kStages = 4;  // round-robin consumers must divide it (BulkRing's ordering rule)

// Block b streams uses b, b + grid, ...; each use is `vecs` 16-byte vectors. The last warp's
// lane 0 produces; the other warps consume uses round-robin (one arrival releases a stage).
__global__ void ring_copy(const uint4* in, uint4* out, uint32_t uses, uint32_t vecs) {
  extern __shared__ __align__(128) uint4 stages[];
  __shared__ rs::kern::BulkRing<kStages> ring;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int consumers = blockDim.x / 32 - 1;
  if (threadIdx.x == 0) ring.init(1u);
  __syncthreads();
  const uint32_t mine = blockIdx.x < uses ? (uses - blockIdx.x + gridDim.x - 1) / gridDim.x : 0u;
  if (warp == consumers) {
    if (lane != 0) return;
    const uint64_t policy = rs::kern::l2_evict_first();
    for (uint32_t i = 0; i < mine; ++i) {
      const uint32_t use = blockIdx.x + i * gridDim.x;
      ring.acquire(i);
      const int s = ring.stage(i);
      rs::kern::mbar_arrive_expect_tx(&ring.full[s], vecs * 16u);
      // Two copies per stage: the full barrier must count bytes, not copies.
      const uint32_t half = vecs / 2;
      rs::kern::bulk_copy_g2s(stages + s * vecs, in + static_cast<uint64_t>(use) * vecs, half * 16u, &ring.full[s], policy);
      rs::kern::bulk_copy_g2s(stages + s * vecs + half, in + static_cast<uint64_t>(use) * vecs + half,
                              (vecs - half) * 16u, &ring.full[s], policy);
    }
    return;
  }
  for (uint32_t i = warp; i < mine; i += consumers) {
    const uint32_t use = blockIdx.x + i * gridDim.x;
    ring.wait_full(i);
    const int s = ring.stage(i);
    for (uint32_t v = lane; v < vecs; v += 32) out[static_cast<uint64_t>(use) * vecs + v] = stages[s * vecs + v];
    __syncwarp();
    if (lane == 0) ring.release(i);
  }
}

TEST_CASE("bulk-copy ring streams every byte once, in order, through few stages" * doctest::test_suite("gpu.cuda")) {
  if (skip_without_gpu("bulk-copy ring")) return;
  struct Shape { uint32_t uses, vecs, blocks, warps; };
  // warps - 1 consumers: 1, 2 and 4, each dividing kStages.
  for (const Shape sh : {Shape{1, 2, 1, 2}, Shape{97, 130, 5, 3}, Shape{1000, 1024, 132, 5}, Shape{64, 3072, 3, 3}}) {  // last: 4 x 48 KB stages
    REQUIRE(kStages % (sh.warps - 1) == 0);
    const size_t n = static_cast<size_t>(sh.uses) * sh.vecs;
    std::vector<uint4> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = make_uint4(static_cast<uint32_t>(i), static_cast<uint32_t>(i * 2654435761u), ~static_cast<uint32_t>(i), 7u);
    uint4 *d_in = nullptr, *d_out = nullptr;
    ok(cudaMalloc(&d_in, n * 16), "cudaMalloc");
    ok(cudaMalloc(&d_out, n * 16), "cudaMalloc");
    ok(cudaMemcpy(d_in, host.data(), n * 16, cudaMemcpyHostToDevice), "copy in");
    ok(cudaMemset(d_out, 0xff, n * 16), "memset");
    const size_t smem = static_cast<size_t>(kStages) * sh.vecs * 16;
    ok(cudaFuncSetAttribute(ring_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), "smem attr");
    ring_copy<<<sh.blocks, sh.warps * 32, smem>>>(d_in, d_out, sh.uses, sh.vecs);
    ok(cudaGetLastError(), "launch");
    ok(cudaDeviceSynchronize(), "ring_copy");
    std::vector<uint4> back(n);
    ok(cudaMemcpy(back.data(), d_out, n * 16, cudaMemcpyDeviceToHost), "copy out");
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
      bad += back[i].x != host[i].x || back[i].y != host[i].y || back[i].z != host[i].z || back[i].w != host[i].w;
    CHECK_MESSAGE(bad == 0, "uses " << sh.uses << " vecs " << sh.vecs << ": " << bad << " vectors wrong");
    cudaFree(d_in);
    cudaFree(d_out);
  }
}

}  // namespace
}  // namespace rs::bulk_test
