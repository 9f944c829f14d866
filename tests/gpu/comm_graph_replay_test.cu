// gpu.comm: 10,000 back-to-back all-reduces inside CUDA graphs (PDL launches), the inputs new on
// every call and the results checked on the device, so a re-arm race (a buffer re-armed while a
// peer still writes it, or read before it was re-armed) shows up as a wrong sum or a timeout.
#include <cuda_bf16.h>
#include <doctest/doctest.h>

#include <map>
#include <memory>

#include "parallel/comm.h"
#include "parallel/rank_threads.h"
#include "tests/gpu/comm_test_util.h"

namespace rs::comm_test {
namespace {

using parallel::AllReduceAlgo;
using parallel::Comm;
using parallel::Topology;

__device__ float round_to(float f, bool bf16) { return bf16 ? __bfloat162float(__float2bfloat16_rn(f)) : f; }

// A fresh value in [-1, 1) for (call, rank, element): the inputs change on every call.
__device__ float value_of(uint32_t call, int rank, uint32_t i, bool bf16) {
  uint64_t x = (static_cast<uint64_t>(call) << 40) ^ (static_cast<uint64_t>(rank) << 32) ^ i;
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 27; x *= 0x94d049bb133111ebull; x ^= x >> 31;
  return round_to(static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f, bf16);
}

__device__ void store(void* p, uint32_t i, float f, bool bf16) {
  if (bf16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(f);
  else static_cast<float*>(p)[i] = f;
}
__device__ float load(const void* p, uint32_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}

__global__ void generate(void* in, void* residual, uint32_t count, const uint32_t* call, int rank, bool bf16) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    store(in, i, value_of(*call, rank, i, bf16), bf16);
    if (residual) store(residual, i, value_of(*call, 1000, i, bf16), bf16);
  }
}

// The fp32 sum as the kernels add: groups of `group` consecutive ranks summed in rank order,
// then the group sums in group order (flat algorithms: one group of all ranks; tray-first: the
// trays). `same` >= 0: every rank contributes that value instead.
__device__ float grouped_sum(uint32_t call, uint32_t i, int nranks, int group, bool bf16, const float* same) {
  float acc = 0.f;
  for (int g = 0; g < nranks; g += group) {
    float part = 0.f;
    for (int r = g; r < g + group; ++r) part += same ? *same : value_of(call, r, i, bf16);
    acc += part;
  }
  return acc;
}

// out1 = all_reduce(in) must be the fp32 sum in the algorithm's order, rounded, bit for bit;
// out2 = all_reduce(out1) the same sum of N copies of out1; fused: residual_out = round(sum +
// residual).
__global__ void check(const void* out1, const void* out2, const void* residual_out, uint32_t count,
                      const uint32_t* call, int nranks, int group, bool bf16, unsigned* errors) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const float acc = grouped_sum(*call, i, nranks, group, bf16, nullptr);
    bool ok = true;
    if (residual_out) {
      ok = load(residual_out, i, bf16) == round_to(acc + value_of(*call, 1000, i, bf16), bf16);
    } else {
      const float e1 = round_to(acc, bf16);
      ok = load(out1, i, bf16) == e1;
      const float acc2 = grouped_sum(*call, i, nranks, group, bf16, &e1);  // N equal values
      if (out2) ok = ok && load(out2, i, bf16) == round_to(acc2, bf16);
    }
    if (!ok) atomicAdd(errors, 1u);
  }
}

__global__ void advance(uint32_t* call) { ++*call; }

struct Step {
  enum Kind { pair, fused } kind;
  AllReduceAlgo algo;
  uint32_t count;  // elements (fused: rows * 7168)
  bool bf16;
  bool in_place = false;  // fused: residual_out is the residual buffer
};

struct ReplayResult {
  unsigned errors = 0;
  uint32_t calls_seen = 0;
};

