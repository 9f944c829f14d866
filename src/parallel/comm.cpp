#include "parallel/comm.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "kernels/comm/comm_launch.h"
#include "parallel/cuda_check.h"
#include "parallel/peer_memory.h"

namespace rs::parallel {
namespace {

comm::ElemType elem_type(DType t) {
  switch (t) {
    case DType::BF16: return comm::ElemType::bf16;
    case DType::F32: return comm::ElemType::fp32;
    default:
      throw Error(std::string("all-reduce of ") + dtype_name(t) + ": only BF16 and F32 are supported");
  }
}

int lanes(DType t) { return static_cast<int>(comm::kVecBytes / dtype_size(t)); }

void check_aligned(const void* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % comm::kVecBytes != 0)
    throw Error(std::string("all-reduce ") + what + " pointer is not 16-byte aligned");
}

int sm_count(int device) {
  int n = 0;
  cuda_check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "SM count");
  return n;
}

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

}  // namespace

const char* algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::automatic: return "auto";
    case AllReduceAlgo::lamport_oneshot: return "lamport-oneshot";
    case AllReduceAlgo::two_shot: return "two-shot";
    case AllReduceAlgo::nccl: return "nccl";
    case AllReduceAlgo::tray_first: return "tray-first";
  }
  return "?";
}

const char* fused_variant_name(FusedVariant v) {
  switch (v) {
    case FusedVariant::automatic: return "auto";
    case FusedVariant::whole_row: return "whole-row";
    case FusedVariant::cluster: return "cluster";
  }
  return "?";
}

Comm::Comm(const Topology& topo, const CommConfig& config) : topo_(topo), config_(config) {
  for (const auto& [name, threads] : {std::pair<const char*, int>{"fused_threads", config.fused_threads},
                                      {"fused_decode_threads", config.fused_decode_threads}})
    if (threads < 32 || threads > comm::kFusedMaxThreads || threads % 32 != 0)
      throw Error(std::string("comm config: ") + name + " " + std::to_string(threads) +
                  " must be a multiple of 32 in 32.." + std::to_string(comm::kFusedMaxThreads));
  enable_peer_access(topo.devices());
  {
    int current = 0;
    cuda_check(cudaGetDevice(&current), "cudaGetDevice");
    for (int d : topo.devices()) {
      cuda_check(cudaSetDevice(d), "cudaSetDevice");
      cuda_check(comm::preload_comm_kernels(), "loading the comm kernels on GPU " + std::to_string(d));
    }
    cuda_check(cudaSetDevice(current), "cudaSetDevice");
  }
  // Every CTA of a Lamport kernel may spin until its peers' CTAs run, so all of them must be
  // resident at once. A rank alone on its GPU may use every SM; ranks sharing a GPU split the
  // SMs, and leave half free for the next kernel a PDL launch brings in early.
  const int sms = sm_count(topo.device_of(0));
  const int budget = topo.ranks_share_devices() ? std::max(1, sms / (2 * topo.ranks_per_device())) : sms;
  const int oneshot_ctas = std::min(budget, config.oneshot_max_ctas);
  const int fused_ctas = std::min(budget, config.fused_max_ctas);
  const int fused_decode_ctas = std::max(1, std::min(fused_ctas, config.fused_decode_ctas));
  const int two_shot_ctas = config.two_shot_max_ctas > 0 ? std::min(budget, config.two_shot_max_ctas) : budget;
  const int tray_ctas = std::min(budget, config.tray_first_max_ctas);
  const uint32_t n = static_cast<uint32_t>(topo.size());
  for (comm::ElemType t : {comm::ElemType::bf16, comm::ElemType::fp32}) {
    oneshot_.push_back(std::make_unique<LamportWorkspace>(
        topo, t, LamportShape{n, round_up(config.oneshot_capacity_bytes, comm::kVecBytes), oneshot_ctas},
        config.timeout_ns));
    fused_.push_back(std::make_unique<LamportWorkspace>(
        topo, t, LamportShape{n, round_up(config.fused_capacity_bytes, comm::kVecBytes), fused_ctas},
        config.timeout_ns));
    // Decode rows are small: a row of up to 1024 vectors (the whole-row kernel's limit) per row.
    fused_decode_.push_back(std::make_unique<LamportWorkspace>(
        topo, t,
        LamportShape{n, std::max<uint64_t>(config.fused_decode_rows, 1) * comm::kFusedMaxThreads * 2 * comm::kVecBytes,
                     fused_decode_ctas},
        config.timeout_ns));
    two_shot_.push_back(std::make_unique<LamportWorkspace>(
        topo, t,
        LamportShape{2 * n, round_up((config.two_shot_capacity_bytes + n - 1) / n, comm::kVecBytes),
                     two_shot_ctas},
        config.timeout_ns));
    // Tray-first: fp32 partials cross between trays, 16 / elem_size vectors' worth per element vector.
    const uint64_t cap = round_up(config.oneshot_capacity_bytes, comm::kVecBytes);
    tray_.push_back(std::make_unique<LamportWorkspace>(
        topo, t, LamportShape{static_cast<uint32_t>(topo.ranks_per_tray()), cap, tray_ctas}, config.timeout_ns));
    across_.push_back(std::make_unique<LamportWorkspace>(
        topo, comm::ElemType::fp32,
        LamportShape{static_cast<uint32_t>(topo.trays()), t == comm::ElemType::bf16 ? 2 * cap : cap, tray_ctas},
        config.timeout_ns));
  }
  if (!config.enable_nccl) {
    nccl_status_ = "disabled";
  } else {
    try {
      nccl_ = std::make_unique<NcclComms>(topo);
      const int v = nccl_->version();
      nccl_status_ = "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                     std::to_string(v % 100);
    } catch (const Error& e) {
      nccl_status_ = e.what();
    }
  }
}

