// gpu.comm: fused all-reduce + residual add + RMSNorm against an fp64 reference.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <tuple>
#include <memory>

#include "common/error.h"

#include "parallel/comm.h"
#include "parallel/rank_threads.h"
#include "tests/gpu/comm_test_util.h"

namespace rs::comm_test {
namespace {

using parallel::Comm;
using parallel::FusedArNormArgs;
using parallel::Topology;

struct FusedOut {
  std::vector<HostArray> residual_out, normed;
};

FusedOut run_fused(const Comm& comm, const std::vector<HostArray>& x, const HostArray& residual,
                   const HostArray& gamma, uint32_t rows, uint32_t hidden, DType t, bool in_place) {
  const int n = comm.size();
  FusedOut o;
  o.residual_out.resize(n);
  o.normed.resize(n);
  const size_t bytes = size_t{rows} * hidden * dtype_size(t);
  parallel::HostBarrier ready(n);  // all ranks allocated before any launches (see comm_allreduce_test)
  parallel::run_rank_threads(comm.topology(), [&](int rank) {
    cudaStream_t s;
    RS_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DeviceArray dx(bytes), dres(bytes), dres_out(bytes), dnormed(bytes), dgamma(hidden * dtype_size(t));
    dx.upload(x[rank]);
    dres.upload(residual);
    dres_out.upload(poison_array(size_t{rows} * hidden, t));
    dnormed.upload(poison_array(size_t{rows} * hidden, t));
    dgamma.upload(gamma);
    FusedArNormArgs a;
    a.x = dx.ptr;
    a.residual = dres.ptr;
    a.gamma = dgamma.ptr;
    a.residual_out = in_place ? dres.ptr : dres_out.ptr;
    a.normed = dnormed.ptr;
    a.rows = rows;
    a.hidden = hidden;
    a.eps = 1e-6f;
    a.dtype = t;
    RS_CUDA_OK(cudaDeviceSynchronize());
    ready.arrive_and_wait();
    comm.all_reduce_residual_rmsnorm(rank, a, s);
    RS_CUDA_OK(cudaStreamSynchronize(s));
    o.residual_out[rank] = (in_place ? dres : dres_out).download(t);
    o.normed[rank] = dnormed.download(t);
    ready.arrive_and_wait();
    cudaStreamDestroy(s);
  }, &ready);
  return o;
}

}  // namespace

TEST_SUITE("gpu.comm") {

TEST_CASE("fused all-reduce + residual + RMSNorm equals the fp64 reference; ranks agree bit for bit") {
  if (!have_two_gpus()) return;
  // auto: rows of up to 1024 vectors go whole into one CTA (rows dealt round-robin), wider rows
  // are split over a thread block cluster of up to 8 CTAs. The cluster kernel also runs every
  // shape; span > 0 forces its split, so one cluster walks several rows (its partial slots
  // alternate by row parity); max_ctas shrinks the grid.
  // One-row calls take the decode kernel (every CTA computes the row's norm, each writes a chunk);
  // decode_ctas / decode_threads / decode_rows (0: default) vary its grid, threads a CTA and the
  // rows it takes.
  struct Shape {
    int tp, trays, max_ctas, span; uint32_t rows, hidden; DType t; bool in_place;
    int decode_ctas = 0, decode_threads = 0, decode_rows = 0;
  };
  const Shape shapes[] = {
      {2, 1, 0, 0, 1, 7168, DType::BF16, false},  // auto: the decode kernel; cluster: 8 CTAs of 112 vectors
      {2, 1, 0, 0, 3, 7168, DType::BF16, true},
      {2, 1, 0, 0, 40, 7168, DType::BF16, false},  // more rows than CTAs
      {2, 1, 0, 8, 40, 7168, DType::BF16, false},  // cluster: 4 clusters of 8, 10 rows each
      {2, 1, 0, 2, 40, 4096, DType::F32, false},   // cluster: 16 clusters of 2, 2-3 rows each
      {2, 1, 0, 0, 2, 16, DType::BF16, false},
      {2, 1, 0, 0, 5, 4096, DType::F32, false},
      {2, 1, 0, 0, 1, 7168, DType::F32, false},    // auto: cluster (1792 vectors)
      {2, 1, 0, 0, 200, 7168, DType::BF16, false},  // > 1 MiB: two pieces
      {2, 1, 0, 0, 3, 7176, DType::BF16, false},   // uneven chunks
      {2, 1, 0, 0, 1, 16384, DType::BF16, false},  // auto: cluster
      {2, 1, 2, 0, 1, 16384, DType::BF16, false},  // 2 CTAs: cluster of 2, 512 threads x 2 vectors
      {2, 1, 2, 0, 3, 7168, DType::BF16, true},
      {2, 1, 1, 0, 2, 16384, DType::BF16, false},  // 1 CTA: 512 threads x 4 vectors, the whole row
      {4, 2, 0, 0, 3, 7168, DType::BF16, false},   {8, 2, 0, 0, 2, 7168, DType::BF16, false},
      // decode kernel: in place (CTA 0 takes the row), fp32, a row of 2 warps (CTAs past it own
      // nothing), uneven chunks, grids of 1 to 8, 4 vectors a thread, more than one row, tp 4
      // and 8
      {2, 1, 0, 0, 1, 7168, DType::BF16, true},
      {2, 1, 0, 0, 1, 3584, DType::F32, false},
      {2, 1, 0, 0, 1, 512, DType::BF16, false, 4},
      {2, 1, 0, 0, 1, 7176, DType::BF16, false},
      {2, 1, 0, 0, 1, 7168, DType::BF16, false, 1},
      {2, 1, 0, 0, 1, 7176, DType::BF16, false, 3},
      {2, 1, 0, 0, 1, 7168, DType::BF16, false, 4},
      {2, 1, 0, 0, 1, 7168, DType::BF16, false, 8},
      {2, 1, 0, 0, 1, 7168, DType::BF16, true, 8},
      {2, 1, 0, 0, 1, 4096, DType::F32, false, 8},
      {2, 1, 0, 0, 1, 7168, DType::BF16, false, 2, 256},  // 4 vectors a thread
      {2, 1, 0, 0, 1, 3584, DType::F32, false, 4},
      {2, 1, 0, 0, 1, 7168, DType::BF16, true, 4},
      {2, 1, 0, 0, 2, 7168, DType::BF16, false, 2, 0, 2},
      {2, 1, 0, 0, 2, 7168, DType::BF16, false, 4, 0, 2},
      {2, 1, 0, 0, 3, 4096, DType::BF16, true, 4, 0, 4},
      {4, 2, 0, 0, 1, 7168, DType::BF16, false},   {8, 2, 0, 0, 1, 7168, DType::BF16, true},
      {8, 2, 0, 0, 1, 7168, DType::BF16, false},
  };
  std::map<std::tuple<int, int, int, int, parallel::FusedVariant, int, int, int>, std::unique_ptr<Comm>> comms;
  uint64_t seed = 9000;
  for (parallel::FusedVariant variant : {parallel::FusedVariant::automatic, parallel::FusedVariant::cluster})
  for (const Shape& sh : shapes) {
    if (sh.span && variant != parallel::FusedVariant::cluster) continue;
    auto& comm = comms[{sh.tp, sh.trays, sh.max_ctas, sh.span, variant, sh.decode_ctas, sh.decode_threads,
                        sh.decode_rows}];
    if (!comm) {
      parallel::CommConfig cfg;
      cfg.enable_nccl = false;  // the fused op never calls NCCL
      cfg.fused_variant = variant;
      cfg.fused_span = sh.span;
      if (sh.max_ctas) cfg.fused_max_ctas = sh.max_ctas;
      if (sh.decode_ctas) cfg.fused_decode_ctas = sh.decode_ctas;
      if (sh.decode_threads) cfg.fused_decode_threads = sh.decode_threads;
      if (sh.decode_rows) cfg.fused_decode_rows = static_cast<uint32_t>(sh.decode_rows);
      comm = std::make_unique<Comm>(Topology::make(sh.tp, sh.trays, gpu_count()), cfg);
    }
    const size_t count = size_t{sh.rows} * sh.hidden;
    std::vector<HostArray> x;
    for (int k = 0; k < sh.tp; ++k) x.push_back(random_array(count, sh.t, ++seed));
    const HostArray residual = random_array(count, sh.t, ++seed, 2.0f);
    const HostArray gamma = random_array(sh.hidden, sh.t, ++seed);
    const FusedOut o = run_fused(*comm, x, residual, gamma, sh.rows, sh.hidden, sh.t, sh.in_place);

    size_t bad_res = 0, bad_norm = 0, bad_bits = 0;
    double worst_res = 0, worst_norm = 0;
    for (uint32_t row = 0; row < sh.rows; ++row) {
      double sumsq = 0;
      for (uint32_t c = 0; c < sh.hidden; ++c) {
        const size_t i = size_t{row} * sh.hidden + c;
        double exact = residual.get(i), abs_sum = std::fabs(residual.get(i));
        for (int k = 0; k < sh.tp; ++k) {
          exact += x[k].get(i);
          abs_sum += std::fabs(x[k].get(i));
        }
        const double got = o.residual_out[0].get(i);
        const double err = std::fabs(got - exact);
        if (!(err <= sum_tolerance(sh.t, exact, abs_sum, sh.tp + 1))) ++bad_res;
        worst_res = std::max(worst_res, err);
        sumsq += got * got;  // the norm reads residual_out as rounded
        for (int k = 1; k < sh.tp; ++k)
          if (o.residual_out[k].bits(i) != o.residual_out[0].bits(i) || o.normed[k].bits(i) != o.normed[0].bits(i))
            ++bad_bits;
      }
      const double inv_rms = 1.0 / std::sqrt(sumsq / sh.hidden + 1e-6);
      for (uint32_t c = 0; c < sh.hidden; ++c) {
        const size_t i = size_t{row} * sh.hidden + c;
        const double expect = o.residual_out[0].get(i) * inv_rms * gamma.get(c);
        const double err = std::fabs(o.normed[0].get(i) - expect);
        // Element rounding plus the fp32 sum of squares and rsqrt (relative 1e-3 covers hidden=16K).
        if (!(err <= (unit_roundoff(sh.t) + 1e-3) * std::fabs(expect) + 1e-6)) ++bad_norm;
        worst_norm = std::max(worst_norm, err);
      }
    }
    INFO(parallel::fused_variant_name(variant) << " tp=" << sh.tp << " max_ctas=" << sh.max_ctas << " span=" << sh.span << " rows=" << sh.rows << " hidden=" << sh.hidden << (sh.t == DType::BF16 ? " bf16" : " fp32")
               << (sh.in_place ? " in-place" : "") << " decode_ctas=" << sh.decode_ctas << " decode_threads="
               << sh.decode_threads << " decode_rows=" << sh.decode_rows << ": worst residual err " << worst_res << ", worst norm err " << worst_norm);
    CHECK(bad_res == 0);
    CHECK(bad_norm == 0);
    CHECK(bad_bits == 0);
  }
}

TEST_CASE("fused all-reduce + RMSNorm rejects shapes it cannot hold, with a message") {
  if (!have_two_gpus()) return;
  Comm comm(Topology::make(2, 1, 2), [] { parallel::CommConfig c; c.enable_nccl = false; return c; }());
  FusedArNormArgs a;
  a.x = a.residual = a.gamma = reinterpret_cast<void*>(256);
  a.residual_out = a.normed = reinterpret_cast<void*>(256);
  a.rows = 1;
  a.hidden = 7170;  // not a multiple of 8 bf16
  CHECK_THROWS_WITH_AS(comm.all_reduce_residual_rmsnorm(0, a, nullptr),
                       doctest::Contains("hidden 7170 must be a positive multiple of 8"), Error);
  a.hidden = 16384 * 2;
  CHECK_THROWS_WITH_AS(comm.all_reduce_residual_rmsnorm(0, a, nullptr), doctest::Contains("exceeds the largest row"), Error);
  a.hidden = 7168;
  a.x = reinterpret_cast<void*>(258);
  CHECK_THROWS_WITH_AS(comm.all_reduce_residual_rmsnorm(0, a, nullptr), doctest::Contains("x pointer is not 16-byte aligned"), Error);
}

}  // TEST_SUITE
}  // namespace rs::comm_test
