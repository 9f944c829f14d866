// The cuBLASLt large-m path (src/backend/cuda/cublaslt_*, linear.cpp): dense linear() and the
// routed experts against an fp64 host reference and against the built-in kernels, the paths
// each backend really takes (cuBLASLt's matmul counter), fallbacks (FP8, graph capture, a
// missing library), and the loader's errors. GPU cases print a skip line without a GPU or
// without libcublasLt; the loader and backend-name cases run everywhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cublaslt_loader.h"
#include "backend/cuda/linear.h"
#include "common/error.h"
#include "kernels/ops/matmul_launch.h"
#include "tests/gpu/linear_test_util.h"

using namespace rs::test;
using rs::cuda::DeviceMatrix;
using rs::cuda::GemmBackend;
using rs::cuda::WeightType;

namespace {

constexpr double kTolerance = 1e-2;  // bf16 output rounding ~2e-3; fp32 accumulation in both

// Restores the process-wide backend and tuning after a case.
struct BackendGuard {
  GemmBackend b = rs::cuda::gemm_backend();
  int lanes = rs::cuda::cublaslt_lanes();
  ~BackendGuard() {
    rs::cuda::set_gemm_backend(b);
    rs::cuda::set_cublaslt_lanes(lanes);
  }
};

bool skip_gpu(const char* name) {
  if (!have_gpu()) {
    std::printf("[gpu.cublaslt] %s: skipped, no CUDA device\n", name);
    return true;
  }
  try {
    rs::cuda::CublasLtLibrary::get();
  } catch (const rs::Error& e) {
    std::printf("[gpu.cublaslt] %s: skipped, %s\n", name, e.what());
    return true;
  }
  return false;
}

double rel_between(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  return relative_error(a, to_double(b)).rel;
}

// A bf16 weight matrix [rows, cols] over device data.
DeviceMatrix bf16_matrix(const void* data, int64_t rows, int64_t cols) {
  DeviceMatrix m;
  m.type = WeightType::BF16;
  m.rows = rows;
  m.cols = cols;
  m.data = data;
  return m;
}

// ---- dense -------------------------------------------------------------------------------

struct DenseCase {
  int64_t rows, cols;
  int m;
  bool host_reference;  // the fp64 reference costs m*rows*cols on the host: moderate shapes only
};

void check_dense(const DenseCase& c, uint64_t seed) {
  Rng rng(seed);
  auto wh = rng.bf16(size_t(c.rows * c.cols));
  auto xh = rng.bf16(size_t(c.m) * c.cols);
  DeviceBuf<uint16_t> w(wh), x(xh), y_lt(size_t(c.m) * c.rows), y_own(size_t(c.m) * c.rows);
  const DeviceMatrix dm = bf16_matrix(w.ptr, c.rows, c.cols);
  const size_t wsb = rs::cuda::linear_workspace_bytes(c.m, c.rows, c.cols);
  DeviceBuf<uint8_t> ws(wsb);
  auto* xp = reinterpret_cast<const __nv_bfloat16*>(x.ptr);

  y_lt.poison();
  rs::cuda::set_gemm_backend(GemmBackend::CublasLt);
  const uint64_t before = rs::cuda::cublaslt_matmul_count();
  rs::cuda::linear(dm, xp, c.m, reinterpret_cast<__nv_bfloat16*>(y_lt.ptr), {ws.ptr, wsb}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "linear (cuBLASLt)");
  CHECK(rs::cuda::cublaslt_matmul_count() == before + 1);  // one matmul, no fallback

  y_own.poison();
  rs::cuda::set_gemm_backend(GemmBackend::Own);
  rs::cuda::linear(dm, xp, c.m, reinterpret_cast<__nv_bfloat16*>(y_own.ptr), {ws.ptr, wsb}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "linear (own)");
  CHECK(rs::cuda::cublaslt_matmul_count() == before + 1);  // the own path does not call cuBLASLt

  const auto lt = y_lt.download(), own = y_own.download();
  const double vs_own = rel_between(lt, own);
  INFO("dense " << c.rows << "x" << c.cols << " m=" << c.m << " cuBLASLt vs own rel=" << vs_own);
  CHECK(vs_own <= kTolerance);
  if (c.host_reference) {
    const auto xd = to_double(xh);
    std::vector<double> ref(size_t(c.m) * c.rows);
    for (int t = 0; t < c.m; ++t)
      for (int64_t r = 0; r < c.rows; ++r) {
        double acc = 0;
        for (int64_t k = 0; k < c.cols; ++k) acc += double(bf16_to_float(wh[r * c.cols + k])) * xd[t * c.cols + k];
        ref[size_t(t) * c.rows + r] = acc;
      }
    const auto st = relative_error(lt, ref);
    INFO("cuBLASLt vs fp64 rel=" << st.rel << " nan=" << st.nan);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
  }
}

// ---- routed experts --------------------------------------------------------------------------

// E experts; `stacked` puts each expert's gate and up back to back in one allocation (as the
// weight loader does), which the cuBLASLt path runs as one GEMM; otherwise up comes first and
// gate after it, so they are not [gate; up] and take two GEMMs. Without `host_copies` the
// weights are filled on the GPU (V2-Lite sizes: 1.1 GB would take the host too long).
struct Experts {
  int E, hidden, inter, top_k;
  std::vector<std::vector<uint16_t>> gate, up, down;  // host copies for the reference
  std::vector<std::unique_ptr<DeviceBuf<uint16_t>>> bufs;
  std::unique_ptr<DeviceExpertTables> tables;
  rs::cuda::MoeExperts set;

