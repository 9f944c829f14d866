// __global__ wrapper and launcher of the fused q/kv GEMV + absorption (qkv_absorb.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "kernels/common/carveout.h"
#include "kernels/common/env_int.h"
#include "kernels/common/smem_optin.h"
#include "kernels/ops/matmul_pdl.cuh"
#include "kernels/ops/qkv_absorb.cuh"

namespace rs::cuda {

// Clusters of up to 7 blocks: one block an SM, an H200 holds only 15 clusters of 8 (its GPCs
// differ in size), and with registers capped so that two blocks could share an SM (clusters of 8
// then fit) the step was 3% slower (2026-12-01). Blocks of clusters under 8 absorb up to two
// chunks of latent columns.
constexpr int kStages = 3;  // a 96 KB ring (x after it): a split-attention block fits beside
constexpr int kChunksPerBlock = 2;
__global__ void __launch_bounds__(kern::kStreamThreads, 1)
    qkv_absorb_kernel(const __grid_constant__ QkvAbsorbParams p, const __grid_constant__ kern::GemvStreamGeom g) {
  extern __shared__ __align__(128) uint8_t qkv_smem[];
  kern::qkv_absorb_op<kStages, kChunksPerBlock>(p, g, qkv_smem);
}

namespace {
bool g_qkv_absorb = kern::env_int("RS_QKV_ABSORB", 1, 0, 1) == 1;
// A/B: the largest cluster size tried.
const int g_max_cluster = kern::env_int("RS_QKV_ABSORB_CLUSTER", kQkvAbsorbChunks - 1, kQkvAbsorbMinCluster, kQkvAbsorbChunks - 1);
int g_last_cluster = 0;
std::atomic<uint64_t> g_launches{0};
thread_local std::string g_refusal;
bool refuse(std::string why) {
  g_refusal = std::move(why);
  return false;
}

// How many clusters of `size` blocks of the launch fit the GPU at once (a cluster's blocks sit in
// one GPC, one block an SM): fewer than heads would leave a second wave of clusters behind the
// first. Asked of the driver once per (device, shared memory size, size).
int resident_clusters(int heads, int size, size_t smem) {
  struct Entry {
    int device, size;
    size_t smem;
    int clusters;
  };
  thread_local std::vector<Entry> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  for (const Entry& e : known)
    if (e.device == dev && e.size == size && e.smem == smem) return e.clusters;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(heads * size);
  cfg.blockDim = dim3(kern::kStreamThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(size);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, qkv_absorb_kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    clusters = 0;
  }
  known.push_back(Entry{dev, size, smem, clusters});
  return clusters;
}
bool launch_clusters(const QkvAbsorbParams& p, kern::GemvStreamGeom g, int sm_count, cudaStream_t stream) {
  constexpr int S = kStages;
  const int heads = p.absorb.heads;
  g.xs_offset = static_cast<uint32_t>(S) * g.stage_bytes;
  g.prewait = g.prewait < static_cast<uint32_t>(S) ? g.prewait : static_cast<uint32_t>(S);
  const size_t smem = g.xs_offset + size_t(p.gemv.w[0].cols) * 2;
  if (!kern::allow_dynamic_smem(qkv_absorb_kernel, int(smem))) return refuse("shared memory opt-in");
  // The largest cluster (most SMs streaming) of which every head's fits at once.
  int size = g_max_cluster;
  while (size >= kQkvAbsorbMinCluster && (heads * size > sm_count || resident_clusters(heads, size, smem) < heads))
    --size;
  if (size < kQkvAbsorbMinCluster) return refuse("clusters of 4 to 7 blocks do not fit every head at once");
  kern::apply_carveout(qkv_absorb_kernel, "gemv");
  const cudaError_t e = kern::launch_with_pdl(qkv_absorb_kernel, dim3(heads * size), dim3(kern::kStreamThreads),
                                              size, smem, stream, kern::matmul_pdl(), p, g);
  if (e != cudaSuccess) return refuse(std::string("launch: ") + cudaGetErrorString(e));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_last_cluster = size;
  return true;
}
}  // namespace

void set_qkv_absorb(bool on) { g_qkv_absorb = on; }
uint64_t qkv_absorb_launches() { return g_launches.load(std::memory_order_relaxed); }
int qkv_absorb_cluster_size() { return g_last_cluster; }

bool launch_qkv_absorb(QkvAbsorbParams p, int sm_count, cudaStream_t stream) {
  const MlaAbsorbQParams& a = p.absorb;
  const kern::DenseGemvParams& d = p.gemv;
  if (!g_qkv_absorb) return refuse("switched off");
  if (d.m != 1 || d.jobs != 2 || !d.norm_residual || d.out_fp32 || a.n != 1 || !a.positions || !a.kv_b || !a.out ||
      a.q != d.y[0])
    return refuse("not one token's q/kv GEMV with its norm and an absorption of its q");
  if (d.w[0].type != WeightType::BF16 || d.w[1].type != WeightType::BF16) return refuse("weights not bf16");
  // The absorption's register slices cover nope = 4 rounds of 32 rows; 8 chunks of 64 columns
  // cover kv_lora.
  if (a.nope != kAbsorbEarlyRounds * 32 || a.kv_lora != kQkvAbsorbChunks * kAbsorbCols || a.rope <= 0 ||
      a.rope % 2 != 0 || a.nope + a.rope > 256 || a.heads <= 0 || d.w[0].rows != int64_t(a.heads) * (a.nope + a.rope) ||
      d.w[1].rows < a.heads)
    return refuse("head shape");
  kern::GemvStreamGeom g;
  size_t smem = 0;
  if (!kern::gemv_stream_plan(p.gemv, g, smem) || g.pieces != 1) return refuse("streaming GEMV plan");
  return launch_clusters(p, g, sm_count, stream);
}

const std::string& qkv_absorb_refusal() { return g_refusal; }

}  // namespace rs::cuda
