// gpu.comm: every all-reduce algorithm against the fp64 sum and NCCL, 8 B to 64 MB, bf16 and
// fp32; -0.0 inputs; logical ranks sharing GPUs; the spin-wait bound.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "parallel/comm.h"
#include "parallel/rank_threads.h"
#include "tests/gpu/comm_test_util.h"

namespace rs::comm_test {
namespace {

using parallel::AllReduceAlgo;
using parallel::Comm;
using parallel::Topology;

// One Comm per shape for the whole test binary: NCCL bootstrap and workspace arming once.
const Comm& shared_comm(int tp, int trays) {
  static std::map<std::pair<int, int>, std::unique_ptr<Comm>> comms;
  auto& c = comms[{tp, trays}];
  if (!c) c = std::make_unique<Comm>(Topology::make(tp, trays, gpu_count()));
  return *c;
}

struct RunOut {
  std::vector<HostArray> in, out, nccl;
};

// Every rank all-reduces its own random input (outputs poisoned first); NCCL too if asked.
RunOut run_collective(const Comm& comm, size_t count, DType t, AllReduceAlgo algo, uint64_t seed,
                      bool with_nccl, const std::vector<HostArray>* inputs = nullptr) {
  const int n = comm.size();
  RunOut r;
  for (int k = 0; k < n; ++k) r.in.push_back(inputs ? (*inputs)[k] : random_array(count, t, seed * 131 + k));
  r.out.resize(n);
  r.nccl.resize(n);
  const size_t bytes = count * dtype_size(t);
  // Every rank allocates and uploads before any rank launches: a cudaMalloc or cudaMemcpy can
  // wait for the whole GPU, and a rank sharing the GPU may already be spinning on this one.
  parallel::HostBarrier ready(n);
  parallel::run_rank_threads(comm.topology(), [&](int rank) {
    cudaStream_t s;
    RS_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DeviceArray din(bytes), dout(bytes), dnccl(bytes);
    din.upload(r.in[rank]);
    dout.upload(poison_array(count, t));
    dnccl.upload(poison_array(count, t));
    RS_CUDA_OK(cudaDeviceSynchronize());
    ready.arrive_and_wait();
    comm.all_reduce(rank, din.ptr, dout.ptr, count, t, s, algo);
    if (with_nccl) comm.all_reduce(rank, din.ptr, dnccl.ptr, count, t, s, AllReduceAlgo::nccl);
    RS_CUDA_OK(cudaStreamSynchronize(s));
    r.out[rank] = dout.download(t);
    if (with_nccl) r.nccl[rank] = dnccl.download(t);
    ready.arrive_and_wait();  // no rank frees (a device-wide wait) while a peer still runs
    cudaStreamDestroy(s);
  }, &ready);
  return r;
}

// Checks rank 0's output against the fp64 sum (and NCCL), and every rank's bits against rank 0.
void check_sum(const RunOut& r, DType t, bool with_nccl, const std::string& what) {
  const int n = static_cast<int>(r.in.size());
  const size_t count = r.in[0].count();
  size_t bad_value = 0, bad_bits = 0, bad_nccl = 0, first_bad = SIZE_MAX;
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0, abs_sum = 0;
    for (int k = 0; k < n; ++k) {
      exact += r.in[k].get(i);
      abs_sum += std::fabs(r.in[k].get(i));
    }
    const double tol = sum_tolerance(t, exact, abs_sum, n);
    const double got = r.out[0].get(i);
    const double err = std::fabs(got - exact);  // NaN (unwritten poison) fails below
    if (!(err <= tol)) {
      ++bad_value;
      if (first_bad == SIZE_MAX) first_bad = i;
    }
    if (err > worst) worst = err;
    for (int k = 1; k < n; ++k)
      if (r.out[k].bits(i) != r.out[0].bits(i)) ++bad_bits;
    if (with_nccl && !(std::fabs(got - r.nccl[0].get(i)) <= 2 * tol)) ++bad_nccl;
  }
  INFO(what << ": " << count << " elements, worst |err| " << worst
            << (first_bad != SIZE_MAX ? ", first bad element " + std::to_string(first_bad) : std::string()));
  CHECK(bad_value == 0);
  CHECK(bad_bits == 0);
  if (with_nccl) CHECK(bad_nccl == 0);
}

const char* dname(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }

}  // namespace

