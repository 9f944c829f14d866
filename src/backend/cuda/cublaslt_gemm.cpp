// cuBLASLt matmuls for large-m bf16 GEMMs: backend choice, per-thread per-device state
// (handle, one matmul descriptor, per-lane workspaces and side streams), and the heuristic
// algorithm cache. Row-major y = x @ W^T is the column-major "TN" product D = op(A) * B with
// A = W seen column-major as [cols x rows] (transposed), B = x as [cols x n], D = y as [rows x n]:
// no copies, and the layout cuBLASLt's fastest Hopper kernels are tuned for.
#include "backend/cuda/cublaslt_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/cublaslt_loader.h"
#include "common/error.h"

namespace rs::cuda {
namespace {

// Measured on an H200 (docs/perf/matmul.md, cuBLASLt section, 2026-11-30 01:52 UTC):
// dense, cuBLASLt wins at every m from 16 (1.05-1.5x up to 64, 1.65-1.9x at 128, 2.6-3.4x at
// 8192); the threshold stays at 128 so batched decode (m <= 64, graph-captured with PDL chains
// between the built-in kernels) keeps its own tuned path. Experts: one GEMM pair per expert
// costs ~1.7 ms of host issue per MoE layer, so the built-in grouped GEMM wins up to m = 2048
// (1111 vs 1699 us) and cuBLASLt from somewhere below 8192 (2259 vs 3743 us).
std::atomic<int> g_min_dense{128};
std::atomic<int> g_min_experts{4096};
std::atomic<int> g_lanes{4};
std::atomic<uint64_t> g_matmuls{0};
constexpr size_t kLaneWorkspace = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper

std::mutex g_backend_mu;
bool g_backend_set = false;
GemmBackend g_backend = GemmBackend::Auto;

void log_once(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr, "rackserve: %s; large-m bf16 GEMMs use the built-in kernels\n", why.c_str());
  });
}

// Alignment in bytes (<= 256) of every column start of a bf16 operand: the base and the stride.
uint32_t alignment(const void* p, int64_t ld) {
  const uint64_t bits = reinterpret_cast<uint64_t>(p) | uint64_t(ld) * 2 | 256;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// Algorithms are cached per shape with n rounded up to a power of two (routed experts see a
// different token count per expert and step; a heuristic query per call would cost more host
// time than the GEMM). An algorithm chosen for a larger n that does not run at the real n is
// re-queried for the exact n.
struct Key {
  int64_t rows, n, cols, ldw, ldx, ldd;
  uint32_t aw, ax, ad;
  bool operator==(const Key& o) const {
    return rows == o.rows && n == o.n && cols == o.cols && ldw == o.ldw && ldx == o.ldx && ldd == o.ldd &&
           aw == o.aw && ax == o.ax && ad == o.ad;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ULL;
    for (uint64_t v : {uint64_t(k.rows), uint64_t(k.n), uint64_t(k.cols), uint64_t(k.ldw), uint64_t(k.ldx),
                       uint64_t(k.ldd), uint64_t(k.aw) << 32 | k.ax, uint64_t(k.ad)})
      h = (h ^ v) * 1099511628211ULL;
    return size_t(h);
  }
};
struct Algo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

struct Layout {
  const CublasLtLibrary& lib;
  cublasLtMatrixLayout_t l = nullptr;
  Layout(const CublasLtLibrary& L, uint64_t rows, uint64_t cols, int64_t ld) : lib(L) {
    if (lib.MatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, ld) != CUBLAS_STATUS_SUCCESS) l = nullptr;
  }
  ~Layout() {
    if (l) lib.MatrixLayoutDestroy(l);
  }
};

struct DeviceState {
  const CublasLtLibrary* lib = nullptr;
  int device = -1;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  void* ws[kCublasLtMaxLanes] = {};
  cudaStream_t side[kCublasLtMaxLanes] = {};
  cudaEvent_t fork_ev = nullptr, join_ev[kCublasLtMaxLanes] = {};
  std::unordered_map<Key, Algo, KeyHash> algos;

  ~DeviceState() {
    int cur = -1;
    cudaGetDevice(&cur);
    cudaSetDevice(device);
    for (int i = 0; i < kCublasLtMaxLanes; ++i) {
      if (ws[i]) cudaFree(ws[i]);
      if (side[i]) cudaStreamDestroy(side[i]);
      if (join_ev[i]) cudaEventDestroy(join_ev[i]);
    }
    if (fork_ev) cudaEventDestroy(fork_ev);
    if (desc) lib->MatmulDescDestroy(desc);
    if (handle) lib->Destroy(handle);
    if (cur >= 0) cudaSetDevice(cur);
    cudaGetLastError();
  }

