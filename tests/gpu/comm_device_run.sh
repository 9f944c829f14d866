#!/usr/bin/env bash
# One device call for the comm room: the gpu.comm tests (each case in its own process) and
# `rackserve bench allreduce` (fused kernels side by side: auto, cluster, whole-row),
# compact summary last. Logs under $OUT.
#   run with carry [".gpu-bin-comm"] holding bins.tar.xz (stripped rackserve and rackserve_tests built here)
#   (tests bake fixture paths under /work/main, hence the link).
set -uo pipefail
OUT=${OUT:-/tmp/comm-out}; mkdir -p "$OUT"
mkdir -p /work && ln -sfn "$PWD" /work/main
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
[ -z "$nccl" ] && nccl=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
export RS_NCCL_LIBRARY=$nccl
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "nccl: $nccl"; } > "$OUT/machine.txt" 2>&1
BIN=${BIN:-/tmp/comm-bin}
mkdir -p "$BIN" && tar xJf .gpu-bin-comm/bins.tar.xz -C "$BIN" || { echo "no carried binaries"; exit 1; }
export RS_RACKSERVE_BINARY=$BIN/rackserve
head -3 "$OUT/machine.txt"
T="$BIN/rackserve_tests"
: > "$OUT/tests.log"
# Each gpu.comm case in its own process: a trap (the spin-wait bound) ends only that case.
for tc in 'unit.comm' 'fused all-reduce + residual*' 'fused all-reduce + RMSNorm rejects*' '10*' \
          'all-reduce: -0.0*' 'spin-wait*' 'all-reduce: one-shot*' 'all-reduce: 4 and 8*'; do
  if [ "$tc" = unit.comm ]; then args=(--test-suite='unit.comm*'); else args=(--test-suite='gpu.comm*' -tc="$tc"); fi
  s=$(date +%s%N)
  timeout 100 stdbuf -oL "$T" "${args[@]}" --no-intro > "$OUT/tc.log" 2>&1; rc=$?
  { echo "=== $tc: rc=$rc"; head -c 6000 "$OUT/tc.log"; } >> "$OUT/tests.log"
  echo "test '$tc': rc=$rc $(( ($(date +%s%N) - s) / 1000000 ))ms $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tc.log" | tr '\n' ' ')"
  [ $rc -ne 0 ] && tail -25 "$OUT/tc.log"
done
rm -f "$OUT/tc.log"
R="$BIN/rackserve bench allreduce"
b() { echo "\$ rackserve bench allreduce $*" >> "$OUT/bench.txt"; timeout 60 $R "$@" >> "$OUT/bench.txt" 2>&1; }
: > "$OUT/bench.txt"
S=1K,14K,28K,64K,256K
b --tp 2 --dtype bf16 --reps 31 --sizes $S
b --tp 2 --dtype bf16 --reps 31 --sizes $S --fused-variant cluster --no-nccl
b --tp 2 --dtype bf16 --reps 31 --sizes $S --fused-variant whole-row --no-nccl
b --tp 2 --dtype fp32 --reps 31 --sizes 14K,28K
b --tp 2 --dtype fp32 --reps 31 --sizes 14K,28K --fused-variant whole-row --no-nccl
b --tp 2 --dtype bf16 --sizes 512K,1M,4M,16M,64M
b --tp 2 --dtype bf16 --no-pdl --sizes 1K,14K --no-nccl
b --tp 4 --trays 2 --dtype bf16 --sizes 14K --no-nccl
b --tp 8 --trays 2 --dtype bf16 --sizes 14K --no-nccl
cat "$OUT/bench.txt"
