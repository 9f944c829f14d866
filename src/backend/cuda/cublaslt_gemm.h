#pragma once
// Large-m bf16 GEMMs through cuBLASLt (loaded at run time, cublaslt_loader.h), next to the
// project's own mma.sync kernels. linear() and moe_experts() (linear.cpp) ask gemm_backend()
// and the thresholds below whether to come here; everything falls back to the own kernels when
// cuBLASLt is missing (logged once), when no algorithm fits, or inside CUDA-graph capture where
// the MoE path would need a host sync.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace rs::cuda {

// own: always the built-in kernels. cublaslt: cuBLASLt for every eligible bf16 call above the
// GEMV sizes (an error when the library cannot be loaded). auto: cuBLASLt from the measured
// thresholds on, the built-in kernels below them or when the library is missing.
enum class GemmBackend { Own, CublasLt, Auto };

// The process-wide choice: RS_GEMM=own|cublaslt|auto at first use (default auto), or the last
// set_gemm_backend(). parse_gemm_backend throws rs::Error naming the bad value.
GemmBackend gemm_backend();
void set_gemm_backend(GemmBackend b);
GemmBackend parse_gemm_backend(const std::string& name);
const char* gemm_backend_name(GemmBackend b);

// Auto thresholds (token rows m): dense linear() and routed experts (measured on an H200,
// docs/perf/matmul.md). Tunable for A/B runs.
int cublaslt_min_tokens_dense();
int cublaslt_min_tokens_experts();
void set_cublaslt_min_tokens(int dense_m, int experts_m);
// Streams the per-expert GEMMs are spread over (1..kCublasLtMaxLanes, default 4).
constexpr int kCublasLtMaxLanes = 8;
int cublaslt_lanes();
void set_cublaslt_lanes(int lanes);

// True when cuBLASLt is loaded and this thread's per-device state (handle, workspaces, side
// streams) exists or can be made now. The first failure in auto mode is logged once to stderr;
// in cublaslt mode it throws rs::Error. Never allocates while `stream` is capturing (then it
// returns whether the state already exists).
bool cublaslt_ready(cudaStream_t stream);

// D[n, rows] (row stride ldd) = X[n, cols] (row stride ldx) @ W^T, W row-major [rows, cols]
// (row stride ldw), all bf16, fp32 accumulation. Enqueued on `stream` with lane `lane`'s
// workspace (concurrent calls need distinct lanes). Returns false, having enqueued nothing, when
// cuBLASLt has no algorithm for the shape. Requires cublaslt_ready().
bool cublaslt_gemm_bf16(const void* w, int64_t rows, int64_t cols, int64_t ldw, const void* x, int64_t ldx,
                        int n, void* d, int64_t ldd, cudaStream_t stream, int lane);

// cuBLASLt matmuls enqueued by this process so far (tests check that a path really ran).
uint64_t cublaslt_matmul_count();

// Side streams for spreading independent GEMMs: lane_stream(0, s) is s itself. fork() makes
// lanes 1..lanes-1 wait for work enqueued so far on s; join() makes s wait for them.
cudaStream_t cublaslt_lane_stream(int lane, cudaStream_t main);
void cublaslt_fork(cudaStream_t main, int lanes);
void cublaslt_join(cudaStream_t main, int lanes);

// Pinned host memory of at least `bytes` for small per-call device-to-host reads (this thread,
// this device); valid until the next call.
void* cublaslt_host_scratch(size_t bytes);

}  // namespace rs::cuda
