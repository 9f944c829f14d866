#include "bench/allreduce_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "bench/bench_buffer.h"
#include "bench/bench_stats.h"
#include "common/error.h"
#include "kernels/comm/comm_layout.h"
#include "parallel/cuda_check.h"
#include "parallel/rank_threads.h"

namespace rs::bench {
namespace {

using parallel::cuda_check;

// Random values in [-1, 1) in the element type, different per rank and buffer.
std::vector<unsigned char> random_bytes(uint64_t count, DType t, uint64_t seed) {
  std::vector<unsigned char> out(count * dtype_size(t));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint64_t i = 0; i < count; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    const float f = static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (t == DType::BF16) {
      const uint16_t h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
      std::memcpy(&out[i * 2], &h, 2);
    } else {
      std::memcpy(&out[i * 4], &bits, 4);
    }
  }
  return out;
}

int iterations_for(uint64_t bytes) {
  // Enough calls per timed region that the event overhead is noise, few enough that 64 MB
  // sizes finish quickly. Even, so a chained sequence ends with its next input in ping[0].
  const uint64_t target = 256ull << 20;
  return static_cast<int>(std::clamp<uint64_t>(target / std::max<uint64_t>(bytes, 1), 4, 50)) / 2 * 2;
}

}  // namespace

const char* variant_name(ArVariant v) {
  switch (v) {
    case ArVariant::oneshot: return "oneshot";
    case ArVariant::fused: return "fused";
    case ArVariant::two_shot: return "twoshot";
    case ArVariant::tray_first: return "trayfirst";
    case ArVariant::nccl: return "nccl";
    case ArVariant::automatic: return "auto";
  }
  return "?";
}

std::pair<uint32_t, uint32_t> fused_shape(uint64_t count, DType dtype) {
  const uint64_t lanes = comm::kVecBytes / dtype_size(dtype);
  const uint64_t max_hidden = lanes * comm::kFusedMaxThreads * comm::kFusedMaxVecsPerThread;
  for (uint64_t hidden : {7168ull, 4096ull}) {
    if (count % hidden == 0 && hidden <= max_hidden && count / hidden <= UINT32_MAX)
      return {static_cast<uint32_t>(count / hidden), static_cast<uint32_t>(hidden)};
  }
  if (count % lanes == 0 && count <= max_hidden) return {1u, static_cast<uint32_t>(count)};
  return {0u, 0u};
}

