#!/usr/bin/env bash
# Builds rackserve and runs every test: units, goldens, GPU tests (they skip without a GPU) and
# the end-to-end tests with the official openai npm client. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash third_party/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure --timeout 1800
