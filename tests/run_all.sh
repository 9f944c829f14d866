#!/usr/bin/env bash
# Builds rackserve and runs every test: units, goldens, GPU tests (they skip without a GPU) and
# the end-to-end tests with the official openai npm client. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash third_party/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
cd build
# GPU suites first and verbose: without a GPU every case says why it skips, so a green run here is
# never mistaken for a GPU run (tests/gpu/run_gpu_suite.sh runs them on an H200).
gpu_status=0
ctest -V -R '^gpu$' --timeout 1800 > gpu_tests.log 2>&1 || gpu_status=$?
grep -E "skipped|ERROR|test cases:" gpu_tests.log || true
if [ "$gpu_status" -ne 0 ]; then tail -60 gpu_tests.log; exit "$gpu_status"; fi
ctest --output-on-failure -E '^gpu$' --timeout 1800
cd ..
# The wait probe's measuring build (bench forward --wait-probe, kernels/common/wait_probe.cuh) is
# compiled too, so that its code never stops building; it runs only on the GPU machine.
cmake -S . -B build-probe -G Ninja -DCMAKE_BUILD_TYPE=Release -DRS_WAIT_PROBE=ON
cmake --build build-probe -j"$(nproc)" --target rackserve
./build-probe/rackserve bench forward --help | grep -q -- --wait-probe