  // Lane i's workspace and (i > 0) side stream and event; allocates, so never during capture.
  bool ensure_lane(int i) {
    if (ws[i]) return true;
    if (cudaMalloc(&ws[i], kLaneWorkspace) != cudaSuccess) {
      ws[i] = nullptr;
      cudaGetLastError();
      return false;
    }
    if (i > 0 && (cudaStreamCreateWithFlags(&side[i], cudaStreamNonBlocking) != cudaSuccess ||
                  cudaEventCreateWithFlags(&join_ev[i], cudaEventDisableTiming) != cudaSuccess)) {
      cudaGetLastError();
      return false;
    }
    return true;
  }
};

// Per thread (each rank thread drives its own streams) and per device.
thread_local std::unique_ptr<DeviceState> t_state[64];
thread_local void* t_host = nullptr;
thread_local size_t t_host_bytes = 0;

int current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError();
    throw Error("cuBLASLt: no current CUDA device");
  }
  return dev;
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return true;  // unknown: behave as under capture (no allocation, no sync)
  }
  return st != cudaStreamCaptureStatusNone;
}

// Fails per the backend policy: throws in cublaslt mode, logs once in auto mode.
bool unavailable(const std::string& why) {
  if (gemm_backend() == GemmBackend::CublasLt) throw Error(why);
  log_once(why);
  return false;
}

DeviceState& state() { return *t_state[current_device()]; }

Algo query(DeviceState& st, const Key& k) {
  const CublasLtLibrary& lib = *st.lib;
  Algo a;
  Layout A(lib, uint64_t(k.cols), uint64_t(k.rows), k.ldw), B(lib, uint64_t(k.cols), uint64_t(k.n), k.ldx),
      D(lib, uint64_t(k.rows), uint64_t(k.n), k.ldd);
  if (!A.l || !B.l || !D.l) return a;
  cublasLtMatmulPreference_t pref = nullptr;
  if (lib.MatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return a;
  const uint64_t wsb = kLaneWorkspace;
  lib.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
  lib.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k.aw, sizeof(k.aw));
  lib.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k.ax, sizeof(k.ax));
  lib.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k.ad, sizeof(k.ad));
  lib.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k.ad, sizeof(k.ad));
  cublasLtMatmulHeuristicResult_t res{};
  int count = 0;
  if (lib.MatmulAlgoGetHeuristic(st.handle, st.desc, A.l, B.l, D.l, D.l, pref, 1, &res, &count) ==
          CUBLAS_STATUS_SUCCESS &&
      count > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
    a.found = true;
    a.algo = res.algo;
  }
  lib.MatmulPreferenceDestroy(pref);
  return a;
}

const Algo& lookup(DeviceState& st, const Key& k) {
  auto it = st.algos.find(k);
  if (it == st.algos.end()) it = st.algos.emplace(k, query(st, k)).first;
  return it->second;
}

int64_t bucket(int64_t n) {
  int64_t b = 16;
  while (b < n) b *= 2;
  return b;
}

}  // namespace

GemmBackend parse_gemm_backend(const std::string& name) {
  if (name == "own") return GemmBackend::Own;
  if (name == "cublaslt") return GemmBackend::CublasLt;
  if (name == "auto") return GemmBackend::Auto;
  throw Error("RS_GEMM: unknown GEMM backend '" + name + "' (expected own, cublaslt or auto)");
}

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::Own: return "own";
    case GemmBackend::CublasLt: return "cublaslt";
    default: return "auto";
  }
}

GemmBackend gemm_backend() {
  std::lock_guard<std::mutex> lock(g_backend_mu);
  if (!g_backend_set) {
    const char* env = std::getenv("RS_GEMM");
    g_backend = env && *env ? parse_gemm_backend(env) : GemmBackend::Auto;
    g_backend_set = true;
  }
  return g_backend;
}

void set_gemm_backend(GemmBackend b) {
  std::lock_guard<std::mutex> lock(g_backend_mu);
  g_backend = b;
  g_backend_set = true;
}

int cublaslt_min_tokens_dense() { return g_min_dense; }
int cublaslt_min_tokens_experts() { return g_min_experts; }
void set_cublaslt_min_tokens(int dense_m, int experts_m) {
  g_min_dense = std::max(1, dense_m);
  g_min_experts = std::max(1, experts_m);
}
int cublaslt_lanes() { return g_lanes; }
void set_cublaslt_lanes(int lanes) { g_lanes = std::clamp(lanes, 1, kCublasLtMaxLanes); }

