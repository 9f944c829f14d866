// The decode megakernel's host side without a GPU: what MegaProgram records from the params the
// forward pass hands it (peepholes, unit grids, the shapes it refuses), and the carveout spec
// parser. The device side runs in tests/gpu/megakernel_test.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "backend/cuda/mega_program.h"
#include "kernels/common/carveout.h"

namespace {

using rs::cuda::MegaProgram;
using rs::cuda::MegaUnsupported;
using rs::kern::mega::GemvArgs;
using rs::kern::mega::Op;

// Addresses are never dereferenced while recording; they only need the GEMV path's alignment.
template <class T = void>
T* fake(uintptr_t a) {
  return reinterpret_cast<T*>(a * 4096);
}

rs::cuda::DeviceMatrix bf16_matrix(int64_t rows, int64_t cols, uintptr_t at) {
  rs::cuda::DeviceMatrix w;
  w.rows = rows;
  w.cols = cols;
  w.data = fake(at);
  return w;
}

const GemvArgs& gemv_of(const MegaProgram& p, size_t i) {
  REQUIRE(p.program().at(i).op == Op::kGemv);
  return *reinterpret_cast<const GemvArgs*>(p.program()[i].body);
}

rs::cuda::AddRmsNormParams norm_into(__nv_bfloat16* out, int hidden) {
  rs::cuda::AddRmsNormParams n;
  n.residual = fake<float>(100);
  n.delta0 = fake<__nv_bfloat16>(101);
  n.weight = fake<float>(102);
  n.out = out;
  n.n = 1;
  n.hidden = hidden;
  return n;
}

}  // namespace

