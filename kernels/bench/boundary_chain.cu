// The four dependency steps of boundary_chain.h. Why a benchmark: which of them is cheapest
// decides how decode work should be cut into launches. On the H200 (2026-11-30) a PDL boundary
// cost 0.67-0.71 us, a grid-wide barrier inside one kernel 1.02-1.32 us, a flag handoff between
// kernels 1.40-1.69 us: a grid-wide wait inside one launch is not the cheaper join it looks like,
// which is why fusing latency-bound kernels around one did not pay (the decode megakernel, the
// one-token FFN with the next q/kv GEMV: docs/arch/megakernel.md).
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/bench/boundary_chain.h"
#include "kernels/bench/median_p90.h"
#include "kernels/common/grid_count.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/sm_count.h"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::kern {
namespace {

// One step's work: a value the previous step stored, plus one.
__device__ __forceinline__ void boundary_step_op(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = __ldcg(in + i) + 1.f;
}

template <BoundaryMode kMode>
__global__ void boundary_chain_kernel(const float* in, float* out, unsigned* prev_count, unsigned* count, bool first) {
  if constexpr (kMode == BoundaryMode::kPdl) {
    pdl::launch_dependents();
    pdl::wait();
  }
  if constexpr (kMode == BoundaryMode::kFlag) {
    if (!first) {
      if (threadIdx.x == 0) {
        grid_count_wait(prev_count, gridDim.x, "bench boundary, flag handoff", -1);
        grid_count_depart(prev_count);
      }
      __syncthreads();
    }
    // Triggering only after the wait keeps at most one grid spinning ahead (triggering at entry
    // let a cascade of polling grids fill the SMs: 2.3 against 1.5 us a step).
    pdl::launch_dependents();
  }
  boundary_step_op(in, out);
  if constexpr (kMode == BoundaryMode::kFlag) {
    __syncthreads();
    if (threadIdx.x == 0) grid_count_arrive(count);
  }
}

// counts[0]: arrivals over all steps (target grid * (step + 1)); counts[1]: departures.
__global__ void boundary_persistent_kernel(float* a, float* b, int steps, unsigned* counts) {
  for (int s = 0; s < steps; ++s) {
    boundary_step_op((s & 1) ? b : a, (s & 1) ? a : b);
    __syncthreads();
    if (threadIdx.x == 0) {
      grid_count_arrive(counts);
      grid_count_wait(counts, gridDim.x * static_cast<unsigned>(s + 1), "bench boundary, grid barrier", s);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) grid_count_depart(counts);
}

struct Cleanup {
  cudaStream_t s = nullptr;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  void* mem = nullptr;
  ~Cleanup() {
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (mem) cudaFree(mem);
    if (s) cudaStreamDestroy(s);
  }
};

template <BoundaryMode kMode>
cudaError_t capture(cudaStream_t s, int grid, int threads, int steps, float* a, float* b, unsigned* counts) {
  if constexpr (kMode == BoundaryMode::kGridBarrier) {
    boundary_persistent_kernel<<<grid, threads, 0, s>>>(a, b, steps, counts);
    return cudaGetLastError();
  } else {
    for (int i = 0; i < steps; ++i) {
      unsigned* prev = counts + 2 * (i > 0 ? i - 1 : 0);
      const float* in = (i & 1) ? b : a;
      float* out = (i & 1) ? a : b;
      const cudaError_t e = launch_with_pdl(boundary_chain_kernel<kMode>, dim3(grid), dim3(threads), 1, 0, s,
                                            kMode != BoundaryMode::kStreamOrder, in, out, prev, counts + 2 * i, i == 0);
      if (e != cudaSuccess) return e;
    }
    // The last grid's count has no next grid to consume it: zero it for the next replay.
    return cudaMemsetAsync(counts + 2 * (steps - 1), 0, 2 * sizeof(unsigned), s);
  }
}

}  // namespace

const char* boundary_mode_name(BoundaryMode m) {
  switch (m) {
    case BoundaryMode::kStreamOrder: return "kernel chain, stream order";
    case BoundaryMode::kPdl: return "kernel chain, PDL (griddepcontrol.wait)";
    case BoundaryMode::kFlag: return "kernel chain, flag handoff (counter poll)";
    case BoundaryMode::kGridBarrier: return "one kernel, grid-wide barrier";
  }
  return "?";
}

bool measure_boundary(BoundaryMode mode, int grid, int threads, int steps, int reps, BoundaryTiming* out,
                      const char** error) {
  *error = nullptr;
  if (grid < 1 || threads < 32 || threads > 1024 || steps < 2 || steps % 2 || steps > 4096 || reps < 1 || reps > 1000) {
    *error = "grid >= 1, threads in [32, 1024], steps even in [2, 4096], reps in [1, 1000]";
    return false;
  }
  if (mode == BoundaryMode::kGridBarrier) {
    const int sms = current_sm_count(), per_sm = resident_blocks_exact(boundary_persistent_kernel, threads);
    if (sms <= 0) {
      *error = "SM count query failed";
      return false;
    }
    if (grid > sms * per_sm) {
      *error = "the grid does not fit on the device at once (a grid-wide barrier needs every block resident)";
      return false;
    }
  }
  Cleanup c;
  const size_t n = size_t(grid) * threads;
  const size_t counts_bytes = size_t(2 * steps) * sizeof(unsigned);
  auto fail = [&](cudaError_t e) {
    *error = cudaGetErrorString(e);
    return false;
  };
  cudaError_t e = cudaMalloc(&c.mem, 2 * n * sizeof(float) + counts_bytes);
  if (e != cudaSuccess) return fail(e);
  float* a = static_cast<float*>(c.mem);
  float* b = a + n;
  unsigned* counts = reinterpret_cast<unsigned*>(b + n);
  if ((e = cudaMemset(c.mem, 0, 2 * n * sizeof(float) + counts_bytes)) != cudaSuccess) return fail(e);
  if ((e = cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking)) != cudaSuccess) return fail(e);
  if ((e = cudaStreamBeginCapture(c.s, cudaStreamCaptureModeThreadLocal)) != cudaSuccess) return fail(e);
  switch (mode) {
    case BoundaryMode::kStreamOrder: e = capture<BoundaryMode::kStreamOrder>(c.s, grid, threads, steps, a, b, counts); break;
    case BoundaryMode::kPdl: e = capture<BoundaryMode::kPdl>(c.s, grid, threads, steps, a, b, counts); break;
    case BoundaryMode::kFlag: e = capture<BoundaryMode::kFlag>(c.s, grid, threads, steps, a, b, counts); break;
    case BoundaryMode::kGridBarrier: e = capture<BoundaryMode::kGridBarrier>(c.s, grid, threads, steps, a, b, counts); break;
  }
  const cudaError_t end = cudaStreamEndCapture(c.s, &c.g);
  if (e != cudaSuccess) return fail(e);
  if (end != cudaSuccess) return fail(end);
  if ((e = cudaGraphInstantiate(&c.ge, c.g, 0)) != cudaSuccess) return fail(e);
  if ((e = cudaEventCreate(&c.e0)) != cudaSuccess || (e = cudaEventCreate(&c.e1)) != cudaSuccess) return fail(e);
  for (int w = 0; w < 3; ++w)
    if ((e = cudaGraphLaunch(c.ge, c.s)) != cudaSuccess) return fail(e);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(c.e0, c.s);
    if ((e = cudaGraphLaunch(c.ge, c.s)) != cudaSuccess) return fail(e);
    cudaEventRecord(c.e1, c.s);
    if ((e = cudaEventSynchronize(c.e1)) != cudaSuccess) return fail(e);
    float ms = 0;
    cudaEventElapsedTime(&ms, c.e0, c.e1);
    t.push_back(double(ms) * 1000.0 / steps);
  }
  // Every replay adds `steps` to every element of a (steps even: the last step writes a), so after
  // all replays each holds their count times steps exactly (< 2^24). A step that read its input
  // before the previous one had stored it would leave less.
  std::vector<float> host(n);
  if ((e = cudaMemcpy(host.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess) return fail(e);
  const float want = float(3 + reps) * float(steps);
  for (float v : host)
    if (v != want) {
      *error = "a step read its input before the previous step had stored it";
      return false;
    }
  set_median_p90(std::move(t), out);
  return true;
}

}  // namespace rs::kern
