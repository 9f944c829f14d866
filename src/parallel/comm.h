#pragma once
// The tensor-parallel communicator: every all-reduce algorithm over one set of in-process ranks,
// and the dispatcher that picks one per message size.
//   lamport_oneshot  one NVLink hop, (N-1) x message sent per rank: small messages
//   two_shot         reduce-scatter + all-gather through Lamport buffers: large messages
//   tray_first       one-shot inside each tray, then one-shot across trays (trays > 1): two hops,
//                    (T-1) partials cross between trays instead of (T-1) x R inputs
//   nccl             libnccl.so.2 at run time: reference, and fallback for the largest sizes
// and the fused all-reduce + residual add + RMSNorm that ends each tensor-parallel layer.
// Built once, from one thread; then each rank's thread calls the per-rank entry points with a
// stream on its own GPU. Every call is collective: all ranks make the same sequence of calls with
// the same sizes (a rank that skips one makes its peers time out with a diagnostic).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/comm_layout.h"
#include "model/dtype.h"
#include "parallel/lamport_workspace.h"
#include "parallel/nccl_loader.h"
#include "parallel/topology.h"

namespace rs::parallel {

enum class AllReduceAlgo { automatic, lamport_oneshot, two_shot, nccl, tray_first };
const char* algo_name(AllReduceAlgo a);

// Which fused kernel: automatic picks whole_row (one CTA per row) for rows of up to 1024
// 16-byte vectors (7168 bf16) and cluster (a row split over a thread block cluster, the sum of
// squares combined through DSMEM) for wider rows, as measured (docs/perf/comm.md).
enum class FusedVariant { automatic, whole_row, cluster };
const char* fused_variant_name(FusedVariant v);

// Size thresholds, from `rackserve bench allreduce` on 2x H200 (docs/perf/comm.md).
struct DispatchTable {
  // With trays > 1, messages of <= this go tray-first (before the rules below). 0: never, the
  // measured choice on 2x H200, where the two simulated trays share one NVLink domain and the
  // second hop only adds latency (docs/perf/comm.md); re-measure on hardware with real trays.
  uint64_t tray_first_max_bytes = 0;
  uint64_t oneshot_max_bytes = 512ull << 10;   // <= this: Lamport one-shot
  uint64_t two_shot_max_bytes = ~0ull;         // <= this: two-shot; above: NCCL when available
};

struct CommConfig {
  uint64_t oneshot_capacity_bytes = 1ull << 20;     // larger messages go in pieces of this
  uint64_t fused_capacity_bytes = 1ull << 20;       // rows per piece = this / row bytes
  uint64_t two_shot_capacity_bytes = 16ull << 20;   // two-shot piece
  int oneshot_threads = 256;
  int oneshot_max_ctas = 64;
  int fused_max_ctas = 32;
  // Decode-sized fused calls (rows <= fused_decode_rows, rows of up to 1024 vectors) run the decode
  // kernel on a second workspace with this small grid: every CTA computes each row's norm from the
  // whole row and writes 1/ctas of it (kernels/comm/fused_allreduce_rmsnorm.cuh). Measured, one
  // 7168 bf16 row (docs/perf/comm.md, 2026-11-30 06:20 and 06:27 UTC, chained graph): 3.73 us on 1
  // CTA, 3.30-3.34 on 2, 3.64 on 3, 3.62-3.69 on 4, 3.77-3.79 on 8 (the previous one-CTA-a-row
  // kernel on 4 CTAs: 3.59-3.66). Two rows on it: 5.26 us against 3.97-4.04 on the 32-CTA grid,
  // hence one row.
  int fused_decode_ctas = 2;
  uint32_t fused_decode_rows = 1;
  // Decode kernel: threads a CTA at most (a row of R vectors takes ceil(R / this) vectors a thread,
  // at most 4). 1024 threads x 1 vector measured 5.13 us (64 registers, spills): not offered.
  int fused_decode_threads = 512;
  int fused_threads = 128;                          // cluster: least vectors per row chunk
  FusedVariant fused_variant = FusedVariant::automatic;
  int fused_span = 0;                               // cluster: CTAs per row; 0: chosen per call (rows, grid)
  int tray_first_threads = 256;
  int tray_first_max_ctas = 64;
  int two_shot_threads = 512;
  int two_shot_max_ctas = 0;                        // 0: every SM the rank may use
  bool pdl = true;                                  // launch with programmatic stream serialization
  bool enable_nccl = true;
  uint64_t timeout_ns = 10ull * 1000 * 1000 * 1000; // spin-wait bound before diagnostic + trap
  DispatchTable dispatch;
};

struct FusedArNormArgs {
  const void* x = nullptr;          // [rows, hidden] this rank's partial
  const void* residual = nullptr;   // [rows, hidden]
  const void* gamma = nullptr;      // [hidden]
  void* residual_out = nullptr;     // [rows, hidden]; may alias residual
  void* normed = nullptr;           // [rows, hidden]
  uint32_t rows = 0;
  uint32_t hidden = 0;
  float eps = 1e-6f;
  DType dtype = DType::BF16;
};

class Comm {
 public:
  Comm(const Topology& topo, const CommConfig& config = {});
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  const Topology& topology() const { return topo_; }
  const CommConfig& config() const { return config_; }
  int size() const { return topo_.size(); }

  // out = sum over ranks of in (count elements of BF16 or F32; in/out 16-byte aligned; in == out
  // allowed). Reduced in rank order on every rank, so all ranks' outputs match bit for bit.
  void all_reduce(int rank, const void* in, void* out, size_t count, DType dtype,
                  cudaStream_t stream, AllReduceAlgo algo = AllReduceAlgo::automatic) const;

  void all_reduce_residual_rmsnorm(int rank, const FusedArNormArgs& args, cudaStream_t stream) const;

  // What `automatic` runs for a message of `bytes`.
  AllReduceAlgo choose(uint64_t bytes) const;

  bool has_nccl() const { return nccl_ != nullptr; }
  const std::string& nccl_status() const { return nccl_status_; }  // version, or why not

 private:
  const LamportWorkspace& workspace(const std::vector<std::unique_ptr<LamportWorkspace>>& set,
                                    DType dtype) const;
  void check_rank(int rank) const;
  void tray_first(int rank, const void* in, void* out, size_t count, DType dtype, cudaStream_t stream) const;

  Topology topo_;
  CommConfig config_;
  // Indexed by comm::ElemType: bf16, fp32.
  std::vector<std::unique_ptr<LamportWorkspace>> oneshot_, fused_, fused_decode_, two_shot_;
  // Tray-first: the in-tray slots (element type) and the across-tray slots (fp32 partials).
  std::vector<std::unique_ptr<LamportWorkspace>> tray_, across_;
  std::unique_ptr<NcclComms> nccl_;
  std::string nccl_status_;
};

}  // namespace rs::parallel
