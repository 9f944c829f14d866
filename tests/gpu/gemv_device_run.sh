#!/usr/bin/env bash
# Dense decode GEMVs and the lm_head (gemv room), old vs new binaries side by side on one H200:
#   tests/gpu/gemv_device_run.sh NEW_DIR OLD_DIR [quick]
# Each DIR holds bins.tgz (rackserve + rackserve_tests). Runs the new binary's gpu.linear and
# gpu.cuda suites, then `bench forward` (V2-Lite dummy weights) old/new interleaved for decode
# b1 bf16, b1 FP8 and b64 bf16, the new binary's RS_GEMV_AB variants at b1, and per-kernel
# durations under ncu (gemv / lm_head / add_rmsnorm kernels). Logs under $OUT; table last.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD; NEW=$1; OLD=$2; QUICK=${3:-}
OUTDIR="${OUT:-$ROOT/gemv-out}"; mkdir -p "$OUTDIR"
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$ROOT" /work/main; }
mkdir -p /tmp/new /tmp/old
tar xzf "$NEW/bins.tgz" -C /tmp/new && tar xzf "$OLD/bins.tgz" -C /tmp/old || exit 1
export CUDA_VISIBLE_DEVICES=0 NCCL_NVLS_ENABLE=0 RS_RACKSERVE_BINARY=/tmp/new/rackserve
mkdir -p "$ROOT/build" && cp /tmp/new/rackserve "$ROOT/build/rackserve" 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
T0=$(date +%s)
for S in gpu.linear gpu.cuda; do
  timeout 240 /tmp/new/rackserve_tests --test-suite=$S --no-intro > "$OUTDIR/tests_$S.log" 2>&1
  echo "tests $S rc=$? $(grep 'test cases' "$OUTDIR/tests_$S.log" | tail -1)"
  grep -E "ERROR|FAILED" -A3 "$OUTDIR/tests_$S.log" | head -30
done
echo "tests took $(( $(date +%s) - T0 )) s"
CFG="--config $ROOT/tests/fixtures/model-shapes/deepseek-v2-lite/config.json --load-format dummy --phase decode"
declare -a ROWS
bench() {  # label bin env args...
  local label=$1 bin=$2 env=$3; shift 3
  local out; out=$(env $env timeout 120 "$bin/rackserve" bench forward $CFG "$@" 2>&1)
  local med tps; med=$(echo "$out" | grep -m1 "step time" | awk '{print $4}'); tps=$(echo "$out" | grep -m1 "throughput" | awk '{print $2}')
  echo "$out" >> "$OUTDIR/bench.log"
  ROWS+=("$label|$med ms|$tps tok/s"); echo "$label: $med ms $tps tok/s"
}
B1="--batch 1 --context 1024 --iters 20"
for rep in 1 2; do
  bench "b1 bf16 old #$rep" /tmp/old "X=1" $B1
  bench "b1 bf16 new #$rep" /tmp/new "X=1" $B1
  bench "b1 fp8 old #$rep" /tmp/old "X=1" $B1 --quantization fp8
  bench "b1 fp8 new #$rep" /tmp/new "X=1" $B1 --quantization fp8
done
bench "b64 bf16 old" /tmp/old "X=1" --batch 64 --context 2048 --iters 10
bench "b64 bf16 new" /tmp/new "X=1" --batch 64 --context 2048 --iters 10
bench "b16 bf16 old" /tmp/old "X=1" --batch 16 --context 1024 --iters 10
bench "b16 bf16 new" /tmp/new "X=1" --batch 16 --context 1024 --iters 10
ALL=nogroup,oldgrid,oldlmhead,nofold,nofp8group
if [ -z "$QUICK" ]; then
  # Each change of this room off alone, then all of them off (the rest of the tree's changes
  # against the old binary), and FP8 with its q_proj kept apart.
  for v in nofold nogroup oldgrid oldlmhead $ALL; do bench "b1 bf16 new AB=$v" /tmp/new "RS_GEMV_AB=$v" $B1; done
  bench "b1 fp8 new AB=nofp8group" /tmp/new "RS_GEMV_AB=nofp8group" $B1 --quantization fp8
else
  bench "b1 bf16 new AB=$ALL" /tmp/new "RS_GEMV_AB=$ALL" $B1
  bench "b1 fp8 new AB=nofp8group" /tmp/new "RS_GEMV_AB=nofp8group" $B1 --quantization fp8
fi
bench "b1 fp8 new AB=$ALL" /tmp/new "RS_GEMV_AB=$ALL" $B1 --quantization fp8
echo "benches done at +$(( $(date +%s) - T0 )) s"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ncu_k() {  # label bin regex count args...
  local label=$1 bin=$2 rx=$3 count=$4; shift 4
  timeout 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    --kernel-name-base demangled -k "regex:$rx" -c $count "$bin/rackserve" bench forward $CFG "$@" \
    > "$OUTDIR/ncu_$label.csv" 2> "$OUTDIR/ncu_$label.err"
  python3 - "$OUTDIR/ncu_$label.csv" "$label" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no ncu rows", sys.argv[2]); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.OrderedDict(); cnt = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")) * {"ns": 1e-3, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(r[ui], 1.0)
    n = re.sub(r"\(.*", "", r[ki])[:80] + " grid" + r[h.index("Grid Size")].replace(" ", ""); tot[n] = tot.get(n, 0.0) + v; cnt[n] += 1
for n, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"ncu {sys.argv[2]}: {cnt[n]:4d}x {v/cnt[n]:8.2f} us/call  {n}")
PY
}
if [ -n "$NCU" ]; then
  K='gemv|lm_head|add_rmsnorm'
  ncu_k b1new /tmp/new "$K" 300 --batch 1 --context 1024 --iters 1 --warmup 1
  RS_GEMV_AB=$ALL ncu_k b1newoff /tmp/new "$K" 300 --batch 1 --context 1024 --iters 1 --warmup 1
  [ -z "$QUICK" ] && ncu_k b1old /tmp/old "$K" 300 --batch 1 --context 1024 --iters 1 --warmup 1
  ncu_k b1fp8new /tmp/new "$K" 300 --batch 1 --context 1024 --iters 1 --warmup 1 --quantization fp8
  # the lm_head at 16 rows (the new one is the fp32-output GEMV: `float>` in its name)
  ncu_k b16new /tmp/new 'lm_head|float>' 3 --batch 16 --context 1024 --iters 1 --warmup 1
  [ -z "$QUICK" ] && ncu_k b16old /tmp/old 'lm_head' 3 --batch 16 --context 1024 --iters 1 --warmup 1
fi
echo "all done at +$(( $(date +%s) - T0 )) s"
echo "== summary"
for r in "${ROWS[@]}"; do echo "$r"; done | awk -F'|' '{printf "%-58s %12s %14s\n", $1, $2, $3}'
