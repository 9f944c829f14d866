#!/usr/bin/env bash
# One device call for the comm room: `rackserve bench allreduce` with this tree's binaries next to the baseline's (A/B in the same
# call, alternating), then the gpu.comm tests (each case in its own process), compact summary last. Logs under $OUT.
#   carry [".gpu-bin-comm"] holding bins.tar.xz (stripped rackserve and rackserve_tests built here)
#   and, for the A/B, [".gpu-bin"] holding the baseline's bins.tgz (skipped when absent).
#   (tests bake fixture paths under /work/main, hence the link).
set -uo pipefail
OUT=${OUT:-/tmp/comm-out}; mkdir -p "$OUT"
mkdir -p /work && ln -sfn "$PWD" /work/main
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
[ -z "$nccl" ] && nccl=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
export RS_NCCL_LIBRARY=$nccl
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "nccl: $nccl"; } > "$OUT/machine.txt" 2>&1
BIN=${BIN:-/tmp/comm-bin}; BASE=/tmp/comm-base
mkdir -p "$BIN" && tar xJf .gpu-bin-comm/bins.tar.xz -C "$BIN" || { echo "no carried binaries"; exit 1; }
[ -f .gpu-bin/bins.tgz ] && mkdir -p $BASE && tar xzf .gpu-bin/bins.tgz -C $BASE
export RS_RACKSERVE_BINARY=$BIN/rackserve
head -3 "$OUT/machine.txt"
# b LABEL BINDIR args...: one bench process, its output appended to bench.txt under a header.
b() { local l=$1 d=$2; shift 2; echo "### $l \$ rackserve bench allreduce $*" >> "$OUT/bench.txt"
      timeout 40 "$d/rackserve" bench allreduce "$@" >> "$OUT/bench.txt" 2>&1; echo "rc=$?" >> "$OUT/bench.txt"; }
: > "$OUT/bench.txt"
S=1K,14K,28K,64K,256K
b new $BIN --tp 2 --dtype bf16 --reps 31 --sizes $S
[ -d $BASE ] && b base $BASE --tp 2 --dtype bf16 --reps 31 --sizes $S
b new-32cta $BIN --tp 2 --dtype bf16 --reps 31 --sizes 14K,28K --no-nccl --fused-decode-ctas 32
[ -d $BASE ] && b base $BASE --tp 2 --dtype bf16 --reps 31 --sizes 14K,28K --no-nccl
b new $BIN --tp 2 --dtype bf16 --reps 31 --sizes 14K,28K --no-nccl
b new $BIN --tp 2 --trays 2 --dtype bf16 --reps 31 --sizes 1K,14K,64K,256K,512K,1M
b new $BIN --tp 4 --trays 2 --dtype bf16 --reps 15 --sizes 1K,14K,256K --no-nccl
b new $BIN --tp 2 --dtype fp32 --reps 31 --sizes 14K,28K --no-nccl
b new-nopdl $BIN --tp 2 --dtype bf16 --reps 31 --sizes 1K,14K --no-nccl --no-pdl
T="$BIN/rackserve_tests"
: > "$OUT/tests.log"
# Each gpu.comm case in its own process: a trap (the spin-wait bound) ends only that case.
for tc in 'unit.comm' 'fused all-reduce + residual*' 'fused all-reduce + RMSNorm rejects*' '10*' \
          'all-reduce: -0.0*' 'spin-wait*' 'all-reduce: one-shot*' 'all-reduce: 4 and 8*' 'tray-first*' 'dispatcher*'; do
  if [ "$tc" = unit.comm ]; then args=(--test-suite='unit.comm*'); else args=(--test-suite='gpu.comm*' -tc="$tc"); fi
  s=$(date +%s%N)
  timeout 40 stdbuf -oL "$T" "${args[@]}" --no-intro > "$OUT/tc.log" 2>&1; rc=$?
  { echo "=== $tc: rc=$rc"; head -c 6000 "$OUT/tc.log"; } >> "$OUT/tests.log"
  echo "test '$tc': rc=$rc $(( ($(date +%s%N) - s) / 1000000 ))ms $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tc.log" | tr '\n' ' ')"
  [ $rc -ne 0 ] && tail -25 "$OUT/tc.log"
done
rm -f "$OUT/tc.log"
cat "$OUT/bench.txt"
echo "== summary: 14K (7168 bf16) graph medians, us"
awk '/^### /{lab=$2" "substr($0, index($0,"--tp")); m="indep"} /^CHAINED/{m="chained"} /^independent/{m="indep"} /^14K /{print lab" | "m" | "$0}' "$OUT/bench.txt" | sed -E 's/ +/ /g'
