// Thin __global__ wrappers over the comm device ops: PDL wait, buffer rotation, the op, advance.
#include <algorithm>

#include "kernels/comm/comm_launch.h"
#include "kernels/comm/fused_allreduce_rmsnorm.cuh"
#include "kernels/comm/lamport_oneshot.cuh"
#include "kernels/comm/tray_first.cuh"
#include "kernels/comm/two_shot.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/matmul_pdl.cuh"

namespace rs::comm {
namespace {

constexpr int kCommMaxThreads = 512;  // 128 registers a thread: no spills in any op

template <ElemType kType>
__global__ void __launch_bounds__(kCommMaxThreads) lamport_oneshot_kernel(const __grid_constant__ OneShotParams p) {
  using E = Elem<kType>;
  __shared__ uint32_t s_buffer;
  pdl::wait();
  const uint32_t buffer = lamport_begin(p.ws, &s_buffer);
  pdl::launch_dependents();
  lamport_oneshot_op<E>(p, buffer, blockIdx.x, gridDim.x);
  lamport_end(p.ws, buffer, oneshot_vecs(p.count, E::kLanes));
}

template <ElemType kType>
__global__ void __launch_bounds__(kCommMaxThreads) two_shot_kernel(const __grid_constant__ TwoShotParams p) {
  using E = Elem<kType>;
  __shared__ uint32_t s_buffer;
  pdl::wait();
  const uint32_t buffer = lamport_begin(p.ws, &s_buffer);
  pdl::launch_dependents();
  two_shot_op<E>(p, buffer, blockIdx.x, gridDim.x);
  lamport_end(p.ws, buffer, two_shot_chunk_vecs(p.count, E::kLanes, p.ws.nranks));
}

template <ElemType kType>
__global__ void __launch_bounds__(kCommMaxThreads) tray_first_kernel(const __grid_constant__ TrayFirstParams p) {
  using E = Elem<kType>;
  constexpr uint32_t kPV = E::kLanes / Elem<ElemType::fp32>::kLanes;
  __shared__ uint32_t s_buffer;
  pdl::wait();
  const uint32_t buffer = lamport_begin(p.tray, &s_buffer);  // the rotation lives in p.tray's state
  pdl::launch_dependents();
  tray_first_op<E>(p, buffer, blockIdx.x, gridDim.x);
  const uint32_t nvec = oneshot_vecs(p.count, E::kLanes);
  lamport_end(p.tray, buffer, p.tray_size > 1 ? nvec : 0u);
  if (blockIdx.x == 0 && threadIdx.x == 0) p.across.state->dirty_vecs[buffer] = p.trays > 1 ? nvec * kPV : 0u;
}

template <ElemType kType, int kVecs>
__global__ void __launch_bounds__(kCommMaxThreads) fused_allreduce_rmsnorm_whole_row_kernel(const __grid_constant__ FusedArNormParams p) {
  using E = Elem<kType>;
  __shared__ uint32_t s_buffer;
  const FusedGammaWholeRow gamma = fused_load_gamma_whole_row<E, kVecs>(p);  // prologue: weights only
  pdl::wait();
  const uint32_t buffer = lamport_begin(p.ws, &s_buffer);
  pdl::launch_dependents();
  fused_allreduce_rmsnorm_whole_row_op<E, kVecs>(p, gamma, buffer, blockIdx.x, gridDim.x);
  lamport_end(p.ws, buffer, p.rows * fused_row_vecs(p.hidden, E::kLanes));
}

template <ElemType kType, int kVecs>
__global__ void __launch_bounds__(kCommMaxThreads) fused_allreduce_rmsnorm_cluster_kernel(const __grid_constant__ FusedArNormParams p) {
  using E = Elem<kType>;
  __shared__ uint32_t s_buffer;
  const FusedGamma<kVecs> gamma = fused_load_gamma_cluster<E, kVecs>(p, blockIdx.x, gridDim.x);  // prologue: weights only
  pdl::wait();
  const uint32_t buffer = lamport_begin(p.ws, &s_buffer);
  pdl::launch_dependents();
  fused_allreduce_rmsnorm_cluster_op<E, kVecs>(p, gamma, buffer, blockIdx.x, gridDim.x);
  lamport_end(p.ws, buffer, p.rows * fused_row_vecs(p.hidden, E::kLanes));
}

// Decode-sized calls: every CTA computes the row's norm itself (fused_allreduce_rmsnorm_decode_op).
template <ElemType kType, int kVecs>
__global__ void __launch_bounds__(kCommMaxThreads) fused_allreduce_rmsnorm_decode_kernel(const __grid_constant__ FusedArNormParams p) {
  using E = Elem<kType>;
  const FusedDecodeGamma<E, kVecs> gamma = fused_decode_load_gamma<E, kVecs>(p, blockIdx.x);  // prologue: weights only
  pdl::wait();
  pdl::launch_dependents();
  fused_allreduce_rmsnorm_decode_op<E, kVecs>(p, gamma, blockIdx.x, gridDim.x);
}

__global__ void arm_kernel(uint4* dst, size_t vecs, uint32_t word) {
  const uint4 s = make_uint4(word, word, word, word);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < vecs;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = s;
}

dim3 grid_of(LaunchShape s) { return dim3(static_cast<unsigned>(s.ctas)); }
dim3 block_of(LaunchShape s) { return dim3(static_cast<unsigned>(s.threads)); }

}  // namespace

cudaError_t launch_lamport_oneshot(const OneShotParams& p, LaunchShape s, cudaStream_t stream) {
  auto* k = p.type == ElemType::bf16 ? &lamport_oneshot_kernel<ElemType::bf16>
                                     : &lamport_oneshot_kernel<ElemType::fp32>;
  return kern::launch_with_pdl(k, grid_of(s), block_of(s), 1, 0, stream, s.pdl, p);
}

cudaError_t launch_two_shot(const TwoShotParams& p, LaunchShape s, cudaStream_t stream) {
  auto* k = p.type == ElemType::bf16 ? &two_shot_kernel<ElemType::bf16>
                                     : &two_shot_kernel<ElemType::fp32>;
  return kern::launch_with_pdl(k, grid_of(s), block_of(s), 1, 0, stream, s.pdl, p);
}

cudaError_t launch_tray_first(const TrayFirstParams& p, LaunchShape s, cudaStream_t stream) {
  auto* k = p.type == ElemType::bf16 ? &tray_first_kernel<ElemType::bf16> : &tray_first_kernel<ElemType::fp32>;
  return kern::launch_with_pdl(k, grid_of(s), block_of(s), 1, 0, stream, s.pdl, p);
}

cudaError_t launch_fused_allreduce_rmsnorm_whole_row(const FusedArNormParams& p, LaunchShape s,
                                                     cudaStream_t stream) {
  // Vectors of a row per thread: the fewest that fit a row in kCommMaxThreads threads.
  const uint32_t row_vecs = p.hidden * (p.type == ElemType::bf16 ? 2u : 4u) / kVecBytes;
  const uint32_t per_thread = (row_vecs + s.threads - 1) / s.threads;
  void (*k)(const FusedArNormParams);
  const bool bf16 = p.type == ElemType::bf16;
  switch (per_thread) {
    case 1: k = bf16 ? &fused_allreduce_rmsnorm_whole_row_kernel<ElemType::bf16, 1> : &fused_allreduce_rmsnorm_whole_row_kernel<ElemType::fp32, 1>; break;
    case 2: k = bf16 ? &fused_allreduce_rmsnorm_whole_row_kernel<ElemType::bf16, 2> : &fused_allreduce_rmsnorm_whole_row_kernel<ElemType::fp32, 2>; break;
    case 3:
    case 4: k = bf16 ? &fused_allreduce_rmsnorm_whole_row_kernel<ElemType::bf16, 4> : &fused_allreduce_rmsnorm_whole_row_kernel<ElemType::fp32, 4>; break;
    default: return cudaErrorInvalidConfiguration;  // the host checks hidden first
  }
  return kern::launch_with_pdl(k, grid_of(s), block_of(s), 1, 0, stream, s.pdl, p);
}

cudaError_t launch_fused_allreduce_rmsnorm_cluster(const FusedArNormParams& p, LaunchShape s, int vecs_per_thread,
                                                   int cluster, cudaStream_t stream) {
  const uint32_t row_vecs = p.hidden * (p.type == ElemType::bf16 ? 2u : 4u) / kVecBytes;
  const uint32_t chunks = p.chunk_vecs ? (row_vecs + p.chunk_vecs - 1) / p.chunk_vecs : 0u;
  if (s.threads < 32 || s.threads > kCommMaxThreads || s.threads % 32 != 0 || chunks == 0 ||
      p.chunk_vecs > static_cast<uint32_t>(s.threads * vecs_per_thread) || cluster < 1 ||
      cluster > kFusedMaxCluster || (cluster & (cluster - 1)) != 0 || chunks > static_cast<uint32_t>(cluster) ||
      s.ctas % cluster != 0)
    return cudaErrorInvalidConfiguration;  // the host picks the split (Comm::all_reduce_residual_rmsnorm)
  const bool bf16 = p.type == ElemType::bf16;
  void (*k)(const FusedArNormParams);
  switch (vecs_per_thread) {
    case 1: k = bf16 ? &fused_allreduce_rmsnorm_cluster_kernel<ElemType::bf16, 1> : &fused_allreduce_rmsnorm_cluster_kernel<ElemType::fp32, 1>; break;
    case 2: k = bf16 ? &fused_allreduce_rmsnorm_cluster_kernel<ElemType::bf16, 2> : &fused_allreduce_rmsnorm_cluster_kernel<ElemType::fp32, 2>; break;
    case 4: k = bf16 ? &fused_allreduce_rmsnorm_cluster_kernel<ElemType::bf16, 4> : &fused_allreduce_rmsnorm_cluster_kernel<ElemType::fp32, 4>; break;
    default: return cudaErrorInvalidConfiguration;
  }
  return kern::launch_with_pdl(k, grid_of(s), block_of(s), cluster, 0, stream, s.pdl, p);
}

cudaError_t launch_fused_allreduce_rmsnorm_decode(const FusedArNormParams& p, LaunchShape s, cudaStream_t stream) {
  const uint32_t row_vecs = p.hidden * (p.type == ElemType::bf16 ? 2u : 4u) / kVecBytes;
  if (s.threads < 32 || s.threads > kCommMaxThreads || s.threads % 32 != 0 || p.chunk_vecs == 0 || p.chunk_vecs % 32 != 0)
    return cudaErrorInvalidConfiguration;  // the host picks the shape (Comm::all_reduce_residual_rmsnorm)
  const bool bf16 = p.type == ElemType::bf16;
  void (*k)(const FusedArNormParams);
  switch ((row_vecs + s.threads - 1) / s.threads) {  // vectors a thread
    case 1: k = bf16 ? &fused_allreduce_rmsnorm_decode_kernel<ElemType::bf16, 1> : &fused_allreduce_rmsnorm_decode_kernel<ElemType::fp32, 1>; break;
    case 2: k = bf16 ? &fused_allreduce_rmsnorm_decode_kernel<ElemType::bf16, 2> : &fused_allreduce_rmsnorm_decode_kernel<ElemType::fp32, 2>; break;
    case 3:
    case 4: k = bf16 ? &fused_allreduce_rmsnorm_decode_kernel<ElemType::bf16, 4> : &fused_allreduce_rmsnorm_decode_kernel<ElemType::fp32, 4>; break;
    default: return cudaErrorInvalidConfiguration;
  }
  return kern::launch_with_pdl(k, grid_of(s), block_of(s), 1, 0, stream, s.pdl, p);
}

cudaError_t preload_comm_kernels() {
  const void* kernels[] = {
      reinterpret_cast<const void*>(&lamport_oneshot_kernel<ElemType::bf16>),
      reinterpret_cast<const void*>(&lamport_oneshot_kernel<ElemType::fp32>),
      reinterpret_cast<const void*>(&two_shot_kernel<ElemType::bf16>),
      reinterpret_cast<const void*>(&two_shot_kernel<ElemType::fp32>),
      reinterpret_cast<const void*>(&tray_first_kernel<ElemType::bf16>),
      reinterpret_cast<const void*>(&tray_first_kernel<ElemType::fp32>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_cluster_kernel<ElemType::bf16, 1>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_cluster_kernel<ElemType::bf16, 2>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_cluster_kernel<ElemType::bf16, 4>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_cluster_kernel<ElemType::fp32, 1>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_cluster_kernel<ElemType::fp32, 2>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_cluster_kernel<ElemType::fp32, 4>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_whole_row_kernel<ElemType::bf16, 1>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_whole_row_kernel<ElemType::bf16, 2>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_whole_row_kernel<ElemType::bf16, 4>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_whole_row_kernel<ElemType::fp32, 1>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_whole_row_kernel<ElemType::fp32, 2>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_whole_row_kernel<ElemType::fp32, 4>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_decode_kernel<ElemType::bf16, 1>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_decode_kernel<ElemType::bf16, 2>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_decode_kernel<ElemType::bf16, 4>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_decode_kernel<ElemType::fp32, 1>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_decode_kernel<ElemType::fp32, 2>),
      reinterpret_cast<const void*>(&fused_allreduce_rmsnorm_decode_kernel<ElemType::fp32, 4>),
      reinterpret_cast<const void*>(&arm_kernel),
  };
  for (const void* k : kernels) {
    cudaFuncAttributes attr;
    const cudaError_t err = cudaFuncGetAttributes(&attr, k);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t launch_arm(uint4* dst, size_t vecs, ElemType type, cudaStream_t stream) {
  if (vecs == 0) return cudaSuccess;
  const uint32_t word = type == ElemType::bf16 ? Elem<ElemType::bf16>::kSentinelWord
                                               : Elem<ElemType::fp32>::kSentinelWord;
  const size_t blocks = std::min<size_t>((vecs + 255) / 256, 1024);
  arm_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(dst, vecs, word);
  return cudaGetLastError();
}

}  // namespace rs::comm