ReplayResult replay(const Comm& comm, const std::vector<Step>& steps, int replays) {
  const Topology& topo = comm.topology();
  parallel::HostBarrier barrier(topo.size());
  std::vector<ReplayResult> per_rank(topo.size());
  uint32_t max_count = 0;
  for (const Step& s : steps) max_count = std::max(max_count, s.count);
  const size_t bytes = size_t{max_count} * 4;
  parallel::run_rank_threads(topo, [&](int rank) {
    cudaStream_t s;
    RS_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DeviceArray in(bytes), out1(bytes), out2(bytes), residual(bytes), residual_out(bytes), normed(bytes), gamma(7168 * 2);
    DeviceArray counters(16);
    RS_CUDA_OK(cudaMemset(counters.ptr, 0, 16));
    RS_CUDA_OK(cudaMemset(gamma.ptr, 0x3f, 7168 * 2));
    RS_CUDA_OK(cudaDeviceSynchronize());
    auto* call = static_cast<uint32_t*>(counters.ptr);
    auto* errors = reinterpret_cast<unsigned*>(call + 1);
    for (const void* k : {reinterpret_cast<const void*>(&generate), reinterpret_cast<const void*>(&check),
                          reinterpret_cast<const void*>(&advance)}) {
      cudaFuncAttributes attr;  // load the test kernels before any rank can spin (lazy loading)
      RS_CUDA_OK(cudaFuncGetAttributes(&attr, k));
    }
    barrier.arrive_and_wait();
    RS_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (const Step& st : steps) {
      const DType t = st.bf16 ? DType::BF16 : DType::F32;
      const unsigned blocks = std::min(1024u, (st.count + 255) / 256);
      if (st.kind == Step::fused) {
        generate<<<blocks, 256, 0, s>>>(in.ptr, residual.ptr, st.count, call, rank, st.bf16);
        parallel::FusedArNormArgs a;
        a.x = in.ptr; a.residual = residual.ptr; a.gamma = gamma.ptr; a.residual_out = st.in_place ? residual.ptr : residual_out.ptr;
        a.normed = normed.ptr; a.rows = st.count / 7168; a.hidden = 7168; a.dtype = t;
        comm.all_reduce_residual_rmsnorm(rank, a, s);
        check<<<blocks, 256, 0, s>>>(nullptr, nullptr, st.in_place ? residual.ptr : residual_out.ptr, st.count, call,
                                     topo.size(), topo.size(),
                                     st.bf16, errors);
      } else {
        generate<<<blocks, 256, 0, s>>>(in.ptr, nullptr, st.count, call, rank, st.bf16);
        comm.all_reduce(rank, in.ptr, out1.ptr, st.count, t, s, st.algo);
        comm.all_reduce(rank, out1.ptr, out2.ptr, st.count, t, s, st.algo);  // back to back
        const AllReduceAlgo ran = st.algo == AllReduceAlgo::automatic ? comm.choose(uint64_t{st.count} * dtype_size(t)) : st.algo;
        const int group = ran == AllReduceAlgo::tray_first ? topo.ranks_per_tray() : topo.size();
        check<<<blocks, 256, 0, s>>>(out1.ptr, out2.ptr, nullptr, st.count, call, topo.size(), group, st.bf16, errors);
      }
      advance<<<1, 1, 0, s>>>(call);
    }
    cudaGraph_t graph;
    RS_CUDA_OK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    RS_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    // Upload now: an implicit upload at the first launch may wait for the whole GPU, where a peer
    // rank's graph may already be spinning on this rank.
    RS_CUDA_OK(cudaGraphUpload(exec, s));
    RS_CUDA_OK(cudaStreamSynchronize(s));
    barrier.arrive_and_wait();
    for (int i = 0; i < replays; ++i) RS_CUDA_OK(cudaGraphLaunch(exec, s));
    RS_CUDA_OK(cudaStreamSynchronize(s));
    uint32_t host[2];
    RS_CUDA_OK(cudaMemcpy(host, counters.ptr, 8, cudaMemcpyDeviceToHost));
    per_rank[rank] = {host[1], host[0]};
    barrier.arrive_and_wait();  // no rank frees (a device-wide wait) while a peer still runs
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }, &barrier);
  ReplayResult total;
  for (const auto& r : per_rank) {
    total.errors += r.errors;
    total.calls_seen = r.calls_seen;
  }
  return total;
}

int comm_calls(const std::vector<Step>& steps) {
  int n = 0;
  for (const Step& s : steps) n += s.kind == Step::pair ? 2 : 1;
  return n;
}

}  // namespace

