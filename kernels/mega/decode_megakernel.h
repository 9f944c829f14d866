#pragma once
// Host side of the batch-1 decode megakernel (decode_megakernel.cu): the launch and what it
// needs of the device. The program is built by src/backend/cuda/mega_program.cpp.
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/mega/decode_program.h"

namespace rs::kern::mega {

constexpr int kThreads = 256;  // every op it runs is written for blocks of 8 warps
// Two CTAs an SM: 16 warps, as the per-op GEMV and expert kernels run; with one (8 warps) the
// step was issue-bound (2 warps a scheduler could not hide ~12 cycles a dependent instruction;
// ncu on an H200, 2026-11-30: 555M instructions at 12.5 cycles each, 4.4 ms a step).
constexpr int kCtasPerSm = 2;

// Dynamic shared memory the program's ops need beyond their static arrays: the split attention's
// tiles (kv_dim wide) and the router's per-warp scratch (experts).
size_t dynamic_smem_bytes(int kv_dim, int router_experts);

// CTAs of the kernel one SM holds with that much dynamic shared memory (0: it does not fit).
int resident_ctas_per_sm(size_t dynamic_smem);

// One launch runs the whole program: grid CTAs (at most resident_ctas_per_sm an SM, all resident: a cooperative
// launch, so the grid barrier cannot wait on a CTA that never started). sync: zeroed SyncWords,
// left zeroed. stamps (profiling, nullptr off): n_instr + 1 zeroed words; [0] the start, [i + 1]
// the last CTA's arrival after instruction i (global timer, ns).
void launch_decode_megakernel(const Instr* program, int n_instr, SyncWords* sync, uint64_t* stamps, int grid,
                              size_t dynamic_smem, cudaStream_t stream);

}  // namespace rs::kern::mega