  Experts(int e, int hid, int in, int k, bool stacked, Rng& rng, bool host_copies = true)
      : E(e), hidden(hid), inter(in), top_k(k) {
    std::vector<DeviceMatrix> hg, hu, hd;
    const size_t gsz = size_t(inter) * hidden;
    for (int i = 0; i < E; ++i) {
      auto pair = std::make_unique<DeviceBuf<uint16_t>>(2 * gsz);
      auto dn = std::make_unique<DeviceBuf<uint16_t>>(gsz);
      if (host_copies) {
        gate.push_back(rng.bf16(gsz));
        up.push_back(rng.bf16(gsz));
        down.push_back(rng.bf16(gsz));
        std::vector<uint16_t> both(stacked ? gate.back() : up.back());
        const auto& second = stacked ? up.back() : gate.back();
        both.insert(both.end(), second.begin(), second.end());
        pair->upload(both);
        dn->upload(down.back());
      } else {
        rs::kern::launch_fill_random(pair->ptr, 2 * gsz * 2, 1000 + 2 * i, false, nullptr);
        rs::kern::launch_fill_random(dn->ptr, gsz * 2, 1001 + 2 * i, false, nullptr);
      }
      hg.push_back(bf16_matrix(pair->ptr + (stacked ? 0 : gsz), inter, hidden));
      hu.push_back(bf16_matrix(pair->ptr + (stacked ? gsz : 0), inter, hidden));
      hd.push_back(bf16_matrix(dn->ptr, hidden, inter));
      bufs.push_back(std::move(pair));
      bufs.push_back(std::move(dn));
    }
    cuda_ok(cudaDeviceSynchronize(), "expert weights");
    tables = std::make_unique<DeviceExpertTables>(hg, hu, hd);
    set = tables->experts(hidden, inter, WeightType::BF16);
  }

  // Distinct experts per token; skewed so some experts get many tokens and some none.
  void route(int m, Rng& rng, std::vector<int>& ids, std::vector<float>& w, bool with_invalid) const {
    ids.assign(size_t(m) * top_k, 0);
    w.assign(size_t(m) * top_k, 0.f);
    for (int t = 0; t < m; ++t) {
      std::vector<int> perm(E);
      for (int i = 0; i < E; ++i) perm[i] = i;
      for (int j = 0; j < top_k; ++j) {
        const int span = std::max(1, (E - j) / (t % 3 == 0 ? 2 : 1));
        std::swap(perm[j], perm[j + rng.below(span)]);
        ids[size_t(t) * top_k + j] = perm[j];
        w[size_t(t) * top_k + j] = rng.uniform(0.05f, 1.f);
      }
    }
    if (with_invalid) ids[0] = -1;
  }