TEST_SUITE("gpu.comm") {

TEST_CASE("all-reduce: one-shot, two-shot and the dispatcher equal the fp64 sum and NCCL, 8 B..64 MB") {
  if (!have_two_gpus()) return;
  const Comm& comm = shared_comm(2, 1);
  const bool nccl = comm.has_nccl();
  if (!nccl) MESSAGE("NCCL unavailable, comparing with the fp64 sum only: " << comm.nccl_status());
  const size_t sizes[] = {8, 16, 24, 1000, 14336, 65584, 1u << 20, (4u << 20) + 16, 64u << 20};
  uint64_t seed = 1;
  for (DType t : {DType::BF16, DType::F32}) {
    for (size_t bytes : sizes) {
      const size_t count = bytes / dtype_size(t);
      for (AllReduceAlgo algo : {AllReduceAlgo::lamport_oneshot, AllReduceAlgo::two_shot, AllReduceAlgo::automatic}) {
        if (algo == AllReduceAlgo::lamport_oneshot && bytes > (4u << 20) + 16) continue;  // 64 pieces: slow, not new
        const auto r = run_collective(comm, count, t, algo, ++seed, nccl);
        check_sum(r, t, nccl, std::string(parallel::algo_name(algo)) + " " + dname(t) + " " + std::to_string(bytes) + " B");
      }
    }
  }
}

TEST_CASE("all-reduce: -0.0 inputs are canonicalised to +0.0 and never stall a reader") {
  if (!have_two_gpus()) return;
  const Comm& comm = shared_comm(2, 1);
  for (DType t : {DType::BF16, DType::F32}) {
    const uint32_t neg_zero = t == DType::BF16 ? 0x8000u : 0x80000000u;
    const size_t count = 10000;
    std::vector<HostArray> in;
    for (int k = 0; k < comm.size(); ++k) {
      HostArray a = random_array(count, t, 77 + k);
      for (size_t i = 0; i < count; ++i)
        if (i < count / 2 || (k == 0 && i % 3 == 0)) a.set_bits(i, neg_zero);  // first half: -0.0 everywhere
      in.push_back(a);
    }
    for (AllReduceAlgo algo : {AllReduceAlgo::lamport_oneshot, AllReduceAlgo::two_shot}) {
      const auto r = run_collective(comm, count, t, algo, 0, false, &in);
      check_sum(r, t, false, std::string("-0.0 ") + parallel::algo_name(algo) + " " + dname(t));
      size_t not_plus_zero = 0;
      for (size_t i = 0; i < count / 2; ++i)
        if (r.out[0].bits(i) != 0u) ++not_plus_zero;
      INFO(parallel::algo_name(algo) << " " << dname(t));
      CHECK(not_plus_zero == 0);
    }
  }
}

TEST_CASE("all-reduce: 4 and 8 logical ranks in two trays on 2 GPUs") {
  if (!have_two_gpus()) return;
  for (int tp : {4, 8}) {
    const Comm& comm = shared_comm(tp, 2);
    REQUIRE(comm.topology().ranks_share_devices());
    CHECK_FALSE(comm.has_nccl());  // NCCL allows one rank per GPU: the fp64 sum is the reference
    uint64_t seed = 500 + tp;
    for (DType t : {DType::BF16, DType::F32}) {
      for (size_t bytes : {size_t{8}, size_t{14336}, size_t{1000}, size_t{1} << 20}) {
        for (AllReduceAlgo algo : {AllReduceAlgo::lamport_oneshot, AllReduceAlgo::two_shot}) {
          const auto r = run_collective(comm, bytes / dtype_size(t), t, algo, ++seed, false);
          check_sum(r, t, false, "tp=" + std::to_string(tp) + " " + parallel::algo_name(algo) + " " + dname(t) +
                                     " " + std::to_string(bytes) + " B");
        }
      }
    }
  }
}

TEST_CASE("tray-first all-reduce equals the fp64 sum and NCCL (or the one-shot); ranks agree bit for bit") {
  if (!have_two_gpus()) return;
  // tp=2 trays=2: two simulated trays of one GPU (only the across-tray exchange runs); tp=4 and
  // tp=8 in two trays: logical ranks, the in-tray exchange inside a GPU and across trays over
  // NVLink. NCCL needs one GPU per rank, so the logical shapes compare with the flat one-shot.
  uint64_t seed = 700;
  for (int tp : {2, 4, 8}) {
    const Comm& comm = shared_comm(tp, 2);
    const bool nccl = comm.has_nccl();
    for (DType t : {DType::BF16, DType::F32}) {
      for (size_t bytes : {size_t{8}, size_t{16}, size_t{24}, size_t{1000}, size_t{14336}, size_t{65584},
                           size_t{1} << 20, (size_t{4} << 20) + 16}) {
        if (tp == 8 && bytes > (size_t{1} << 20)) continue;  // 4 ranks a GPU: slow, nothing new
        const std::string what = "tray-first tp=" + std::to_string(tp) + " trays=2 " + dname(t) + " " +
                                 std::to_string(bytes) + " B";
        if (nccl) {  // one rank per GPU: NCCL right after, in the same stream
          const auto r = run_collective(comm, bytes / dtype_size(t), t, AllReduceAlgo::tray_first, ++seed, true);
          check_sum(r, t, true, what + " vs nccl");
        } else {
          // Logical ranks: the flat one-shot on the same inputs, in a run of its own (one
          // collective per stream and run; see kManyHardwareQueues in comm_test_util.h).
          auto r = run_collective(comm, bytes / dtype_size(t), t, AllReduceAlgo::tray_first, ++seed, false);
          r.nccl = run_collective(comm, bytes / dtype_size(t), t, AllReduceAlgo::lamport_oneshot, 0, false, &r.in).out;
          check_sum(r, t, true, what + " vs lamport-oneshot");
        }
      }
    }
    // -0.0 inputs: canonicalised, never taken for the sentinel in either exchange.
    for (DType t : {DType::BF16, DType::F32}) {
      const uint32_t neg_zero = t == DType::BF16 ? 0x8000u : 0x80000000u;
      const size_t count = 10000;
      std::vector<HostArray> in;
      for (int k = 0; k < tp; ++k) {
        HostArray a = random_array(count, t, 900 + k);
        for (size_t i = 0; i < count; ++i)
          if (i < count / 2 || (k == 0 && i % 3 == 0)) a.set_bits(i, neg_zero);
        in.push_back(a);
      }
      const auto r = run_collective(comm, count, t, AllReduceAlgo::tray_first, 0, false, &in);
      check_sum(r, t, false, "-0.0 tray-first tp=" + std::to_string(tp) + " " + dname(t));
      size_t not_plus_zero = 0;
      for (size_t i = 0; i < count / 2; ++i)
        if (r.out[0].bits(i) != 0u) ++not_plus_zero;
      CHECK(not_plus_zero == 0);
    }
  }
}

TEST_CASE("dispatcher: tray-first only with trays > 1 and up to its threshold") {
  if (!have_two_gpus()) return;
  parallel::CommConfig cfg;
  cfg.enable_nccl = false;
  cfg.dispatch.tray_first_max_bytes = 64 << 10;
  const Comm two_trays(Topology::make(2, 2, gpu_count()), cfg);
  CHECK(two_trays.choose(14336) == AllReduceAlgo::tray_first);
  CHECK(two_trays.choose(64 << 10) == AllReduceAlgo::tray_first);
  CHECK(two_trays.choose((64 << 10) + 16) == AllReduceAlgo::lamport_oneshot);
  const Comm one_tray(Topology::make(2, 1, gpu_count()), cfg);
  CHECK(one_tray.choose(14336) == AllReduceAlgo::lamport_oneshot);
  // The automatic path runs what choose() says: the sum must still be right.
  const auto r = run_collective(two_trays, 7168, DType::BF16, AllReduceAlgo::automatic, 4242, false);
  check_sum(r, DType::BF16, false, "automatic (tray-first) tp=2 trays=2 bf16 7168");
}

TEST_CASE("spin-wait bound: a rank whose peer never runs prints rank, buffer and slot, then traps") {
  if (!have_two_gpus()) return;
  const char* env = std::getenv("RS_RACKSERVE_BINARY");
  const std::string binary = env && *env ? env : RS_BINARY;
  const std::string cmd = binary + " bench allreduce --hang-selftest 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  INFO("output of `" << cmd << "`:\n" << out);
  CHECK(out.find("timed out") != std::string::npos);
  CHECK(out.find("on rank 0") != std::string::npos);
  CHECK(out.find("buffer 0 slot 1") != std::string::npos);
  CHECK(out.find("stopped as designed") != std::string::npos);
}

}  // TEST_SUITE
}  // namespace rs::comm_test
