#!/usr/bin/env bash
# Decode expert kernels on an H200 in one device call: the gpu.linear suite, `bench forward` at
# the issue-5 decode points with the earlier and the decode expert kernels side by side (same
# binary, interleaved), then `bench linear --experts`, then the gpu.cuda suite (every fixture
# model against the CPU reference); a summary table last. Logs go to $OUT (put them in a tarball
# there: only 8 files come back from a device call).
#   tests/gpu/linear_decode_ab.sh BIN_DIR      (BIN_DIR holds rackserve and rackserve_tests)
set -u
cd "$(dirname "$0")/../.."
BIN=$(cd "$1" && pwd)
OUTDIR=${OUT:-/tmp/linear-decode-ab}
mkdir -p "$OUTDIR"
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }  # the test binary's fixture paths
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0
CFG="--config tests/fixtures/model-shapes/deepseek-v2-lite/config.json --load-format dummy"
summary=()

suite() {  # name timeout
  local t0=$SECONDS tag=$1
  timeout "$2" "$BIN/rackserve_tests" --test-suite="$1" > "$OUTDIR/$tag.log" 2>&1
  local rc=$?
  summary+=("$tag: rc=$rc in $((SECONDS - t0)) s; $(grep -E '^\[doctest\] (test cases|assertions)' "$OUTDIR/$tag.log" | tr -s ' ' | tr '\n' ';')")
  grep -B3 -A10 -E "ERROR|FATAL|timeout" "$OUTDIR/$tag.log" | head -50
}

# Variants: old = the earlier expert kernels (RS_EXPERT_DECODE=0: routed-expert GEMV / mma.sync
# GEMM, shared experts as a dense MLP); new = the decode expert kernels (the default).
fwd() {  # label flags...
  local label=$1
  shift
  for v in old new; do
    RS_EXPERT_DECODE=$([ $v = old ] && echo 0 || echo 1) timeout 60 "$BIN/rackserve" bench forward $CFG "$@" > "$OUTDIR/fwd_${label}_$v.log" 2>&1
    local tok step bw
    tok=$(grep -oP 'throughput\s+\K[0-9.]+' "$OUTDIR/fwd_${label}_$v.log")
    step=$(grep -oP 'median \K[0-9.]+' "$OUTDIR/fwd_${label}_$v.log")
    bw=$(grep -oP 'achieved\s+\K.*' "$OUTDIR/fwd_${label}_$v.log")
    summary+=("$(printf '%-10s %-4s %9s tok/s  step %7s ms  %s' "$label" "$v" "${tok:-FAIL}" "${step:-?}" "${bw:-}")")
    [ -n "$tok" ] || tail -5 "$OUTDIR/fwd_${label}_$v.log"
  done
}

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
suite gpu.linear "${LINEAR_TIMEOUT:-150}"
fwd b1_bf16 --phase decode --batch 1 --context 1024
fwd b1_fp8 --phase decode --batch 1 --context 1024 --quantization fp8
fwd b64_bf16 --phase decode --batch 64 --context 2048 --iters 10
timeout 120 "$BIN/rackserve" bench linear --experts --quick --json "$OUTDIR/bench_experts.json" > "$OUTDIR/bench_experts.log" 2>&1
cat "$OUTDIR/bench_experts.log"
suite gpu.cuda "${CUDA_TIMEOUT:-150}"
echo "== summary"
printf '%s\n' "${summary[@]}"
