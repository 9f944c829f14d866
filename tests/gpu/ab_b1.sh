#!/usr/bin/env bash
# Batch-1 decode A/B by environment switch in one device call: optional gpu.* suites, then
# `bench forward` (V2-Lite shapes, dummy weights, context 1K, 60 steps) for every variant and
# weight type, alternating, ROUNDS times (absolute step times drift ~1% between calls, so compare
# inside one), then one CUPTI timeline each; the medians last.
#   tests/gpu/ab_b1.sh BIN_DIR     (rackserve and rackserve_tests, or a bins.tgz holding them)
# Environment:
#   VARIANTS  "name:ENV=V,ENV2=V name2:..."  (default "base:RS_NONE=0", the binary's defaults);
#             a value's own commas written as '+' (RS_CARVEOUT=gemv=100+experts=100)
#   QUANTS    "bf16 fp8" (default)   ROUNDS 3 (default)   TIMELINE 1 (default) or 0
#   SUITES    gpu.* suites to run first, e.g. "gpu.cuda gpu.experts" (default none)
#   BENCH_ARGS more `bench forward` arguments for every run, e.g. "--repeat-step" (default none)
#   OUT       logs (default /tmp/ab-b1)
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
BIN=$(cd "${1:?usage: tests/gpu/ab_b1.sh BIN_DIR}" && pwd) || exit 2
if [ -f "$BIN/bins.tgz" ]; then mkdir -p /tmp/ab-b1-bin && tar xzf "$BIN/bins.tgz" -C /tmp/ab-b1-bin && BIN=/tmp/ab-b1-bin; fi
RS=$BIN/rackserve
TESTS=$BIN/rackserve_tests
# Test binaries carry the source tree's absolute fixture path.
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$ROOT" /work/main; }
export NCCL_NVLS_ENABLE=0 RS_RACKSERVE_BINARY=$RS
CFG=$ROOT/tests/fixtures/model-shapes/deepseek-v2-lite/config.json
O=${OUT:-/tmp/ab-b1}
mkdir -p "$O"
VARIANTS=${VARIANTS:-base:RS_NONE=0}
QUANTS=${QUANTS:-bf16 fp8}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader

for S in ${SUITES:-}; do
  timeout 300 "$TESTS" --test-suite="$S" --no-intro > "$O/tests_$S.log" 2>&1
  echo "== $S rc=$? $(grep 'test cases' "$O/tests_$S.log" | tail -1)"
  grep -E '^\[gpu|ERROR|FAILED|values:' "$O/tests_$S.log" | grep -v "tiny-v" | head -40
done

env_of() { echo "${1#*:}" | tr ',' ' ' | tr '+' ','; }
quant_args() { [ "$1" = fp8 ] && echo "--quantization fp8"; }
declare -A MEDIANS
for _ in $(seq 1 "${ROUNDS:-3}"); do
  for v in $VARIANTS; do
    for q in $QUANTS; do
      # shellcheck disable=SC2046  # the variant's switches and the quantization flag split on purpose
      env $(env_of "$v") timeout 120 "$RS" bench forward --config "$CFG" --load-format dummy --phase decode \
        --batch 1 --context 1024 --iters 60 $(quant_args "$q") ${BENCH_ARGS:-} --json "$O/step.json" > "$O/step.log" 2>&1 ||
        { echo "bench ${v%%:*} $q failed"; tail -5 "$O/step.log"; }
      m=$(python3 -c "import json;print('%.3f'%json.load(open('$O/step.json'))['median_ms'])" 2>/dev/null)
      MEDIANS[$v/$q]="${MEDIANS[$v/$q]:-} ${m:-?}"
      rm -f "$O/step.json"
    done
  done
done

if [ "${TIMELINE:-1}" = 1 ]; then
  for v in $VARIANTS; do
    for q in $QUANTS; do
      # shellcheck disable=SC2046
      env $(env_of "$v") timeout 120 "$RS" bench forward --config "$CFG" --load-format dummy --phase decode \
        --batch 1 --context 1024 --iters 5 --timeline "$O/timeline.csv" $(quant_args "$q") ${BENCH_ARGS:-} > "$O/timeline_${v%%:*}_$q.log" 2>&1
      echo "== timeline ${v%%:*} $q"
      sed -n '/kernel timeline/,$p' "$O/timeline_${v%%:*}_$q.log" | head -16
    done
  done
fi

echo "== b1 step medians, ms (60 steps each, one per round)"
for k in "${!MEDIANS[@]}"; do echo "$k:${MEDIANS[$k]}"; done | sort