bool cublaslt_ready(cudaStream_t stream) {
  const CublasLtLibrary* lib = nullptr;
  try {
    lib = &CublasLtLibrary::get();
  } catch (const Error& e) {
    return unavailable(e.what());
  }
  const int dev = current_device();
  std::unique_ptr<DeviceState>& slot = t_state[dev];
  if (slot) return slot->ws[0] ? true : unavailable("cuBLASLt setup failed earlier on device " + std::to_string(dev));
  if (capturing(stream)) return false;  // set up on the first call outside capture
  auto st = std::make_unique<DeviceState>();
  st->lib = lib;
  st->device = dev;
  std::string why;
  cublasStatus_t rc = lib->Create(&st->handle);
  if (rc != CUBLAS_STATUS_SUCCESS) {
    st->handle = nullptr;
    why = std::string("cublasLtCreate: ") + lib->GetStatusString(rc);
  } else if ((rc = lib->MatmulDescCreate(&st->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS) {
    st->desc = nullptr;
    why = std::string("cublasLtMatmulDescCreate: ") + lib->GetStatusString(rc);
  } else {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    lib->MatmulDescSetAttribute(st->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    lib->MatmulDescSetAttribute(st->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (cudaEventCreateWithFlags(&st->fork_ev, cudaEventDisableTiming) != cudaSuccess || !st->ensure_lane(0)) {
      cudaGetLastError();
      why = "cuBLASLt: cannot allocate its workspace on device " + std::to_string(dev);
    }
  }
  if (!why.empty()) {
    slot = std::move(st);  // keep the partial state so the failure is not retried every call
    return unavailable(why);
  }
  slot = std::move(st);
  return true;
}

bool cublaslt_gemm_bf16(const void* w, int64_t rows, int64_t cols, int64_t ldw, const void* x, int64_t ldx,
                        int n, void* d, int64_t ldd, cudaStream_t stream, int lane) {
  DeviceState& st = state();
  if (lane < 0 || lane >= kCublasLtMaxLanes || !st.ws[lane]) return false;
  const CublasLtLibrary& lib = *st.lib;
  Key k{rows, bucket(n), cols, ldw, ldx, ldd, alignment(w, ldw), alignment(x, ldx), alignment(d, ldd)};
  Layout A(lib, uint64_t(cols), uint64_t(rows), ldw), B(lib, uint64_t(cols), uint64_t(n), ldx),
      D(lib, uint64_t(rows), uint64_t(n), ldd);
  if (!A.l || !B.l || !D.l) return false;
  const float alpha = 1.f, beta = 0.f;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      if (k.n == n) break;
      k.n = n;  // the bucket's algorithm did not fit this n: ask for the exact shape
    }
    const Algo& a = lookup(st, k);
    if (!a.found) continue;
    const cublasStatus_t rc = lib.Matmul(st.handle, st.desc, &alpha, w, A.l, x, B.l, &beta, d, D.l, d, D.l, &a.algo,
                                         st.ws[lane], kLaneWorkspace, stream);
    if (rc == CUBLAS_STATUS_SUCCESS) {
      ++g_matmuls;
      return true;
    }
    if (rc != CUBLAS_STATUS_NOT_SUPPORTED && rc != CUBLAS_STATUS_INVALID_VALUE)
      throw Error(std::string("cublasLtMatmul [") + std::to_string(n) + " x " + std::to_string(cols) + "] x [" +
                  std::to_string(rows) + " x " + std::to_string(cols) + "]^T: " + lib.GetStatusString(rc));
  }
  return false;
}

uint64_t cublaslt_matmul_count() { return g_matmuls; }

cudaStream_t cublaslt_lane_stream(int lane, cudaStream_t main) { return lane == 0 ? main : state().side[lane]; }

void cublaslt_fork(cudaStream_t main, int lanes) {
  DeviceState& st = state();
  for (int i = 1; i < lanes; ++i)
    if (!st.ensure_lane(i)) throw Error("cuBLASLt: cannot set up side stream " + std::to_string(i));
  if (lanes <= 1) return;
  if (cudaEventRecord(st.fork_ev, main) != cudaSuccess) throw Error("cuBLASLt: cannot record the fork event");
  for (int i = 1; i < lanes; ++i)
    if (cudaStreamWaitEvent(st.side[i], st.fork_ev, 0) != cudaSuccess) throw Error("cuBLASLt: fork wait failed");
}

void cublaslt_join(cudaStream_t main, int lanes) {
  DeviceState& st = state();
  for (int i = 1; i < lanes; ++i) {
    if (cudaEventRecord(st.join_ev[i], st.side[i]) != cudaSuccess ||
        cudaStreamWaitEvent(main, st.join_ev[i], 0) != cudaSuccess)
      throw Error("cuBLASLt: join of side stream " + std::to_string(i) + " failed");
  }
}

void* cublaslt_host_scratch(size_t bytes) {
  if (bytes > t_host_bytes) {
    if (t_host) cudaFreeHost(t_host);
    t_host = nullptr;
    t_host_bytes = 0;
    const size_t want = std::max<size_t>(bytes, 64 << 10);
    if (cudaMallocHost(&t_host, want) != cudaSuccess) {
      cudaGetLastError();
      throw Error("cuBLASLt: cannot allocate " + std::to_string(want) + " bytes of pinned host memory");
    }
    t_host_bytes = want;
  }
  return t_host;
}

}  // namespace rs::cuda
