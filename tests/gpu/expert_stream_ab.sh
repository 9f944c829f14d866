#!/usr/bin/env bash
# A/B of the few-token expert kernels on one H200: the streaming kernels (expert_stream.cuh,
# RS_EXPERT_STREAM=1) against the register-load ones (default), side by side in one process
# run each, V2-Lite shapes, batch 1 (and 2 for FP8), context 1K, bf16 and FP8, with the in-graph
# per-kernel cost (--ablate); gpu.experts first (its streaming cases force the path on).
#   tests/gpu/expert_stream_ab.sh [--bin DIR]   (DIR holds rackserve and rackserve_tests)
# Prints one line per run and the expert rows of each ablation; logs go to $OUT (or /tmp).
set -u
cd "$(dirname "$0")/../.."
BIN=build
[ "${1:-}" = "--bin" ] && BIN="$2"
O="${OUT:-/tmp}/expert_stream_ab"; mkdir -p "$O"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }  # fixture paths baked into the tests
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} NCCL_NVLS_ENABLE=0
timeout 120 "$BIN/rackserve_tests" --test-suite=gpu.experts --no-intro > "$O/tests_experts.log" 2>&1
echo "gpu.experts rc=$? $(grep 'test cases' "$O/tests_experts.log" | tail -1)"
grep -E "ERROR|timed out" "$O/tests_experts.log" | head -10
CFG=tests/fixtures/model-shapes/deepseek-v2-lite/config.json
for args in "--batch 1" "--batch 1 --quantization fp8" "--batch 2 --quantization fp8"; do
  for on in 0 1; do
    tag="stream${on}_$(echo "$args" | tr -d ' -')"
    RS_EXPERT_STREAM=$on timeout 90 "$BIN/rackserve" bench forward --config "$CFG" --load-format dummy --phase decode \
      --context 1024 --iters 20 --ablate $args > "$O/$tag.log" 2>&1
    echo "RS_EXPERT_STREAM=$on $args: rc=$? $(grep -E 'median' "$O/$tag.log" | tr -s ' ') |$(grep -E 'tokens/s$' "$O/$tag.log" | tr -s ' ')"
    grep -E "expert_(decode|stream)_(gate_up|down)_kernel" "$O/$tag.log" | head -2
  done
done
