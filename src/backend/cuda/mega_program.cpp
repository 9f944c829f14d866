#include "backend/cuda/mega_program.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernels/mega/decode_megakernel.h"

namespace rs::cuda {

using kern::mega::Instr;
using kern::mega::Op;

namespace {
// The GEMV's add + RMSNorm prologue from the norm's params (gemv.cuh), after checking that the
// prologue takes it (linear.h) and that it forms x (out == x) for the m rows of the GEMV's width.
void set_norm_prologue(kern::DenseGemvParams& p, const AddRmsNormParams& norm) {
  if (norm.out != p.x || norm.n != p.m || norm.hidden != p.w[0].cols || !gemv_norm_prologue_ok(norm, p.m))
    throw MegaUnsupported("an add + RMSNorm the GEMV prologue cannot take (hidden " + std::to_string(norm.hidden) + ")");
  set_gemv_norm_prologue(p, norm);
}
}  // namespace

// The add + RMSNorm recorded last, if it forms x for m rows of width `cols`: removed from the
// program and copied to `out` (it becomes the next GEMV's prologue).
bool MegaProgram::take_norm_forming(const void* x, int m, int64_t cols, AddRmsNormParams* out) {
  if (prog_.empty() || prog_.back().op != Op::kAddRmsNorm) return false;
  std::memcpy(out, prog_.back().body, sizeof(*out));
  if (out->out != x || out->n != m || out->hidden != cols) return false;
  prog_.pop_back();
  return true;
}

MegaProgram::MegaProgram(int grid) : grid_(grid) {
  if (grid < 1) throw MegaUnsupported("no SMs to run on");
}

Instr& MegaProgram::add(Op op, int units, int gx, int gy) {
  prog_.emplace_back();
  Instr& in = prog_.back();
  in.op = op;
  in.units = units;
  in.gx = std::max(gx, 1);
  in.gy = std::max(gy, 1);
  return in;
}

template <class T>
void MegaProgram::set_body(Instr& in, const T& body) {
  static_assert(sizeof(T) <= kern::mega::kBodyBytes, "params fit the instruction body");
  std::memset(in.body, 0, sizeof(in.body));
  std::memcpy(in.body, &body, sizeof(T));
}

void MegaProgram::embed(const EmbedParams& p) {
  if (p.hidden % 8 != 0) throw MegaUnsupported("embedding width " + std::to_string(p.hidden) + " is not a multiple of 8");
  set_body(add(Op::kEmbed, p.n), p);
}

void MegaProgram::gemv(const LinearJob* jobs, int n_jobs, const __nv_bfloat16* x, int m, const AddRmsNormParams* norm) {
  if (m != 1) throw MegaUnsupported("GEMV over " + std::to_string(m) + " rows (one-token steps only)");
  if (n_jobs < 1) return;
  for (int i = 0; i < n_jobs; ++i) {
    const DeviceMatrix& w = jobs[i].w;
    if (!gemv_vector_path_ok(w, x) || w.type != jobs[0].w.type || w.cols != jobs[0].w.cols || !jobs[i].y)
      throw MegaUnsupported("a " + std::to_string(w.rows) + "x" + std::to_string(w.cols) +
                            " weight the 16-byte GEMV path does not take with its group");
  }
  // Peepholes: a GEMV over the same x right after another joins it (gate and up of a dense MLP),
  // and an add + RMSNorm producing x right before becomes the GEMV's prologue.
  if (!norm && !prog_.empty() && prog_.back().op == Op::kGemv) {
    auto& a = *reinterpret_cast<kern::mega::GemvArgs*>(prog_.back().body);
    if (a.p.x == x && !a.p.out_fp32 && a.p.jobs + n_jobs <= kern::kMaxGemvJobs && a.p.w[0].type == jobs[0].w.type &&
        a.p.w[0].cols == jobs[0].w.cols) {
      for (int i = 0; i < n_jobs; ++i) {
        a.p.w[a.p.jobs] = jobs[i].w;
        a.p.y[a.p.jobs] = jobs[i].y;
        ++a.p.jobs;
      }
      return;
    }
  }
  AddRmsNormParams folded;
  if (!norm && take_norm_forming(x, m, jobs[0].w.cols, &folded)) norm = &folded;
  kern::mega::GemvArgs a;
  for (int i = 0; i < n_jobs; ++i) {
    a.p.w[i] = jobs[i].w;
    a.p.y[i] = jobs[i].y;
  }
  a.p.jobs = n_jobs;
  a.p.x = x;
  a.p.m = m;
  if (norm) set_norm_prologue(a.p, *norm);
  set_body(add(Op::kGemv), a);
}

void MegaProgram::lm_head(const LmHeadParams& p) {
  if (p.n != 1) throw MegaUnsupported("lm_head over " + std::to_string(p.n) + " rows");
  DeviceMatrix w;
  w.type = WeightType::BF16;
  w.rows = p.vocab;
  w.cols = p.hidden;
  w.data = p.w;
  if (!gemv_vector_path_ok(w, p.x)) throw MegaUnsupported("an lm_head the 16-byte GEMV path does not take");
  kern::mega::GemvArgs a;
  a.p.w[0] = w;
  a.p.y[0] = p.logits;
  a.p.jobs = 1;
  a.p.x = p.x;
  a.p.x_rows = p.rows;
  a.p.m = 1;
  a.p.out_fp32 = true;
  // A preceding final norm becomes the prologue, as in gemv() (rows of x selected by x_rows would
  // not be the rows the prologue forms).
  AddRmsNormParams folded;
  if (!p.rows && take_norm_forming(p.x, 1, p.hidden, &folded)) set_norm_prologue(a.p, folded);
  set_body(add(Op::kGemv), a);
}

void MegaProgram::absorb_kv(const MlaAbsorbQParams& absorb, const KvWriteParams& kv) {
  if (absorb.kv_lora % kAbsorbCols != 0) throw MegaUnsupported("kv_lora_rank not a multiple of 64");
  const int units = mla_absorb_q_kv_write_blocks(absorb, kv);
  kern::mega::AbsorbKvArgs a;
  a.absorb = absorb;
  a.kv = kv;
  set_body(add(Op::kAbsorbKv, units), a);
}

void MegaProgram::attention(const MlaDecodeParams& p) {
  if (p.out) throw MegaUnsupported("split attention with its own combine pass");
  if (p.kv_lora % 64 != 0) throw MegaUnsupported("kv_lora_rank not a multiple of 64 (8-warp attention blocks)");
  const int head_groups = (p.heads + 15) / 16;
  set_body(add(Op::kAttention, p.splits * head_groups * p.batch, p.splits, head_groups), p);
}

void MegaProgram::v_up(const MlaVUpParams& p_in) {
  // The launcher's rule (launch_mla_v_up), with the megakernel's CTAs as the wave.
  MlaVUpParams p = p_in;
  const int chunks = (p.n + kAbsorbTokens - 1) / kAbsorbTokens;
  p.rows_per_warp = mla_v_up_rows_per_warp(p, grid_);
  const int row_chunks = (p.vdim + kVUpWarps * p.rows_per_warp - 1) / (kVUpWarps * p.rows_per_warp);
  Instr& in = add(Op::kVUp, p.heads * row_chunks * chunks, p.heads, row_chunks);
  in.variant = p.rows_per_warp;
  set_body(in, p);
}

void MegaProgram::router(const LmHeadParams& logits, const MoeRouterParams& select, int* counters,
                         const RouterNormIn& norm) {
  if (!moe_router_fused_supported(logits, select) || !counters)
    throw MegaUnsupported("a router the fused router kernel does not take");
  kern::mega::RouterArgs a;
  a.logits = logits;
  a.select = select;
  a.norm = norm;
  a.counters = counters;
  set_body(add(Op::kRouter, select.experts * ((select.n + 7) / 8), select.experts), a);
}

void MegaProgram::experts(const kern::ExpertGemvParams& p) {
  if (p.m != 1) throw MegaUnsupported("experts over " + std::to_string(p.m) + " tokens");
  set_body(add(Op::kExpertGateUp), p);
  set_body(add(Op::kExpertDown), p);
}

void MegaProgram::add_rmsnorm(const AddRmsNormParams& p) { set_body(add(Op::kAddRmsNorm, p.n), p); }

void MegaProgram::rmsnorm_rows(const RmsNormRowsParams& p) { set_body(add(Op::kRmsNormRows, p.n), p); }

void MegaProgram::silu_mul(const SiluMulParams& p) { set_body(add(Op::kSiluMul), p); }

void MegaProgram::finish(bool profile, int kv_dim, int router_experts, cudaStream_t stream) {
  if (prog_.empty()) throw MegaUnsupported("an empty step");
  smem_ = kern::mega::dynamic_smem_bytes(kv_dim, router_experts);
  const int per_sm = kern::mega::resident_ctas_per_sm(smem_);
  if (per_sm < kern::mega::kCtasPerSm)
    throw MegaUnsupported(std::to_string(kern::mega::kCtasPerSm) + " CTAs do not fit an SM with " +
                          std::to_string(smem_ >> 10) + " KB of dynamic shared memory each");
  const int grid = grid_;
  sync_.reset(sizeof(kern::mega::SyncWords), "megakernel sync words");
  RS_CUDA(cudaMemset(sync_.get(), 0, sync_.bytes()));
  auto* sync = sync_.get<kern::mega::SyncWords>();
  // GEMV geometry: the per-op launcher's split, with the megakernel's CTAs as the resident blocks.
  for (Instr& in : prog_) {
    if (in.op != Op::kGemv) continue;
    auto& p = reinterpret_cast<kern::mega::GemvArgs*>(in.body)->p;
    kern::gemv_dense_geometry(p, kern::mega::kGemvRowsPerWarp, grid);
    if (p.norm_residual) p.norm_counter = &sync->norm_ticket;
  }
  if (profile) stamps_.reset((prog_.size() + 1) * sizeof(uint64_t), "megakernel profile");
  dev_prog_.reset(prog_.size() * sizeof(Instr), "megakernel program");
  RS_CUDA(cudaMemcpyAsync(dev_prog_.get(), prog_.data(), prog_.size() * sizeof(Instr), cudaMemcpyHostToDevice, stream));
  RS_CUDA(cudaStreamSynchronize(stream));
}

void MegaProgram::launch(cudaStream_t stream) const {
  if (stamps_.get()) RS_CUDA(cudaMemsetAsync(stamps_.get(), 0, stamps_.bytes(), stream));
  kern::mega::launch_decode_megakernel(dev_prog_.get<Instr>(), instructions(), sync_.get<kern::mega::SyncWords>(),
                                       stamps_.get<uint64_t>(), grid_, smem_, stream);
}

std::string MegaProgram::profile_table() const {
  if (!stamps_.get()) return "";
  std::vector<uint64_t> t(stamps_.bytes() / sizeof(uint64_t));
  RS_CUDA(cudaDeviceSynchronize());
  RS_CUDA(cudaMemcpy(t.data(), stamps_.get(), stamps_.bytes(), cudaMemcpyDeviceToHost));
  static const char* const kNames[] = {"embed",    "gemv",         "absorb+kv", "attention",   "v_up+merge", "router",
                                       "expert gate_up", "expert down", "add+rmsnorm", "rmsnorm rows", "silu*mul"};
  constexpr int kOps = int(sizeof(kNames) / sizeof(kNames[0]));
  double span[kOps] = {};
  int count[kOps] = {};
  const size_t n = prog_.size();
  for (size_t i = 0; i < n; ++i) {
    const int k = std::clamp(int(prog_[i].op), 0, kOps - 1);
    if (t[i] == 0 || t[i + 1] < t[i]) continue;  // not profiled
    span[k] += double(t[i + 1] - t[i]) / 1e3;
    ++count[k];
  }
  std::string out = "  megakernel profile (last launch; us from the last CTA's arrival after the previous instruction to after this one):\n";
  char line[160];
  double total = 0;
  for (int k = 0; k < kOps; ++k) {
    if (!count[k]) continue;
    std::snprintf(line, sizeof(line), "    %-16s %4d instr %9.1f us  (%.2f each)\n", kNames[k], count[k], span[k],
                  span[k] / count[k]);
    out += line;
    total += span[k];
  }
  std::snprintf(line, sizeof(line), "    %-16s %4zu instr %9.1f us\n", "all", n, total);
  return out + line;
}

}  // namespace rs::cuda