std::vector<ArSizeResult> run_allreduce_bench(const parallel::Comm& comm, const ArBenchOptions& opt) {
  const parallel::Topology& topo = comm.topology();
  const size_t esize = dtype_size(opt.dtype);
  uint64_t max_bytes = 16;
  std::vector<ArSizeResult> results;
  for (uint64_t bytes : opt.sizes) {
    if (bytes % esize != 0)
      throw Error("--sizes " + std::to_string(bytes) + ": not a whole number of " + dtype_name(opt.dtype) + " elements");
    ArSizeResult r;
    r.bytes = bytes;
    r.count = bytes / esize;
    std::tie(r.fused_rows, r.fused_hidden) = fused_shape(r.count, opt.dtype);
    r.auto_choice = parallel::algo_name(comm.choose(bytes));
    results.push_back(r);
    max_bytes = std::max(max_bytes, bytes);
  }
  const uint64_t max_count = max_bytes / esize;

  parallel::HostBarrier barrier(topo.size());
  parallel::run_rank_threads(topo, [&](int rank) {
    cudaStream_t stream;
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "bench stream");
    // in: the independent calls' input; ping[2]: the chained all-reduces' buffers (call i reads
    // ping[i % 2], writes ping[(i + 1) % 2]); for the chained fused op, ping also holds x (call
    // i's normed output is call i+1's x) and res[2] the residual stream.
    const auto in = bench_buffer(max_bytes), out = bench_buffer(max_bytes), residual = bench_buffer(max_bytes),
               residual_out = bench_buffer(max_bytes), normed = bench_buffer(max_bytes),
               gamma = bench_buffer(comm::kVecBytes * comm::kFusedMaxThreads * comm::kFusedMaxVecsPerThread);
    const cuda::DeviceBuffer ping[2] = {bench_buffer(max_bytes), bench_buffer(max_bytes)};
    const cuda::DeviceBuffer res[2] = {bench_buffer(max_bytes), bench_buffer(max_bytes)};
    {
      auto h = random_bytes(max_count, opt.dtype, 1000 + rank);
      cuda_check(cudaMemcpy(in.get(), h.data(), h.size(), cudaMemcpyHostToDevice), "bench upload");
      h = random_bytes(max_count, opt.dtype, 2000 + rank);
      cuda_check(cudaMemcpy(residual.get(), h.data(), h.size(), cudaMemcpyHostToDevice), "bench upload");
      h = random_bytes(comm::kVecBytes * comm::kFusedMaxThreads * comm::kFusedMaxVecsPerThread / esize, opt.dtype, 3000);
      cuda_check(cudaMemcpy(gamma.get(), h.data(), h.size(), cudaMemcpyHostToDevice), "bench upload");
    }
    cudaEvent_t e0, e1;
    cuda_check(cudaEventCreate(&e0), "event");
    cuda_check(cudaEventCreate(&e1), "event");

    for (ArSizeResult& res_size : results) {
      const int iters = iterations_for(res_size.bytes);
      const uint64_t bytes = res_size.count * esize;
      for (ArVariant v : kArVariants) {
        ArTiming& timing = res_size.timing[static_cast<int>(v)];
        if (v == ArVariant::nccl && !comm.has_nccl()) {
          if (rank == 0) timing.note = "n/a: " + comm.nccl_status();
          continue;
        }
        if (v == ArVariant::fused && res_size.fused_rows == 0) {
          if (rank == 0) timing.note = "n/a: no rows x hidden shape";
          continue;
        }
        if (v == ArVariant::tray_first && topo.trays() < 2) {
          if (rank == 0) timing.note = "n/a: one tray (--trays 1)";
          continue;
        }
        // Call i of a sequence; chained calls read what call i-1 wrote.
        auto call = [&](bool chained, int i) {
          const void* src = chained ? ping[i % 2].get() : in.get();
          void* dst = chained ? ping[(i + 1) % 2].get() : out.get();
          switch (v) {
            case ArVariant::oneshot:
              comm.all_reduce(rank, src, dst, res_size.count, opt.dtype, stream, parallel::AllReduceAlgo::lamport_oneshot);
              break;
            case ArVariant::two_shot:
              comm.all_reduce(rank, src, dst, res_size.count, opt.dtype, stream, parallel::AllReduceAlgo::two_shot);
              break;
            case ArVariant::tray_first:
              comm.all_reduce(rank, src, dst, res_size.count, opt.dtype, stream, parallel::AllReduceAlgo::tray_first);
              break;
            case ArVariant::nccl:
              comm.all_reduce(rank, src, dst, res_size.count, opt.dtype, stream, parallel::AllReduceAlgo::nccl);
              break;
            case ArVariant::automatic:
              comm.all_reduce(rank, src, dst, res_size.count, opt.dtype, stream);
              break;
            case ArVariant::fused: {
              parallel::FusedArNormArgs a;
              a.x = src;
              a.residual = chained ? res[i % 2].get() : residual.get();
              a.residual_out = chained ? res[(i + 1) % 2].get() : residual_out.get();
              if (opt.fused_in_place) {  // one residual stream, updated in place
                a.residual_out = chained ? res[0].get() : residual_out.get();
                a.residual = a.residual_out;
              }
              a.normed = chained ? dst : normed.get();
              a.gamma = gamma.get();
              a.rows = res_size.fused_rows; a.hidden = res_size.fused_hidden; a.eps = 1e-6f; a.dtype = opt.dtype;
              comm.all_reduce_residual_rmsnorm(rank, a, stream);
              break;
            }
          }
        };
        auto timed = [&](auto&& body) {
          std::vector<double> us;
          for (int rep = 0; rep < opt.reps; ++rep) {
            barrier.arrive_and_wait();  // ranks start each repetition together
            cuda_check(cudaEventRecord(e0, stream), "event record");
            body();
            cuda_check(cudaEventRecord(e1, stream), "event record");
            cuda_check(cudaEventSynchronize(e1), std::string(variant_name(v)) + " run on rank " + std::to_string(rank));
            float ms = 0;
            cuda_check(cudaEventElapsedTime(&ms, e0, e1), "event time");
            us.push_back(1000.0 * ms / iters);
          }
          return median(us);
        };
        for (bool chained : {false, true}) {
          if (chained) {
            // Start the chain from the independent calls' data. A chained plain all-reduce
            // multiplies its values by N each call; they may reach inf over many repetitions,
            // which changes no timing (and, the ranks' data being equal after the first call,
            // never makes a NaN). The fused chain stays bounded (normed values, residual grows
            // by them).
            cuda_check(cudaMemcpy(ping[0].get(), in.get(), bytes, cudaMemcpyDeviceToDevice), "bench copy");
            cuda_check(cudaMemcpy(res[0].get(), residual.get(), bytes, cudaMemcpyDeviceToDevice), "bench copy");
            cuda_check(cudaDeviceSynchronize(), "bench copy");
          }
          // No rank launches until every rank is past its previous host calls (graph destroy,
          // instantiate, copies): those may wait for the whole GPU, where a peer rank may be spinning.
          barrier.arrive_and_wait();
          // Warm-up (also NCCL's lazy connection setup, which must not happen inside a capture).
          // An even number of calls, so the chain's next input is in ping[0] again.
          for (int i = 0; i < 4; ++i) call(chained, i);
          cuda_check(cudaStreamSynchronize(stream), std::string(variant_name(v)) + " warm-up on rank " + std::to_string(rank));
          const double eager = timed([&] { for (int i = 0; i < iters; ++i) call(chained, i); });

          barrier.arrive_and_wait();
          cudaGraph_t graph;
          cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
          for (int i = 0; i < iters; ++i) call(chained, i);
          cuda_check(cudaStreamEndCapture(stream, &graph), std::string(variant_name(v)) + " capture");
          cudaGraphExec_t exec;
          cuda_check(cudaGraphInstantiate(&exec, graph, 0), std::string(variant_name(v)) + " graph instantiate");
          cuda_check(cudaGraphUpload(exec, stream), "graph upload");
          barrier.arrive_and_wait();
          cuda_check(cudaGraphLaunch(exec, stream), "graph launch");
          cuda_check(cudaStreamSynchronize(stream), std::string(variant_name(v)) + " graph warm-up on rank " + std::to_string(rank));
          const double in_graph = timed([&] { cuda_check(cudaGraphLaunch(exec, stream), "graph launch"); });
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(graph);
          if (rank == 0) {
            (chained ? timing.chain_eager_us : timing.eager_us) = eager;
            (chained ? timing.chain_graph_us : timing.graph_us) = in_graph;
          }
        }
      }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(stream);
  }, &barrier);
  return results;
}

}  // namespace rs::bench
