#!/usr/bin/env bash
# One GPU-machine run for the matmul room: correctness (gpu.linear) then `bench linear`.
# Usage: tests/gpu/linear_gpu.sh DIR_WITH_BINARIES OUT_DIR
# (binaries: rackserve and rackserve_tests; built here or carried as a tarball).
set -u -o pipefail
bin=$1; out=$2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/smi.txt" 2>&1
"$bin/rackserve_tests" --test-suite='gpu.linear' --no-intro 2>&1 | tee "$out/tests.log" | tail -25
echo "tests rc=$?"
"$bin/rackserve" bench linear --json "$out/bench.json" 2>&1 | tee "$out/bench.log"
cat "$out/smi.txt"
