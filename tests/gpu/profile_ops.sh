#!/usr/bin/env bash
# Where a forward step's time goes, on an H200 machine, in one call:
#  1. per-op event tables (RS_CUDA_PROFILE=1, eager steps) for the four issue-5 benchmarks;
#  2. per-kernel device durations of graph-replayed decode steps under ncu (no launch gaps), when
#     ncu can read the counters on this machine (Firecracker runtimes; gVisor cannot).
#   tests/gpu/profile_ops.sh --bin DIR   (DIR holds rackserve or bins.tgz)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD; BIN="$2"; OUTDIR="${OUT:-$ROOT/profile-out}"; mkdir -p "$OUTDIR"
if [ -f "$BIN/bins.tgz" ]; then mkdir -p /tmp/rs-bin && tar xzf "$BIN/bins.tgz" -C /tmp/rs-bin && BIN=/tmp/rs-bin; fi
RS="$BIN/rackserve"
CFG="--config $ROOT/tests/fixtures/model-shapes/deepseek-v2-lite/config.json --load-format dummy"
export CUDA_VISIBLE_DEVICES=0 NCCL_NVLS_ENABLE=0
run_prof() {  # name, flags...
  local name=$1; shift
  echo "== per-op (eager) $name: $*"
  RS_CUDA_PROFILE=1 timeout 180 "$RS" bench forward $CFG "$@" > "$OUTDIR/prof_$name.log" 2>&1
  grep -v "^\s*$" "$OUTDIR/prof_$name.log" | tail -40
}
run_prof b1 --phase decode --batch 1 --context 1024 --iters 5 --warmup 1
run_prof b1fp8 --phase decode --batch 1 --context 1024 --iters 5 --warmup 1 --quantization fp8
run_prof b64 --phase decode --batch 64 --context 2048 --iters 3 --warmup 1
run_prof prefill8k --phase prefill --batch 1 --context 8192 --iters 1 --warmup 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_graph() {  # name, flags...
  local name=$1; shift
  echo "== ncu (graph nodes) $name: $*"
  timeout 200 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    -k 'regex:^(?!dummy_fill|convert_kernel|quantize_fp8|fill_f32)' -c 1200 \
    "$RS" bench forward $CFG "$@" > "$OUTDIR/ncu_$name.csv" 2> "$OUTDIR/ncu_$name.err"
  echo "ncu rc=$?"; tail -3 "$OUTDIR/ncu_$name.err"
  # Sum per kernel name over the last decode step's worth of launches.
  python3 - "$OUTDIR/ncu_$name.csv" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no ncu rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.OrderedDict(); cnt = collections.Counter(); allsum = 0.0
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); v = v / 1000.0 if r[ui] == "nsecond" else v * (1000.0 if r[ui] == "msecond" else 1.0)
    name = re.sub(r"\(.*", "", r[ki])[:90]
    tot[name] = tot.get(name, 0.0) + v; cnt[name] += 1; allsum += v
print(f"kernels={len(rows)-1} sum_us={allsum:.1f}")
for n, v in sorted(tot.items(), key=lambda x: -x[1])[:40]:
    print(f"{v:10.1f} us  {cnt[n]:5d}x  {v/cnt[n]:8.2f} us/call  {n}")
PY
}
if [ -n "$NCU" ]; then
  ncu_graph b1 --phase decode --batch 1 --context 1024 --iters 1 --warmup 2
  ncu_graph b64 --phase decode --batch 64 --context 2048 --iters 1 --warmup 2
fi
