#!/usr/bin/env bash
# Batch-1 decode experts on an H200, one device call (~90 s), few output files:
#  1. gpu.experts (the decode expert kernels against the fp64 host reference);
#  2. the decode step with each few-token path side by side: RS_EXPERT_FUSED=0 (two kernels, the
#     default) and 1..4 (the fused kernel's modes), bf16 and FP8, each run twice, interleaved;
#  3. ncu per-kernel time and DRAM bytes of each path, then the warp-state (stall reasons),
#     compute-pipe and memory sections of the two-kernel path's gate_up / down kernels: the open
#     question of docs/perf/matmul.md (2026-11-30 04:31) is why the FP8 kernels take as long as
#     the bf16 ones for half the bytes.
#   tests/gpu/expert_decode_ab.sh --bin DIR   (DIR holds rackserve and rackserve_tests, or bins.tgz)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN="${2:-}"
[ "${1:-}" = "--bin" ] && [ -n "$BIN" ] || { echo "usage: $0 --bin DIR" >&2; exit 2; }
OUTDIR="${OUT:-$ROOT/expert-ab-out}"; mkdir -p "$OUTDIR"
if [ -f "$BIN/bins.tgz" ]; then mkdir -p /tmp/rs-exp-bin && tar xzf "$BIN/bins.tgz" -C /tmp/rs-exp-bin && BIN=/tmp/rs-exp-bin; fi
RS="$BIN/rackserve"; TESTS="$BIN/rackserve_tests"
# Test binaries carry the source tree's absolute fixture path; make it resolve here too.
[ -e /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} NCCL_NVLS_ENABLE=0 RS_RACKSERVE_BINARY=$RS
CFG="--config $ROOT/tests/fixtures/model-shapes/deepseek-v2-lite/config.json --load-format dummy"
LOG="$OUTDIR/expert_ab.log"; : > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
say "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | head -1)  $(date -u +%FT%TZ)"

timeout 120 "$TESTS" --test-suite=gpu.experts --no-intro > /tmp/rs-exp-tests.log 2>&1
say "gpu.experts rc=$?: $(grep -E 'test cases:' /tmp/rs-exp-tests.log | tr -s ' ')"
grep -B4 -A14 -E "ERROR|FATAL|exception" /tmp/rs-exp-tests.log | head -120 >> "$LOG"

declare -A R
step() {  # tag, env, flags...
  local tag=$1 env=$2; shift 2
  env $env timeout 60 "$RS" bench forward $CFG "$@" > /tmp/rs-exp-bf.log 2>&1
  R[$tag]="${R[$tag]:-} $(grep -o 'median [0-9.]* ms' /tmp/rs-exp-bf.log | grep -o '[0-9.]*')"
}
B1="--phase decode --batch 1 --context 1024 --iters 20"
for rep in 1 2; do
  for v in 0 1 2 3 4; do
    step "bf16 v$v" RS_EXPERT_FUSED=$v $B1
    step "fp8  v$v" RS_EXPERT_FUSED=$v $B1 --quantization fp8
  done
done

NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_time() {  # quant flag, fused setting
  RS_EXPERT_FUSED=$2 timeout 40 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --csv -k 'regex:expert_decode' -c 16 "$RS" bench forward $CFG --phase decode --batch 1 --context 1024 \
    --iters 1 --warmup 1 $1 > /tmp/rs-exp-ncu.csv 2>/dev/null
  python3 - /tmp/rs-exp-ncu.csv <<'PY' | tee -a "$LOG"
import csv, sys, re, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("  no ncu rows"); sys.exit()
h = rows[0]; k, mn, v, u = (h.index(x) for x in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
scale = {"nsecond": 1e-3, "usecond": 1, "msecond": 1e3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1, "Gbyte": 1e3}
d = collections.defaultdict(list)
for r in rows[1:]:
    d[(re.sub(r"\(.*", "", r[k]).replace("void (anonymous namespace)::", "")[:48], r[mn])].append(
        float(r[v].replace(",", "")) * scale.get(r[u], 1))
for (n, m), vs in sorted(d.items()):
    vs.sort(); print(f"  {n:48s} {m:24s} n={len(vs):3d} median={vs[len(vs)//2]:.2f} {'us' if 'time' in m else 'MB'}")
PY
}
if [ -n "$NCU" ]; then
  for q in "" "--quantization fp8"; do
    for v in 0 1 2; do say "ncu ${q:-bf16} RS_EXPERT_FUSED=$v"; ncu_time "$q" $v; done
    say "ncu sections, two-kernel path ${q:-bf16}"
    RS_EXPERT_FUSED=0 timeout 90 "$NCU" --clock-control none --section SpeedOfLight --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
      -k 'regex:expert_decode_(gate_up|down)' --launch-skip 8 -c 2 \
      "$RS" bench forward $CFG --phase decode --batch 1 --context 1024 --iters 1 --warmup 1 $q \
      > /tmp/rs-exp-sections.log 2>&1
    grep -vE '^==PROF==|^\s*$' /tmp/rs-exp-sections.log | grep -vE '^  (bench|weights|step|throughput|read|achieved|roofline)' \
      | head -220 >> "$LOG"
  done
fi

say "== decode step, batch 1, ctx 1K: median ms per run (v0 = two kernels, default; v1..4 = fused, mode v-1)"
for k in "bf16 v0" "bf16 v1" "bf16 v2" "bf16 v3" "bf16 v4" "fp8  v0" "fp8  v1" "fp8  v2" "fp8  v3" "fp8  v4"; do
  say "$k: ${R[$k]:-}"
done