Comm::~Comm() = default;

void Comm::check_rank(int rank) const {
  if (rank < 0 || rank >= topo_.size())
    throw Error("comm rank " + std::to_string(rank) + " outside 0.." + std::to_string(topo_.size() - 1));
}

const LamportWorkspace& Comm::workspace(const std::vector<std::unique_ptr<LamportWorkspace>>& set,
                                        DType dtype) const {
  return *set.at(static_cast<size_t>(elem_type(dtype)));
}

AllReduceAlgo Comm::choose(uint64_t bytes) const {
  if (topo_.trays() > 1 && bytes <= config_.dispatch.tray_first_max_bytes) return AllReduceAlgo::tray_first;
  if (bytes <= config_.dispatch.oneshot_max_bytes) return AllReduceAlgo::lamport_oneshot;
  if (bytes > config_.dispatch.two_shot_max_bytes && has_nccl()) return AllReduceAlgo::nccl;
  return AllReduceAlgo::two_shot;
}

void Comm::all_reduce(int rank, const void* in, void* out, size_t count, DType dtype,
                      cudaStream_t stream, AllReduceAlgo algo) const {
  check_rank(rank);
  const comm::ElemType type = elem_type(dtype);
  if (count == 0) return;
  check_aligned(in, "input");
  check_aligned(out, "output");
  const size_t esize = dtype_size(dtype);
  if (algo == AllReduceAlgo::automatic) algo = choose(count * esize);
  if (algo == AllReduceAlgo::nccl) {
    if (!nccl_) throw Error("NCCL all-reduce requested but NCCL is unavailable: " + nccl_status_);
    nccl_->all_reduce(rank, in, out, count, dtype, stream);
    return;
  }
  if (algo == AllReduceAlgo::tray_first) {
    tray_first(rank, in, out, count, dtype, stream);
    return;
  }
  const LamportWorkspace& ws =
      workspace(algo == AllReduceAlgo::lamport_oneshot ? oneshot_ : two_shot_, dtype);
  const comm::LamportView view = ws.view(rank);
  // Largest piece one call can carry; a multiple of 16 bytes, so later pieces stay aligned.
  const uint64_t piece = algo == AllReduceAlgo::lamport_oneshot
                             ? ws.region_bytes() / esize
                             : ws.region_bytes() / esize * static_cast<uint64_t>(topo_.size());
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  for (uint64_t done = 0; done < count; done += piece) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(piece, count - done));
    cudaError_t err;
    if (algo == AllReduceAlgo::lamport_oneshot) {
      const comm::OneShotParams p{view, src + done * esize, dst + done * esize, n, type};
      err = comm::launch_lamport_oneshot(p, {ws.ctas(), config_.oneshot_threads, config_.pdl}, stream);
    } else {
      const comm::TwoShotParams p{view, src + done * esize, dst + done * esize, n, type};
      err = comm::launch_two_shot(p, {ws.ctas(), config_.two_shot_threads, config_.pdl}, stream);
    }
    // The message is built only on failure: this runs per launch (every layer once the forward
    // pass uses it, and inside the eager timings of bench allreduce).
    if (err != cudaSuccess)
      cuda_check(err, std::string(algo_name(algo)) + " all-reduce launch on rank " + std::to_string(rank));
  }
}

