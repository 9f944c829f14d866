#pragma once
// Measures the comm layer's all-reduces on in-process ranks: per message size, per variant
// (Lamport one-shot, fused AR + residual + RMSNorm, two-shot, tray-first, NCCL), median
// microseconds per call inside CUDA graphs and launched eagerly, all in the same run, in two
// modes:
//   chained      call i+1 reads call i's output (ping-pong buffers; the fused op takes the
//                previous call's normed output as its input and its residual_out as its
//                residual), as in a decode layer, where every all-reduce sits on the dependency
//                chain: a latency.
//   independent  every call reads the same input: nothing in the data orders the calls, so the
//                figure may be a throughput of overlapped calls rather than a latency.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "parallel/comm.h"

namespace rs::bench {

enum class ArVariant { oneshot, fused, two_shot, tray_first, nccl, automatic };
constexpr ArVariant kArVariants[] = {ArVariant::oneshot, ArVariant::fused,  ArVariant::two_shot,
                                     ArVariant::tray_first, ArVariant::nccl, ArVariant::automatic};
constexpr int kArVariantCount = 6;
const char* variant_name(ArVariant v);

struct ArTiming {
  std::optional<double> graph_us;  // median per call, independent calls; empty when the variant cannot run
  std::optional<double> eager_us;
  std::optional<double> chain_graph_us;  // median per call, each call reading the previous one's output
  std::optional<double> chain_eager_us;
  std::string note;                // why empty
};

struct ArSizeResult {
  uint64_t bytes = 0;
  uint64_t count = 0;
  uint32_t fused_rows = 0, fused_hidden = 0;
  ArTiming timing[kArVariantCount];  // indexed by ArVariant
  std::string auto_choice;
};

struct ArBenchOptions {
  std::vector<uint64_t> sizes;   // bytes
  DType dtype = DType::BF16;
  int reps = 15;                 // timed repetitions; the median is reported
  bool fused_in_place = false;   // fused op: residual_out = residual (one buffer, updated in place)
};

// Runs every variant at every size on `comm`'s ranks (one host thread each).
std::vector<ArSizeResult> run_allreduce_bench(const parallel::Comm& comm, const ArBenchOptions& opt);

// The fused variant's shape for a message of `count` elements: rows x hidden == count, hidden a
// DeepSeek-like width when it divides, else one row; {0,0} when no shape fits.
std::pair<uint32_t, uint32_t> fused_shape(uint64_t count, DType dtype);

}  // namespace rs::bench