  std::vector<double> reference(int m, const std::vector<uint16_t>& xh, const std::vector<int>& ids,
                                const std::vector<float>& w) const {
    const auto xd = to_double(xh);
    std::vector<double> out(size_t(m) * hidden, 0.0), h(inter);
    for (int t = 0; t < m; ++t)
      for (int j = 0; j < top_k; ++j) {
        const int e = ids[size_t(t) * top_k + j];
        if (e < 0 || e >= E) continue;
        for (int i = 0; i < inter; ++i) {
          double g = 0, u = 0;
          for (int k = 0; k < hidden; ++k) {
            g += double(bf16_to_float(gate[e][size_t(i) * hidden + k])) * xd[size_t(t) * hidden + k];
            u += double(bf16_to_float(up[e][size_t(i) * hidden + k])) * xd[size_t(t) * hidden + k];
          }
          h[i] = g / (1 + std::exp(-g)) * u;
        }
        for (int r = 0; r < hidden; ++r) {
          double acc = 0;
          for (int i = 0; i < inter; ++i) acc += double(bf16_to_float(down[e][size_t(r) * inter + i])) * h[i];
          out[size_t(t) * hidden + r] += w[size_t(t) * top_k + j] * acc;
        }
      }
    return out;
  }
};

struct MoeRun {
  std::vector<uint16_t> out;
  uint64_t matmuls = 0;
};

MoeRun run_moe(const Experts& ex, GemmBackend b, int lanes, const std::vector<uint16_t>& xh, const std::vector<int>& ids,
               const std::vector<float>& w, int m) {
  rs::cuda::set_gemm_backend(b);
  rs::cuda::set_cublaslt_lanes(lanes);
  DeviceBuf<uint16_t> x(xh), out(size_t(m) * ex.hidden);
  DeviceBuf<int> dids(ids);
  DeviceBuf<float> dw(w);
  const size_t wsb = rs::cuda::moe_workspace_bytes(m, ex.top_k, ex.set);  // sized for the backend set above
  DeviceBuf<uint8_t> ws(wsb);
  out.poison();
  const uint64_t before = rs::cuda::cublaslt_matmul_count();
  rs::cuda::moe_experts(ex.set, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, ex.top_k, dids.ptr, dw.ptr,
                        reinterpret_cast<__nv_bfloat16*>(out.ptr), {ws.ptr, wsb}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "moe_experts");
  return {out.download(), rs::cuda::cublaslt_matmul_count() - before};
}

int active_experts(const std::vector<int>& ids, int E) {
  std::vector<char> used(E, 0);
  for (int e : ids)
    if (e >= 0 && e < E) used[e] = 1;
  int n = 0;
  for (char u : used) n += u;
  return n;
}

void check_moe(int E, int hidden, int inter, int top_k, int m, bool stacked, int lanes, bool with_invalid,
               bool host_reference, uint64_t seed) {
  Rng rng(seed);
  Experts ex(E, hidden, inter, top_k, stacked, rng, host_reference);
  std::vector<int> ids;
  std::vector<float> w;
  ex.route(m, rng, ids, w, with_invalid);
  const auto xh = rng.bf16(size_t(m) * hidden);
  const MoeRun lt = run_moe(ex, GemmBackend::CublasLt, lanes, xh, ids, w, m);
  const MoeRun own = run_moe(ex, GemmBackend::Own, lanes, xh, ids, w, m);
  const int active = active_experts(ids, E);
  INFO("moe E=" << E << " hidden=" << hidden << " inter=" << inter << " top_k=" << top_k << " m=" << m
                << (stacked ? " stacked" : " separate") << " lanes=" << lanes << " active=" << active);
  // Per active expert: gate+up (one GEMM when stacked, else two) and down.
  CHECK(lt.matmuls == uint64_t(active) * (stacked ? 2 : 3));
  CHECK(own.matmuls == 0);
  const double vs_own = rel_between(lt.out, own.out);
  INFO("cuBLASLt vs own rel=" << vs_own);
  CHECK(vs_own <= kTolerance);
  if (host_reference) {
    const auto st = relative_error(lt.out, ex.reference(m, xh, ids, w));
    INFO("cuBLASLt vs fp64 rel=" << st.rel << " nan=" << st.nan);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);
  }
}

}  // namespace

