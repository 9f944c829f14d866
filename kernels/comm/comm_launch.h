#pragma once
// Host entry points of the comm kernels (kernels/comm/comm_kernels.cu). Plain C++ callers
// (src/parallel/) include this; the device ops stay in the .cuh files.
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/comm/comm_layout.h"

namespace rs::comm {

struct LaunchShape {
  int ctas;      // must equal the workspace's fixed grid (LamportState::next_buffer entries)
  int threads;
  bool pdl;      // launch with the programmatic stream serialization attribute
};

cudaError_t launch_lamport_oneshot(const OneShotParams& p, LaunchShape shape, cudaStream_t stream);
cudaError_t launch_two_shot(const TwoShotParams& p, LaunchShape shape, cudaStream_t stream);
// shape.ctas must equal the grid of both of p's workspaces.
cudaError_t launch_tray_first(const TrayFirstParams& p, LaunchShape shape, cudaStream_t stream);
// One CTA per row (rows dealt round-robin); shape.threads x (1, 2 or 4) vectors hold a row.
cudaError_t launch_fused_allreduce_rmsnorm_whole_row(const FusedArNormParams& p, LaunchShape shape,
                                                     cudaStream_t stream);
// A row split over a thread block cluster of `cluster` CTAs (a power of two <= 8 dividing
// shape.ctas), chunks of p.chunk_vecs <= shape.threads x vecs_per_thread (1, 2 or 4) vectors.
cudaError_t launch_fused_allreduce_rmsnorm_cluster(const FusedArNormParams& p, LaunchShape shape, int vecs_per_thread,
                                                   int cluster, cudaStream_t stream);
// Decode-sized calls (a few rows): every CTA computes each row's norm from the whole row and
// writes its chunk of p.chunk_vecs vectors (a multiple of 32); shape.threads (<= 512) x (1, 2 or
// 4) vectors hold a row.
cudaError_t launch_fused_allreduce_rmsnorm_decode(const FusedArNormParams& p, LaunchShape shape, cudaStream_t stream);
// Loads every comm kernel into the current device's context now. With lazy module loading (the
// CUDA 12+ default) a kernel's first launch may wait for the whole GPU; a rank that first launches
// while a peer rank on the same GPU already spins in a collective would then deadlock.
cudaError_t preload_comm_kernels();

// Fills `vecs` 16-byte vectors at `dst` with the element type's -0.0 sentinel.
cudaError_t launch_arm(uint4* dst, size_t vecs, ElemType type, cudaStream_t stream);

}  // namespace rs::comm
