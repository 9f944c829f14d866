#!/usr/bin/env bash
# One device call for the cuBLASLt path: its tests (and gpu.linear under the default auto
# backend), `bench linear --gemm-ab`, and an 8K-token V2-Lite prefill step with the built-in
# kernels against cuBLASLt, summary table last.
#   tests/gpu/cublaslt_device_run.sh BIN_DIR OUT_DIR   (BIN_DIR holds rackserve, rackserve_tests)
set -u
BIN=${1:?bin dir}; OUTDIR=${2:-${OUT:-./cublaslt-out}}
mkdir -p "$OUTDIR"
ROOT=$PWD
# The test binary bakes /work/main as its fixture root.
if [ ! -e /work/main ]; then mkdir -p /work && ln -sfn "$ROOT" /work/main; fi
RS="$BIN/rackserve"; TESTS="$BIN/rackserve_tests"
export RS_RACKSERVE_BINARY=$RS
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$OUTDIR/gpu.txt"
ls -l /usr/local/cuda/lib64/libcublasLt.so* 2>&1 | tee "$OUTDIR/libs.txt"
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >> "$OUTDIR/libs.txt"

timeout 45 "$TESTS" --test-suite='unit.cublaslt,gpu.cublaslt' --no-intro -s > "$OUTDIR/tests_cublaslt.log" 2>&1
T1=$?
timeout 40 "$RS" bench linear --gemm-ab --quick --json "$OUTDIR/gemm_ab.json" > "$OUTDIR/gemm_ab.log" 2>&1
T3=$?
CFG="--config tests/fixtures/model-shapes/deepseek-v2-lite/config.json --load-format dummy --phase prefill --batch 1 --context 8192"
for G in own cublaslt; do
  RS_GEMM=$G timeout 25 "$RS" bench forward $CFG --iters 3 --warmup 1 --json "$OUTDIR/fwd_$G.json" > "$OUTDIR/fwd_$G.log" 2>&1
  echo "rc=$?" >> "$OUTDIR/fwd_$G.log"
done
RS_GEMM=cublaslt RS_CUDA_PROFILE=1 timeout 25 "$RS" bench forward $CFG --iters 1 --warmup 1 > "$OUTDIR/prof_cublaslt.log" 2>&1
# The built-in suite under the default (auto) backend: large-m cases there now reach cuBLASLt.
timeout 30 "$TESTS" --test-suite='gpu.linear' --no-intro > "$OUTDIR/tests_linear.log" 2>&1
T2=$?

echo "== tests"; grep -E "^\[gpu|test cases|assertions" "$OUTDIR/tests_cublaslt.log" | tail -8
grep -E "ERROR|FAILED" -A12 "$OUTDIR/tests_cublaslt.log" | head -60
grep -E "test cases" "$OUTDIR/tests_linear.log"; grep -E "ERROR" -A8 "$OUTDIR/tests_linear.log" | head -30
echo "== gemm A/B (rc=$T3)"; cat "$OUTDIR/gemm_ab.log" | tail -60
echo "== profile (cuBLASLt)"; head -20 "$OUTDIR/prof_cublaslt.log"
echo "== prefill 8K, V2-Lite bf16 dummy"
for G in own cublaslt; do echo "-- $G"; grep -E "step time|throughput|rc=|rackserve:|rror" "$OUTDIR/fwd_$G.log"; done
echo "summary: tests_cublaslt rc=$T1 tests_linear rc=$T2 gemm_ab rc=$T3"