TEST_SUITE("gpu.cublaslt") {

TEST_CASE("cuBLASLt dense linear() matches the fp64 reference and the own GEMM") {
  if (skip_gpu("dense")) return;
  BackendGuard guard;
  uint64_t seed = 11;
  // Host-checked: odd m, rows and cols that are no multiple of any tile (still 8-element rows).
  for (const DenseCase& c : {DenseCase{200, 264, 37, true}, DenseCase{576, 512, 300, true},
                             DenseCase{1024, 768, 513, true}, DenseCase{136, 1000, 9, true}})
    check_dense(c, seed++);
  // DeepSeek-V2-Lite prefill shapes against the own GEMM (the host reference would take minutes).
  for (const DenseCase& c : {DenseCase{2048, 2048, 8192, false}, DenseCase{576, 2048, 8192, false},
                             DenseCase{4096, 512, 8192, false}, DenseCase{10944, 2048, 4096, false},
                             DenseCase{2048, 10944, 2048, false}})
    check_dense(c, seed++);
}

TEST_CASE("cuBLASLt routed experts match the fp64 reference and the own grouped GEMM") {
  if (skip_gpu("experts")) return;
  BackendGuard guard;
  // Small sets with the host reference: stacked and separate gate/up, 1 and 4 lanes, an invalid
  // id, hidden and inter that are multiples of 16 but of no tile. Every case has more than 16
  // pairs per expert on average: below that the batched-decode kernels own the call.
  check_moe(12, 272, 176, 4, 96, true, 4, false, true, 101);
  check_moe(12, 272, 176, 4, 96, false, 1, true, true, 102);
  check_moe(9, 128, 96, 3, 61, false, 3, false, true, 103);
  check_moe(16, 256, 208, 6, 300, true, 4, true, true, 104);
  // DeepSeek-V2-Lite experts (64 x [1408 x 2048], top-6) against the own grouped GEMM.
  check_moe(64, 2048, 1408, 6, 1024, true, 4, false, false, 105);
  check_moe(64, 2048, 1408, 6, 640, false, 2, true, false, 106);
}

TEST_CASE("cuBLASLt falls back to the own kernels for FP8 and under graph capture") {
  if (skip_gpu("fallbacks")) return;
  BackendGuard guard;
  rs::cuda::set_gemm_backend(GemmBackend::CublasLt);
  Rng rng(7);
  // FP8 block-scaled weight: own kernels (cuBLASLt has no 128x128 block scales on Hopper).
  const int64_t rows = 256, cols = 256;
  const int m = 300;
  DeviceBuf<uint8_t> w8(rng.e4m3(size_t(rows * cols)));
  DeviceBuf<float> sc(std::vector<float>(4, 0.01f));
  DeviceMatrix dm;
  dm.type = WeightType::FP8_E4M3_BLOCK;
  dm.rows = rows;
  dm.cols = cols;
  dm.data = w8.ptr;
  dm.scale_inv = sc.ptr;
  DeviceBuf<uint16_t> x(rng.bf16(size_t(m) * cols)), y(size_t(m) * rows);
  const size_t wsb = rs::cuda::linear_workspace_bytes(m, rows, cols);
  DeviceBuf<uint8_t> ws(wsb);
  uint64_t before = rs::cuda::cublaslt_matmul_count();
  rs::cuda::linear(dm, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, reinterpret_cast<__nv_bfloat16*>(y.ptr),
                   {ws.ptr, wsb}, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "fp8 linear");
  CHECK(rs::cuda::cublaslt_matmul_count() == before);

  // Routed experts captured into a graph: the cuBLASLt path needs a host sync, so capture takes
  // the own grouped GEMM; the replay must still match an eager cuBLASLt run.
  Experts ex(8, 128, 96, 3, true, rng);
  const int mm = 64;
  std::vector<int> ids;
  std::vector<float> wts;
  ex.route(mm, rng, ids, wts, false);
  const auto xh = rng.bf16(size_t(mm) * ex.hidden);
  const MoeRun eager = run_moe(ex, GemmBackend::CublasLt, 2, xh, ids, wts, mm);
  CHECK(eager.matmuls > 0);
  DeviceBuf<uint16_t> xg(xh), out(size_t(mm) * ex.hidden);
  DeviceBuf<int> dids(ids);
  DeviceBuf<float> dw(wts);
  const size_t mwsb = rs::cuda::moe_workspace_bytes(mm, ex.top_k, ex.set);
  DeviceBuf<uint8_t> mws(mwsb);
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  auto call = [&] {
    rs::cuda::moe_experts(ex.set, reinterpret_cast<const __nv_bfloat16*>(xg.ptr), mm, ex.top_k, dids.ptr, dw.ptr,
                          reinterpret_cast<__nv_bfloat16*>(out.ptr), {mws.ptr, mwsb}, s);
  };
  call();  // warm-up outside capture
  cuda_ok(cudaStreamSynchronize(s), "warm-up");
  out.poison();
  before = rs::cuda::cublaslt_matmul_count();
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  call();
  cuda_ok(cudaStreamEndCapture(s, &g), "end capture");
  CHECK(rs::cuda::cublaslt_matmul_count() == before);
  cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cuda_ok(cudaGraphLaunch(ge, s), "replay");
  cuda_ok(cudaStreamSynchronize(s), "replay");
  const double rel = rel_between(out.download(), eager.out);
  INFO("graph replay (own) vs eager cuBLASLt rel=" << rel);
  CHECK(rel <= kTolerance);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST_CASE("cuBLASLt dense linear() is captured into a CUDA graph and replays with new inputs") {
  if (skip_gpu("dense graph")) return;
  BackendGuard guard;
  rs::cuda::set_gemm_backend(GemmBackend::CublasLt);
  Rng rng(21);
  const int64_t rows = 1032, cols = 520;
  const int m = 300;
  auto wh = rng.bf16(size_t(rows * cols));
  DeviceBuf<uint16_t> w(wh), x(rng.bf16(size_t(m) * cols)), y(size_t(m) * rows), y_eager(size_t(m) * rows);
  const DeviceMatrix dm = bf16_matrix(w.ptr, rows, cols);
  const size_t wsb = rs::cuda::linear_workspace_bytes(m, rows, cols);
  DeviceBuf<uint8_t> ws(wsb);
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  auto call = [&](DeviceBuf<uint16_t>& out) {
    rs::cuda::linear(dm, reinterpret_cast<const __nv_bfloat16*>(x.ptr), m, reinterpret_cast<__nv_bfloat16*>(out.ptr),
                     {ws.ptr, wsb}, s);
  };
  call(y);  // warm-up outside capture: cuBLASLt state and the algorithm
  cuda_ok(cudaStreamSynchronize(s), "warm-up");
  const uint64_t before = rs::cuda::cublaslt_matmul_count();
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  call(y);
  cuda_ok(cudaStreamEndCapture(s, &g), "end capture");
  CHECK(rs::cuda::cublaslt_matmul_count() == before + 1);  // captured, not replaced by the own GEMM
  cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int round = 0; round < 2; ++round) {
    x.upload(rng.bf16(size_t(m) * cols));  // new inputs in place
    y.poison();
    cuda_ok(cudaGraphLaunch(ge, s), "replay");
    cuda_ok(cudaStreamSynchronize(s), "replay");
    y_eager.poison();
    call(y_eager);
    cuda_ok(cudaStreamSynchronize(s), "eager");
    const auto a = y.download(), b = y_eager.download();
    const auto st = relative_error(a, to_double(b));
    INFO("dense graph replay round " << round << " rel=" << st.rel << " nan=" << st.nan);
    CHECK(st.nan == 0);
    CHECK(st.rel <= kTolerance);  // a stale replay (old inputs) would be off by ~100%
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST_CASE("a missing cuBLASLt: auto falls back (logged once), cublaslt mode is a clear error") {
  if (!have_gpu()) {
    std::printf("[gpu.cublaslt] missing library: skipped, no CUDA device\n");
    return;
  }
  const char* env = std::getenv("RS_RACKSERVE_BINARY");
  const std::string bin = env && *env ? env : RS_BINARY;
  // A 320-token prompt: dense linear() calls above the auto threshold reach the cuBLASLt path.
  std::string ids;
  for (int i = 0; i < 320; ++i) ids += (i ? "," : "") + std::to_string(5 + (i * 37) % 250);
  const std::string args = " generate --model " + std::string(RS_FIXTURES_DIR) + "/models/tiny-v3 --prompt-ids " + ids +
                           " --max-tokens 4 --print-ids --ignore-eos --device cuda 2>&1";
  auto run = [](const std::string& cmd, int* rc) {
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    if (!p) return out;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    *rc = pclose(p);
    return out;
  };
  const std::string missing = "RS_CUBLASLT_LIBRARY=/nonexistent/libcublasLt.so.13 ";
  int rc_auto = -1, rc_own = -1, rc_forced = -1;
  const std::string out_auto = run(missing + "RS_GEMM=auto '" + bin + "'" + args, &rc_auto);
  const std::string out_own = run("RS_GEMM=own '" + bin + "'" + args, &rc_own);
  const std::string out_forced = run(missing + "RS_GEMM=cublaslt '" + bin + "'" + args, &rc_forced);
  INFO("auto:\n" << out_auto << "\nown:\n" << out_own << "\nforced:\n" << out_forced);
  CHECK(rc_auto == 0);
  CHECK(rc_own == 0);
  const std::string note = "cuBLASLt is not available";
  const size_t first = out_auto.find(note);
  CHECK(first != std::string::npos);
  CHECK(out_auto.find(note, first + 1) == std::string::npos);  // logged once
  CHECK(out_auto.find("built-in kernels") != std::string::npos);
  // Same greedy tokens as the own kernels (the last line is the generated ids).
  auto last_line = [](const std::string& s) {
    const size_t end = s.find_last_not_of('\n');
    const size_t start = s.rfind('\n', end);
    return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
  };
  CHECK(last_line(out_auto) == last_line(out_own));
  CHECK(rc_forced != 0);
  CHECK(out_forced.find(note) != std::string::npos);
  CHECK(out_forced.find("RS_CUBLASLT_LIBRARY") != std::string::npos);
}

}  // TEST_SUITE

TEST_SUITE("unit.cublaslt") {

TEST_CASE("cuBLASLt loader: a missing or wrong library is a clear error") {
  CHECK_THROWS_WITH_AS(rs::cuda::CublasLtLibrary::load("/nonexistent/dir/libcublasLt.so.13"),
                       doctest::Contains("cannot load cuBLASLt (/nonexistent/dir/libcublasLt.so.13)"), rs::Error);
  // Not a shared object at all.
  const std::string text = std::string(RS_FIXTURES_DIR) + "/models/tiny-v3/config.json";
  CHECK_THROWS_WITH_AS(rs::cuda::CublasLtLibrary::load(text), doctest::Contains("cannot load cuBLASLt"), rs::Error);
  // A real library without cuBLASLt's symbols.
  CHECK_THROWS_WITH_AS(rs::cuda::CublasLtLibrary::load("libc.so.6"),
                       doctest::Contains("symbol cublasLtGetVersion not found"), rs::Error);
}

TEST_CASE("cuBLASLt loader: search order and the RS_CUBLASLT_LIBRARY override") {
  const char* old = std::getenv("RS_CUBLASLT_LIBRARY");
  const std::string saved = old ? old : "";
  unsetenv("RS_CUBLASLT_LIBRARY");
  auto c = rs::cuda::CublasLtLibrary::candidates();
  REQUIRE(!c.empty());
  CHECK(c.front() == "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  CHECK(c.back() == "/usr/local/cuda/lib64/libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  setenv("RS_CUBLASLT_LIBRARY", "/opt/x/libcublasLt.so.13", 1);
  c = rs::cuda::CublasLtLibrary::candidates();
  CHECK(c == std::vector<std::string>{"/opt/x/libcublasLt.so.13"});
  if (old) setenv("RS_CUBLASLT_LIBRARY", saved.c_str(), 1);
  else unsetenv("RS_CUBLASLT_LIBRARY");
}

TEST_CASE("GEMM backend names") {
  CHECK(rs::cuda::parse_gemm_backend("own") == GemmBackend::Own);
  CHECK(rs::cuda::parse_gemm_backend("cublaslt") == GemmBackend::CublasLt);
  CHECK(rs::cuda::parse_gemm_backend("auto") == GemmBackend::Auto);
  CHECK_THROWS_WITH_AS(rs::cuda::parse_gemm_backend("cublas"), doctest::Contains("own, cublaslt or auto"), rs::Error);
  for (GemmBackend b : {GemmBackend::Own, GemmBackend::CublasLt, GemmBackend::Auto})
    CHECK(rs::cuda::parse_gemm_backend(rs::cuda::gemm_backend_name(b)) == b);
}

}  // TEST_SUITE
