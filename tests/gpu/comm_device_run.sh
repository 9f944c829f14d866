#!/usr/bin/env bash
# One device call for the comm room: `rackserve bench allreduce` with this tree's binaries next to the baseline's (A/B in the same
# call, alternating), then gpu.comm tests (each case in its own process), compact summary last. Logs under $OUT.
#   carry [".gpu-bin-comm"] holding bins.tgz (stripped rackserve and rackserve_tests built here)
#   and, for the A/B, [".gpu-bin"] holding the baseline's bins.tgz (skipped when absent).
#   PLAN=ab (default): the decode-kernel A/B (grids, in place) and the tests the fused op touches;
#   PLAN=confirm: the chosen defaults against the baseline, every size that shares code, every gpu.comm case.
#   (tests bake fixture paths under /work/main, hence the link).
set -uo pipefail
OUT=${OUT:-/tmp/comm-out}; mkdir -p "$OUT"
PLAN=${PLAN:-ab}
mkdir -p /work && ln -sfn "$PWD" /work/main
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
[ -z "$nccl" ] && nccl=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
export RS_NCCL_LIBRARY=$nccl
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "nccl: $nccl"; } > "$OUT/machine.txt" 2>&1
BIN=${BIN:-/tmp/comm-bin}; BASE=/tmp/comm-base
mkdir -p "$BIN" && tar xzf .gpu-bin-comm/bins.tgz -C "$BIN" || { echo "no carried binaries"; exit 1; }
[ -f .gpu-bin/bins.tgz ] && mkdir -p $BASE && tar xzf .gpu-bin/bins.tgz -C $BASE
export RS_RACKSERVE_BINARY=$BIN/rackserve
head -3 "$OUT/machine.txt"
# b LABEL BINDIR args...: one bench process, its output appended to bench.txt under a header.
b() { local l=$1 d=$2; shift 2; [ -x "$d/rackserve" ] || return 0
      echo "### $l \$ rackserve bench allreduce $*" >> "$OUT/bench.txt"
      timeout 40 "$d/rackserve" bench allreduce "$@" >> "$OUT/bench.txt" 2>&1; echo "rc=$?" >> "$OUT/bench.txt"; }
: > "$OUT/bench.txt"
S=1K,14K,28K,64K
C="--tp 2 --dtype bf16 --reps 31 --no-nccl"
t0=$(date +%s)
if [ "$PLAN" = ab ]; then
  # The decode kernel's grid, against the baseline. (The 06:20 and 06:27 UTC runs of 2026-11-30 also
  # timed variants since removed: 1024 threads x 1 vector, an owned-chunk-first wait, two rows on it.)
  b base $BASE $C --sizes $S
  b new $BIN $C --sizes $S
  for n in 1 3 4 8; do b new-ctas$n $BIN $C --sizes 14K --fused-decode-ctas $n; done
  b new-inplace $BIN $C --sizes 1K,14K --fused-in-place
  b base $BASE $C --sizes 14K
  b new $BIN $C --sizes 14K
  TCS=('unit.comm' 'fused all-reduce + residual*' 'fused all-reduce + RMSNorm rejects*' '10*' 'all-reduce: -0.0*' 'spin-wait*')
else
  b base $BASE $C --sizes $S,256K
  b new $BIN $C --sizes $S,256K
  b new-inplace $BIN $C --sizes 1K,14K --fused-in-place
  b base $BASE $C --sizes $S
  b new $BIN $C --sizes $S
  b base-fp32 $BASE --tp 2 --dtype fp32 --reps 31 --no-nccl --sizes 14K,28K
  b new-fp32 $BIN --tp 2 --dtype fp32 --reps 31 --no-nccl --sizes 14K,28K
  b base-trays $BASE --tp 2 --trays 2 --dtype bf16 --reps 31 --no-nccl --sizes 14K,64K
  b new-trays $BIN --tp 2 --trays 2 --dtype bf16 --reps 31 --no-nccl --sizes 14K,64K
  b base-nccl $BASE --tp 2 --dtype bf16 --reps 31 --sizes 14K
  b new-nccl $BIN --tp 2 --dtype bf16 --reps 31 --sizes 14K
  b base $BASE $C --sizes 14K
  b new $BIN $C --sizes 14K
  TCS=('unit.comm' 'fused all-reduce + residual*' 'fused all-reduce + RMSNorm rejects*' '10*' \
       'all-reduce: -0.0*' 'spin-wait*' 'all-reduce: one-shot*' 'all-reduce: 4 and 8*' 'tray-first*' 'dispatcher*')
fi
echo "benches: $(( $(date +%s) - t0 ))s"
T="$BIN/rackserve_tests"
: > "$OUT/tests.log"
# Each gpu.comm case in its own process: a trap (the spin-wait bound) ends only that case.
for tc in "${TCS[@]}"; do
  if [ "$tc" = unit.comm ]; then args=(--test-suite='unit.comm*'); else args=(--test-suite='gpu.comm*' -tc="$tc"); fi
  s=$(date +%s%N)
  timeout 60 stdbuf -oL "$T" "${args[@]}" --no-intro > "$OUT/tc.log" 2>&1; rc=$?
  { echo "=== $tc: rc=$rc"; head -c 6000 "$OUT/tc.log"; } >> "$OUT/tests.log"
  echo "test '$tc': rc=$rc $(( ($(date +%s%N) - s) / 1000000 ))ms $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tc.log" | tr '\n' ' ')"
  [ $rc -ne 0 ] && tail -25 "$OUT/tc.log"
done
rm -f "$OUT/tc.log"
echo "== summary: CHAINED graph medians (g/e us): size oneshot fused ... fused-1sh"
awk '/^### /{lab=$2" "substr($0, index($0,"--sizes")); m="indep"} /^CHAINED/{m="chained"} /^independent/{m="indep"}
     /^(1K|14K|28K|64K|256K) / && m=="chained" {print lab" | "$1" 1sh="$2" fused="$3" tray="$5" nccl="$6" gap="$(NF-1)}' "$OUT/bench.txt" | sed -E 's/ +/ /g'
grep -E "^rc=[^0]" "$OUT/bench.txt" && echo "some bench failed (see bench.txt)"