TEST_SUITE("gpu.comm") {

TEST_CASE("10,000 back-to-back all-reduces in CUDA graphs: every sum right, no re-arm race") {
  if (!have_two_gpus()) return;
  using A = AllReduceAlgo;
  // One-shot, sizes changing call to call (the re-arm clears the extent the previous call used).
  const std::vector<Step> oneshot = {
      {Step::pair, A::lamport_oneshot, 7168, true}, {Step::pair, A::lamport_oneshot, 100, true},
      {Step::pair, A::lamport_oneshot, 33000, true}, {Step::pair, A::lamport_oneshot, 8, true},
      {Step::pair, A::lamport_oneshot, 7168, true}, {Step::pair, A::lamport_oneshot, 1, true},
      {Step::pair, A::lamport_oneshot, 65536, true}, {Step::pair, A::lamport_oneshot, 3, false},
      {Step::pair, A::lamport_oneshot, 7168, false}, {Step::pair, A::lamport_oneshot, 20000, true}};
  // Fused and two-shot, interleaved.
  const std::vector<Step> mixed = {
      {Step::fused, A::automatic, 7168, true}, {Step::pair, A::two_shot, 70000, true},
      {Step::fused, A::automatic, 4 * 7168, true}, {Step::pair, A::two_shot, 8, true},
      {Step::pair, A::automatic, 7168, true}, {Step::fused, A::automatic, 7168, true},
      {Step::pair, A::two_shot, 1 << 20, false}, {Step::fused, A::automatic, 2 * 7168, true},
      {Step::fused, A::automatic, 7168, true, true}};
  // Tray-first (two exchanges per call, both rotating through the same three buffers), sizes
  // changing call to call, mixed with one-shot calls on their own workspaces.
  const std::vector<Step> tray = {
      {Step::pair, A::tray_first, 7168, true}, {Step::pair, A::tray_first, 100, true},
      {Step::pair, A::tray_first, 33000, true}, {Step::pair, A::lamport_oneshot, 7168, true},
      {Step::pair, A::tray_first, 8, false}, {Step::pair, A::tray_first, 7168, false},
      {Step::pair, A::tray_first, 65536, true}, {Step::pair, A::tray_first, 3, true},
      {Step::pair, A::tray_first, 7168, true}, {Step::pair, A::tray_first, 20000, false}};
  // The fused steps run the automatic choice (one 7168-wide bf16 row: the decode kernel, every CTA
  // computing the row's norm; more rows: one CTA per row) and, forced, the cluster kernel (the row
  // split over a thread block cluster, launched with PDL in the graph). decode_ctas / decode_rows
  // (0: default) vary the decode kernel's grid and the rows it takes.
  using parallel::FusedVariant;
  struct Shape {
    int tp, trays, replays; FusedVariant fused;
    int decode_ctas = 0, decode_rows = 0;
  };
  for (Shape sh : {Shape{2, 1, 500, FusedVariant::automatic}, Shape{2, 1, 500, FusedVariant::cluster},
                   Shape{2, 1, 300, FusedVariant::automatic, 4, 2}, Shape{2, 1, 300, FusedVariant::automatic, 1},
                   Shape{2, 2, 500, FusedVariant::automatic}, Shape{4, 2, 60, FusedVariant::automatic},
                   Shape{8, 2, 30, FusedVariant::automatic}, Shape{8, 2, 30, FusedVariant::cluster}}) {
    parallel::CommConfig cfg;
    cfg.enable_nccl = false;
    cfg.fused_variant = sh.fused;
    if (sh.decode_ctas) cfg.fused_decode_ctas = sh.decode_ctas;
    if (sh.decode_rows) cfg.fused_decode_rows = static_cast<uint32_t>(sh.decode_rows);
    const bool decode_variant = sh.decode_ctas || sh.decode_rows;
    Comm comm(Topology::make(sh.tp, sh.trays, gpu_count()), cfg);
    for (const auto* steps : {&oneshot, &mixed, &tray}) {
      if ((sh.fused == FusedVariant::cluster || decode_variant) && steps != &mixed) continue;  // ran already
      if (steps == &tray && sh.trays == 1) continue;                  // tray-first needs two trays
      if (sh.tp == 2 && sh.trays == 2 && steps != &tray) continue;    // tp=2 trays=1 ran the others
      const ReplayResult r = replay(comm, *steps, sh.replays);
      INFO("tp=" << sh.tp << " fused=" << parallel::fused_variant_name(sh.fused) << " decode_ctas=" << sh.decode_ctas
                 << " decode_rows=" << sh.decode_rows << ": " << sh.replays << " replays x "
                 << comm_calls(*steps) << " all-reduce calls (" << (steps == &oneshot ? "one-shot" : steps == &tray ? "tray-first" : "fused + two-shot") << ")");
      CHECK(r.calls_seen == static_cast<uint32_t>(sh.replays * steps->size()));
      CHECK(r.errors == 0u);
    }
  }
}

}  // TEST_SUITE
}  // namespace rs::comm_test
