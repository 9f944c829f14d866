#pragma once
// The batch-1 decode step as one megakernel launch (kernels/mega/). ForwardPass records its
// decode step into a MegaProgram instead of launching kernels (the same params it would hand
// the per-op launchers), finish() sets the GEMV geometry and uploads the program, and
// launch() runs the step in one kernel. A step the megakernel cannot run (a shape or path it
// has no instruction for) throws MegaUnsupported while recording; the caller keeps the per-op
// kernels then.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/linear.h"
#include "common/error.h"
#include "kernels/mega/decode_program.h"

namespace rs::cuda {

struct MegaUnsupported : Error {
  explicit MegaUnsupported(const std::string& why) : Error("megakernel: " + why) {}
};

class MegaProgram {
 public:
  explicit MegaProgram(int grid);  // grid: the CTAs, one per SM

  // Recording, in step order.
  void embed(const EmbedParams& p);
  // jobs over x (or over the add + RMSNorm `norm` forms into x first), bf16 outputs.
  void gemv(const LinearJob* jobs, int n_jobs, const __nv_bfloat16* x, int m, const AddRmsNormParams* norm);
  void lm_head(const LmHeadParams& p);  // fp32 logits
  void absorb_kv(const MlaAbsorbQParams& absorb, const KvWriteParams& kv);
  void attention(const MlaDecodeParams& p);
  void v_up(const MlaVUpParams& p);
  void router(const LmHeadParams& logits, const MoeRouterParams& select, int* counters, const RouterNormIn& norm);
  void experts(const kern::ExpertGemvParams& p);  // gate_up and down
  void add_rmsnorm(const AddRmsNormParams& p);
  void rmsnorm_rows(const RmsNormRowsParams& p);
  void silu_mul(const SiluMulParams& p);

  // Done recording: the GEMV geometry for the grid, and the upload (synchronous: not while
  // capturing). profile: per-instruction timestamps (profile_table()).
  void finish(bool profile, int kv_dim, int router_experts, cudaStream_t stream);
  void launch(cudaStream_t stream) const;

  int instructions() const { return static_cast<int>(prog_.size()); }
  // The recorded instructions (recording needs no GPU: the device side is made by finish()).
  const std::vector<kern::mega::Instr>& program() const { return prog_; }
  int grid() const { return grid_; }
  // With finish(profile = true): the last launch's time per kind of instruction (its CTAs' work up
  // to the last arrival, then the barrier), as a table; "" otherwise.
  std::string profile_table() const;

 private:
  kern::mega::Instr& add(kern::mega::Op op, int units = 0, int gx = 1, int gy = 1);
  bool take_norm_forming(const void* x, int m, int64_t cols, AddRmsNormParams* out);
  template <class T>
  void set_body(kern::mega::Instr& in, const T& body);

  std::vector<kern::mega::Instr> prog_;
  DeviceBuffer dev_prog_, sync_, stamps_;
  int grid_ = 0;
  size_t smem_ = 0;
};

}  // namespace rs::cuda
