// The fan-out read of fanout_read.h: block b bulk-copies part b % slices of the region into its
// shared memory in 32 KB pieces (a streaming ring's stage size), all issued at once, and records
// the device clock at entry and when the last piece has landed.
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/bench/fanout_read.h"
#include "kernels/bench/median_p90.h"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/smem_optin.h"

namespace rs::kern {
namespace {

constexpr uint32_t kPieceBytes = 32 * 1024;

// times[2b], times[2b + 1]: block b's entry and landing (ns). bad: set when a landed word differs
// from the region's (the region holds its own word index).
__global__ void fanout_read_kernel(const uint32_t* region, uint32_t part_bytes, int slices, uint64_t* times,
                                   int* bad) {
  extern __shared__ __align__(128) uint8_t part[];
  __shared__ uint64_t bar;
  const uint64_t t0 = global_time_ns();
  const int slice = blockIdx.x % slices;
  const uint8_t* src = reinterpret_cast<const uint8_t*>(region) + static_cast<size_t>(slice) * part_bytes;
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1u);
    mbar_fence_init();
    mbar_arrive_expect_tx(&bar, part_bytes);
    for (uint32_t off = 0; off < part_bytes; off += kPieceBytes)
      bulk_copy_g2s_plain(part + off, src + off, min(kPieceBytes, part_bytes - off), &bar);
  }
  __syncthreads();
  mbar_wait(&bar, 0u, "bench fanout");
  if (threadIdx.x == 0) {
    times[2 * blockIdx.x] = t0;
    times[2 * blockIdx.x + 1] = global_time_ns();
  }
  const uint32_t words = part_bytes / 4, first = static_cast<uint32_t>(slice) * words;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(part);
  for (uint32_t i = threadIdx.x; i < words; i += blockDim.x)
    if (w[i] != first + i) *bad = 1;
}

__global__ void fanout_fill_kernel(uint32_t* region, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    region[i] = static_cast<uint32_t>(i);
}

struct Buffers {
  void* mem = nullptr;
  void* flush = nullptr;
  ~Buffers() {
    if (mem) cudaFree(mem);
    if (flush) cudaFree(flush);
  }
};

}  // namespace

bool measure_fanout_read(int64_t region_bytes, int slices, int fanout, bool cold, int reps, FanoutTiming* out,
                         const char** error) {
  *error = nullptr;
  if (region_bytes <= 0 || slices < 1 || fanout < 1 || reps < 1 || reps > 1000 || region_bytes % slices ||
      (region_bytes / slices) % 16) {
    *error = "the region must split into `slices` parts of a multiple of 16 bytes; reps in [1, 1000]";
    return false;
  }
  const int64_t part = region_bytes / slices;
  if (part > 226 * 1024) {
    *error = "a part does not fit one block's shared memory (226 KB)";
    return false;
  }
  if (!allow_dynamic_smem(reinterpret_cast<const void*>(fanout_read_kernel), int(part))) {
    *error = "shared memory opt-in refused";
    return false;
  }
  const int grid = slices * fanout;
  Buffers b;
  auto fail = [&](cudaError_t e) {
    *error = cudaGetErrorString(e);
    return false;
  };
  const size_t times_bytes = size_t(2 * grid) * sizeof(uint64_t);
  cudaError_t e = cudaMalloc(&b.mem, size_t(region_bytes) + times_bytes + sizeof(int));
  if (e != cudaSuccess) return fail(e);
  uint32_t* region = static_cast<uint32_t*>(b.mem);
  uint64_t* times = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(b.mem) + region_bytes);
  int* bad = reinterpret_cast<int*>(times + 2 * grid);
  // Twice the L2 (50 MB on an H100/H200) written between replays evicts the region.
  const size_t flush_bytes = size_t(256) << 20;
  if (cold && (e = cudaMalloc(&b.flush, flush_bytes)) != cudaSuccess) return fail(e);
  fanout_fill_kernel<<<256, 256>>>(region, size_t(region_bytes) / 4);
  if ((e = cudaMemset(bad, 0, sizeof(int))) != cudaSuccess) return fail(e);
  std::vector<double> t;
  std::vector<uint64_t> host(2 * grid);
  for (int r = -2; r < reps; ++r) {  // two warm-up replays
    if (cold && (e = cudaMemsetAsync(b.flush, r & 0xff, flush_bytes)) != cudaSuccess) return fail(e);
    fanout_read_kernel<<<grid, 256, size_t(part)>>>(region, uint32_t(part), slices, times, bad);
    if ((e = cudaGetLastError()) != cudaSuccess) return fail(e);
    if ((e = cudaMemcpy(host.data(), times, times_bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) return fail(e);
    if (r < 0) continue;
    uint64_t first = host[0], last = host[1];
    for (int i = 0; i < grid; ++i) {
      first = std::min(first, host[2 * i]);
      last = std::max(last, host[2 * i + 1]);
    }
    t.push_back(double(last - first) / 1000.0);
  }
  int h_bad = 0;
  if ((e = cudaMemcpy(&h_bad, bad, sizeof(int), cudaMemcpyDeviceToHost)) != cudaSuccess) return fail(e);
  if (h_bad) {
    *error = "a copy landed wrong bytes";
    return false;
  }
  set_median_p90(std::move(t), out);
  return true;
}

}  // namespace rs::kern
