#pragma once
// The batch-1 decode megakernel's program: the step's ops as a list of instructions, built once
// on the host (src/backend/cuda/mega_program.cpp) from the same params structs the per-op
// kernels take, and interpreted by one persistent kernel (decode_megakernel.cu) whose CTAs (two
// an SM) run every instruction's share of work and meet at a split grid barrier between
// instructions (grid_barrier.cuh, instruction_wait.cuh).
//
// Plain C++ shared by host and device.
#include <cstddef>
#include <cstdint>

#include "kernels/ops/activation_params.h"
#include "kernels/ops/embed_params.h"
#include "kernels/ops/kv_cache_params.h"
#include "kernels/ops/lm_head_params.h"
#include "kernels/ops/matmul_launch.h"
#include "kernels/ops/mla_absorb_params.h"
#include "kernels/ops/mla_decode_params.h"
#include "kernels/ops/moe_router_params.h"
#include "kernels/ops/rmsnorm_params.h"

namespace rs::kern::mega {

enum class Op : int32_t {
  kEmbed,         // EmbedParams, a unit per token row
  kGemv,          // GemvArgs over the CTAs (optionally with the add + RMSNorm prologue)
  kAbsorbKv,      // AbsorbKvArgs: the KV row write and q_nope . W_UK with rope, a unit per block
  kAttention,     // MlaDecodeParams: split-KV attention, a unit per (split, head group, row)
  kVUp,           // MlaVUpParams: split merge + W_UV, a unit per (head, row chunk, token chunk)
  kRouter,        // RouterArgs: add + RMSNorm, logits, selection, a unit per (expert, token chunk)
  kExpertGateUp,  // ExpertGemvParams: shared and routed gate/up rows with SwiGLU, over the CTAs
  kExpertDown,    // ExpertGemvParams: down rows of every slot, weighted, over the CTAs
  kAddRmsNorm,    // AddRmsNormParams, a unit per row
  kRmsNormRows,   // RmsNormRowsParams, a unit per row
  kSiluMul,       // SiluMulParams over every thread of every CTA
};

struct GemvArgs {
  DenseGemvParams p;  // group_end for kGemvRowsPerWarp rows a group, ks and norm_counter set
};
// Rows a warp takes per item in the megakernel's GEMVs: two rows keep twice a row's bytes in
// flight a warp (chosen when the megakernel ran one CTA of 8 warps an SM; kept at two CTAs).
constexpr int kGemvRowsPerWarp = 2;

struct AbsorbKvArgs {
  rs::cuda::MlaAbsorbQParams absorb;
  rs::cuda::KvWriteParams kv;
};

struct RouterArgs {
  rs::cuda::LmHeadParams logits;
  rs::cuda::MoeRouterParams select;
  rs::cuda::RouterNormIn norm;
  int* counters = nullptr;  // one int per 8-token chunk, zero and left zero
};

constexpr size_t kBodyBytes = 1024;

struct alignas(16) Instr {
  Op op = Op::kEmbed;
  int32_t units = 0;                 // block-style ops: units, unit u -> (u % gx, u / gx % gy, u / (gx*gy))
  int32_t gx = 1, gy = 1;
  int32_t variant = 0;               // kVUp: rows per warp
  alignas(16) unsigned char body[kBodyBytes];
};
static_assert(sizeof(Instr) % 16 == 0, "instructions are copied 16 bytes at a time");
static_assert(sizeof(GemvArgs) <= kBodyBytes && sizeof(AbsorbKvArgs) <= kBodyBytes &&
                  sizeof(RouterArgs) <= kBodyBytes && sizeof(ExpertGemvParams) <= kBodyBytes &&
                  sizeof(rs::cuda::MlaDecodeParams) <= kBodyBytes && sizeof(rs::cuda::MlaVUpParams) <= kBodyBytes,
              "an instruction's params fit its body");

// Synchronisation words, zero between launches (the last CTA out re-zeroes them).
struct SyncWords {
  unsigned barrier;     // arrivals, monotonic over one launch
  unsigned exited;      // CTAs done with the program
  unsigned norm_ticket; // the GEMV norm prologue's last-block ticket
  unsigned pad;
};

}  // namespace rs::kern::mega
