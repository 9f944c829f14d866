#!/usr/bin/env bash
# One device call for the comm room: build (or use carried binaries), run the gpu.comm tests and
# `rackserve bench allreduce`, print a compact table last. Logs under $OUT.
#   bash tests/gpu/comm_device_run.sh with .comm-bin/bins.tar.xz carried (stripped binaries built elsewhere)
#   bash tests/gpu/comm_device_run.sh                    (builds with the vendored deps)
set -uo pipefail
OUT=${OUT:-/tmp/comm-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
[ -z "$nccl" ] && nccl=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
export RS_NCCL_LIBRARY=$nccl
{ nvidia-smi -L; nvidia-smi topo -m; echo "nccl: $nccl"; } > "$OUT/machine.txt" 2>&1
BIN=${BIN:-}
if [ -f .comm-bin/bins.tar.xz ]; then mkdir -p /tmp/cb && tar xJf .comm-bin/bins.tar.xz -C /tmp/cb && BIN=/tmp/cb; fi
if [ -z "$BIN" ] || ! "$BIN/rackserve" --version >/dev/null 2>&1; then
  echo "building on the device machine"
  cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DRS_VENDORED_DEPS=$PWD/.gpu-build > "$OUT/build.log" 2>&1 &&
    ninja -C /tmp/b -j16 rackserve rackserve_tests >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  BIN=/tmp/b
fi
export RS_RACKSERVE_BINARY=$BIN/rackserve
cat "$OUT/machine.txt"
T="$BIN/rackserve_tests"
: > "$OUT/tests.log"
# Each gpu.comm case in its own process: a trap (the spin-wait bound) ends only that case.
for tc in 'unit.comm' 'all-reduce: one-shot*' 'all-reduce: -0.0*' 'all-reduce: 4 and 8*' 'spin-wait*' \
          'fused all-reduce + residual*' 'fused all-reduce + RMSNorm rejects*' '10*'; do
  if [ "$tc" = unit.comm ]; then args=(--test-suite='unit.comm*'); else args=(--test-suite='gpu.comm*' -tc="$tc"); fi
  timeout 120 stdbuf -oL "$T" "${args[@]}" --no-intro > "$OUT/tc.log" 2>&1; rc=$?
  { echo "=== $tc: rc=$rc"; head -c 6000 "$OUT/tc.log"; } >> "$OUT/tests.log"
  echo "test '$tc': rc=$rc $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tc.log" | tr '\n' ' ')"
done
rm -f "$OUT/tc.log"
R="$BIN/rackserve bench allreduce"
timeout 90 $R --tp 2 --dtype bf16 2>&1 | tee "$OUT/bench.txt" > /dev/null
timeout 30 $R --tp 2 --dtype fp32 --sizes 1K,14K,256K,1M,16M,64M 2>&1 | tee -a "$OUT/bench.txt" > /dev/null
timeout 30 $R --tp 2 --dtype bf16 --no-pdl --sizes 1K,14K,64K 2>&1 | tee -a "$OUT/bench.txt" > /dev/null
timeout 30 $R --tp 4 --trays 2 --dtype bf16 --sizes 1K,14K,1M 2>&1 | tee -a "$OUT/bench.txt" > /dev/null
timeout 30 $R --tp 8 --trays 2 --dtype bf16 --sizes 14K 2>&1 | tee -a "$OUT/bench.txt" > /dev/null
timeout 30 $R --tp 2 --trays 2 --dtype bf16 --reps 31 --sizes 14K 2>&1 | tee -a "$OUT/bench.txt" > /dev/null
cat "$OUT/bench.txt"