TEST_SUITE("unit.mega") {

TEST_CASE("megakernel program: a GEMV over the same x joins the previous one; a preceding norm becomes its prologue") {
  MegaProgram prog(264);
  auto* x = fake<__nv_bfloat16>(1);
  const rs::cuda::AddRmsNormParams norm = norm_into(x, 2048);
  prog.add_rmsnorm(norm);
  const rs::cuda::LinearJob gate{bf16_matrix(10944, 2048, 2), fake<__nv_bfloat16>(3)};
  const rs::cuda::LinearJob up{bf16_matrix(10944, 2048, 4), fake<__nv_bfloat16>(5)};
  prog.gemv(&gate, 1, x, 1, nullptr);
  prog.gemv(&up, 1, x, 1, nullptr);
  REQUIRE(prog.instructions() == 1);
  const GemvArgs& a = gemv_of(prog, 0);
  CHECK(a.p.jobs == 2);
  CHECK(a.p.y[0] == gate.y);
  CHECK(a.p.y[1] == up.y);
  CHECK(a.p.norm_residual == norm.residual);
  CHECK(a.p.norm_out == x);
  CHECK(a.p.norm_delta[0] == norm.delta0);
  // A GEMV over another x starts a new instruction, and a norm of another output stays its own.
  auto* act = fake<__nv_bfloat16>(6);
  const rs::cuda::LinearJob down{bf16_matrix(2048, 10944, 7), fake<__nv_bfloat16>(8)};
  prog.gemv(&down, 1, act, 1, nullptr);
  CHECK(prog.instructions() == 2);
  CHECK(gemv_of(prog, 1).p.norm_residual == nullptr);
  prog.add_rmsnorm(norm_into(fake<__nv_bfloat16>(9), 2048));
  prog.gemv(&down, 1, act, 1, nullptr);
  CHECK(prog.instructions() == 4);
  CHECK(prog.program()[2].op == Op::kAddRmsNorm);
}

TEST_CASE("megakernel program: the final norm folds into the lm_head, which writes fp32 logits") {
  MegaProgram prog(132);
  auto* x = fake<__nv_bfloat16>(1);
  prog.add_rmsnorm(norm_into(x, 2048));
  rs::cuda::LmHeadParams lh;
  lh.x = x;
  lh.w = fake<__nv_bfloat16>(2);
  lh.logits = fake<float>(3);
  lh.n = 1;
  lh.hidden = 2048;
  lh.vocab = 102400;
  prog.lm_head(lh);
  REQUIRE(prog.instructions() == 1);
  const GemvArgs& a = gemv_of(prog, 0);
  CHECK(a.p.out_fp32);
  CHECK(a.p.w[0].rows == 102400);
  CHECK(a.p.norm_weight == fake<float>(102));
}

TEST_CASE("megakernel program: unit grids follow the per-op launchers") {
  MegaProgram prog(264);
  rs::cuda::MlaAbsorbQParams ab;
  ab.n = 1;
  ab.heads = 16;
  ab.kv_lora = 512;
  ab.nope = 128;
  ab.vdim = 128;
  rs::cuda::KvWriteParams kw;
  kw.n = 1;
  prog.absorb_kv(ab, kw);
  CHECK(prog.program()[0].units == 16 * 8 + 1);  // heads x latent column chunks, + the KV row
  rs::cuda::MlaDecodeParams dp;
  dp.batch = 1;
  dp.heads = 16;
  dp.splits = 64;
  dp.kv_lora = 512;
  prog.attention(dp);
  CHECK(prog.program()[1].units == 64);
  CHECK(prog.program()[1].gx == 64);
  rs::cuda::MlaVUpParams vu;
  vu.n = 1;
  vu.heads = 16;
  vu.vdim = 128;
  vu.kv_lora = 512;
  vu.part_o = fake<float>(1);
  prog.v_up(vu);  // 256 one-row blocks fit 264 CTAs: one row a warp
  CHECK(prog.program()[2].variant == 1);
  CHECK(prog.program()[2].units == 16 * 16);
  MegaProgram small(132);
  small.v_up(vu);  // more than 1.25 blocks a CTA: two rows a warp
  CHECK(small.program()[0].variant == 2);
  CHECK(small.program()[0].units == 16 * 8);
}

TEST_CASE("megakernel program: shapes it has no instruction for are refused, not recorded wrong") {
  MegaProgram prog(132);
  auto* x = fake<__nv_bfloat16>(1);
  const rs::cuda::LinearJob job{bf16_matrix(64, 2048, 2), fake<__nv_bfloat16>(3)};
  CHECK_THROWS_AS(prog.gemv(&job, 1, x, 2, nullptr), MegaUnsupported);  // two tokens
  const rs::cuda::LinearJob narrow{bf16_matrix(64, 100, 2), fake<__nv_bfloat16>(3)};
  CHECK_THROWS_AS(prog.gemv(&narrow, 1, x, 1, nullptr), MegaUnsupported);  // not whole 16-byte chunks
  rs::cuda::MlaDecodeParams dp;
  dp.batch = 1;
  dp.heads = 16;
  dp.splits = 8;
  dp.kv_lora = 512;
  dp.out = fake<__nv_bfloat16>(4);  // a separate combine pass
  CHECK_THROWS_AS(prog.attention(dp), MegaUnsupported);
  CHECK(prog.instructions() == 0);
  CHECK_THROWS_AS(MegaProgram(0), MegaUnsupported);
}

TEST_CASE("carveout spec: entries override the measured defaults; malformed ones are ignored") {
  using rs::kern::carveout_from;
  CHECK(carveout_from("", "router") == 0);
  CHECK(carveout_from("", "attention1") == 0);
  CHECK(carveout_from("", "experts") == -1);
  CHECK(carveout_from("router=driver", "router") == -1);
  CHECK(carveout_from("attention=100,router=25", "router") == 25);
  CHECK(carveout_from("attention=100,router=25", "attention") == 100);
  CHECK(carveout_from("attention=100", "attention1") == 0);  // a prefix is not the family
  CHECK(carveout_from("experts=101", "experts") == -1);
  CHECK(carveout_from("experts=abc,gemv=", "experts") == -1);
  CHECK(carveout_from("gemv=", "gemv") == -1);
}

}  // TEST_SUITE