void Comm::tray_first(int rank, const void* in, void* out, size_t count, DType dtype, cudaStream_t stream) const {
  const LamportWorkspace& tray = workspace(tray_, dtype);
  const LamportWorkspace& across = workspace(across_, dtype);
  const size_t esize = dtype_size(dtype);
  const uint64_t piece = tray.region_bytes() / esize;  // across holds the same piece in fp32
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  for (uint64_t done = 0; done < count; done += piece) {
    comm::TrayFirstParams p{};
    p.tray = tray.view(rank);
    p.across = across.view(rank);
    p.in = src + done * esize;
    p.out = dst + done * esize;
    p.count = static_cast<uint32_t>(std::min<uint64_t>(piece, count - done));
    p.type = elem_type(dtype);
    p.tray_size = topo_.ranks_per_tray();
    p.trays = topo_.trays();
    const cudaError_t err =
        comm::launch_tray_first(p, {tray.ctas(), config_.tray_first_threads, config_.pdl}, stream);
    if (err != cudaSuccess) cuda_check(err, "tray-first all-reduce launch on rank " + std::to_string(rank));
  }
}

void Comm::all_reduce_residual_rmsnorm(int rank, const FusedArNormArgs& a, cudaStream_t stream) const {
  check_rank(rank);
  const comm::ElemType type = elem_type(a.dtype);
  if (a.rows == 0) return;
  const int l = lanes(a.dtype);
  if (a.hidden == 0 || a.hidden % l != 0)
    throw Error("fused all-reduce+rmsnorm: hidden " + std::to_string(a.hidden) +
                " must be a positive multiple of " + std::to_string(l));
  const uint32_t row_vecs = a.hidden / l;
  const uint32_t max_vecs = comm::kFusedMaxVecsPerThread * comm::kFusedMaxThreads;
  if (row_vecs > max_vecs)
    throw Error("fused all-reduce+rmsnorm: hidden " + std::to_string(a.hidden) + " exceeds the largest row (" +
                std::to_string(max_vecs * l) + " elements) one CTA holds");
  if (!(a.eps > 0.f)) throw Error("fused all-reduce+rmsnorm: eps must be > 0");
  check_aligned(a.x, "x");
  check_aligned(a.residual, "residual");
  check_aligned(a.gamma, "gamma");
  check_aligned(a.residual_out, "residual_out");
  check_aligned(a.normed, "normed");
  // Rows of up to 2 vectors per thread go whole into one CTA each; wider rows are split over a
  // cluster, measured faster there (docs/perf/comm.md). The cluster: rows are spread over the
  // grid first, the CTAs left per row (a power of two <= 8 dividing the grid) split it, with
  // chunks of at least fused_threads vectors.
  FusedVariant variant = config_.fused_variant;
  if (variant == FusedVariant::automatic)
    variant = row_vecs <= 2u * comm::kFusedMaxThreads ? FusedVariant::whole_row : FusedVariant::cluster;
  const uint64_t row_bytes = static_cast<uint64_t>(a.hidden) * dtype_size(a.dtype);
  // Decode-sized calls take the decode kernel on the small grid (CommConfig::fused_decode_ctas).
  // Every rank makes the same choice from the same arguments, so each workspace sees the same
  // sequence of calls.
  const LamportWorkspace& decode_ws = workspace(fused_decode_, a.dtype);
  const bool decode = variant == FusedVariant::whole_row && a.rows <= config_.fused_decode_rows &&
                      a.rows * row_bytes <= decode_ws.region_bytes();
  const LamportWorkspace& ws = decode ? decode_ws : workspace(fused_, a.dtype);
  const uint64_t rows_per_piece = ws.region_bytes() / row_bytes;
  if (rows_per_piece == 0)
    throw Error("fused all-reduce+rmsnorm: a row of " + std::to_string(row_bytes) +
                " bytes exceeds the fused workspace capacity (" + std::to_string(ws.region_bytes()) + " bytes)");
  const uint32_t ctas = static_cast<uint32_t>(ws.ctas());
  int threads = 0, per_thread = 0, cluster = 0;
  uint32_t chunk_vecs = row_vecs;
  if (decode) {
    // Every CTA computes the row's norm and writes a chunk (a multiple of 32 vectors). In place
    // (residual_out overlapping residual), CTA 0 takes the whole row: another CTA could still be
    // reading a residual value this one has replaced. Ranks may differ here (their pointers do):
    // the chunks only say which CTA pushes and writes a vector; every rank still pushes, polls,
    // re-arms and advances the same buffers.
    const uint32_t pt = std::min<uint32_t>((row_vecs + config_.fused_decode_threads - 1) / config_.fused_decode_threads,
                                           comm::kFusedMaxVecsPerThread);
    threads = static_cast<int>(round_up((row_vecs + pt - 1) / pt, 32));
    const uint64_t bytes = a.rows * row_bytes;
    const auto* r0 = static_cast<const char*>(a.residual);
    const auto* r1 = static_cast<const char*>(a.residual_out);
    const bool in_place = r0 < r1 + bytes && r1 < r0 + bytes;
    chunk_vecs = static_cast<uint32_t>(round_up(in_place ? row_vecs : (row_vecs + ctas - 1) / ctas, 32));
  } else if (variant == FusedVariant::whole_row) {
    const uint32_t pt = (row_vecs + comm::kFusedMaxThreads - 1) / comm::kFusedMaxThreads;
    threads = static_cast<int>(round_up((row_vecs + pt - 1) / pt, 32));
  } else {
    uint32_t span = 1;
    if (config_.fused_span > 0) {  // forced (tests, benchmarks)
      span = static_cast<uint32_t>(config_.fused_span);
      if (span > static_cast<uint32_t>(comm::kFusedMaxCluster) || (span & (span - 1)) != 0 || ctas % span != 0 ||
          span > row_vecs)
        throw Error("fused all-reduce+rmsnorm: fused_span " + std::to_string(span) +
                    " must be a power of two <= 8 dividing the grid (" + std::to_string(ctas) +
                    " CTAs) and <= the row's " + std::to_string(row_vecs) + " vectors");
    } else {
      const uint32_t rows_per_call = static_cast<uint32_t>(std::min<uint64_t>(a.rows, rows_per_piece));
      const uint32_t useful = (row_vecs + config_.fused_threads - 1) / config_.fused_threads;
      uint32_t cap = 1;
      while (cap < useful) cap *= 2;
      const uint32_t want = std::min({ctas / rows_per_call, cap, static_cast<uint32_t>(comm::kFusedMaxCluster)});
      while (span * 2 <= want) span *= 2;
      while (ctas % span != 0) span /= 2;
    }
    chunk_vecs = (row_vecs + span - 1) / span;
    per_thread = chunk_vecs <= comm::kFusedMaxThreads ? 1 : chunk_vecs <= 2 * comm::kFusedMaxThreads ? 2 : 4;
    threads = static_cast<int>(round_up((chunk_vecs + per_thread - 1) / per_thread, 32));
    cluster = static_cast<int>(span);
  }
  const comm::LamportView view = ws.view(rank);
  for (uint64_t row = 0; row < a.rows; row += rows_per_piece) {
    const uint32_t rows = static_cast<uint32_t>(std::min<uint64_t>(rows_per_piece, a.rows - row));
    const uint64_t off = row * row_bytes;
    comm::FusedArNormParams p{};
    p.ws = view;
    p.x = static_cast<const char*>(a.x) + off;
    p.residual = static_cast<const char*>(a.residual) + off;
    p.gamma = a.gamma;
    p.residual_out = static_cast<char*>(a.residual_out) + off;
    p.normed = static_cast<char*>(a.normed) + off;
    p.rows = rows;
    p.hidden = a.hidden;
    p.chunk_vecs = chunk_vecs;
    p.eps = a.eps;
    p.type = type;
    const comm::LaunchShape shape{ws.ctas(), threads, config_.pdl};
    const cudaError_t err =
        decode ? comm::launch_fused_allreduce_rmsnorm_decode(p, shape, stream)
        : variant == FusedVariant::whole_row
            ? comm::launch_fused_allreduce_rmsnorm_whole_row(p, shape, stream)
            : comm::launch_fused_allreduce_rmsnorm_cluster(p, shape, per_thread, cluster, stream);
    if (err != cudaSuccess) cuda_check(err, "fused all-reduce+rmsnorm launch on rank " + std::to_string(rank));
  }
}

}  // namespace rs::parallel
