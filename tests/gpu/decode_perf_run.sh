#!/usr/bin/env bash
# One device call for the decode-perf work: prebuilt binaries (bins.tgz from the build machine,
# else a build here), the gpu.cuda suite, the issue-5 forward benchmarks, an A/B of the decode
# attention kernel (RS_MLA_DECODE=wmma: the previous kernel) and eager per-op profiles.
#   tests/gpu/decode_perf_run.sh BINS_TGZ_DIR   (logs under $OUT)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD; O=${OUT:-$ROOT/decode-perf-out}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
if [ ! -e /work/main ]; then mkdir -p /work && ln -s "$ROOT" /work/main; fi
B=/tmp/rs-bin; mkdir -p $B
if [ -f "$1/bins.tgz" ] && tar xzf "$1/bins.tgz" -C $B && $B/rackserve --help >/dev/null 2>&1; then el "prebuilt binaries"
else
  el "building here"; cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DRS_VENDORED_DEPS=$ROOT/.gpu-build > $O/build.log 2>&1 &&
  ninja -C /tmp/b -j32 rackserve rackserve_tests >> $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
  cp /tmp/b/rackserve $B/; cp /tmp/b/tests/rackserve_tests $B/; el "built"
fi
export CUDA_VISIBLE_DEVICES=0
CFG=$ROOT/tests/fixtures/model-shapes/deepseek-v2-lite/config.json
bench() { local n=$1; shift; timeout 60 $B/rackserve bench forward --config $CFG --load-format dummy "$@" --json $O/$n.json > $O/$n.log 2>&1
  echo "$n rc=$? [$(( $(date +%s) - T0 ))s] $(python3 -c "import json;d=json.load(open('$O/$n.json'));print('%.1f tok/s median %.3f ms p90 %.3f ms %.1f%% of copy BW roofline %.0f tok/s'%(d['tokens_per_s'],d['median_ms'],d['p90_ms'],d['pct_of_copy_bw'],d['roofline_tokens_per_s']))" 2>/dev/null)" | tee -a $O/summary.txt; }
timeout 100 $B/rackserve_tests --test-suite=gpu.cuda --no-intro > $O/tests.log 2>&1; echo "gpu.cuda rc=$? $(grep 'test cases' $O/tests.log | tail -1)" | tee -a $O/summary.txt
grep -E "ERROR|FAILED|CHECK|values:" $O/tests.log | head -20; el tests
bench b1_bf16 --phase decode --batch 1 --context 1024
bench b64_bf16 --phase decode --batch 64 --context 2048
RS_MLA_DECODE=wmma bench b1_bf16_wmma --phase decode --batch 1 --context 1024
RS_MLA_DECODE=wmma bench b64_bf16_wmma --phase decode --batch 64 --context 2048
bench b1_fp8 --phase decode --batch 1 --context 1024 --quantization fp8
el benches
for a in "--batch 1 --context 1024" "--batch 64 --context 2048"; do
  RS_CUDA_PROFILE=1 timeout 60 $B/rackserve bench forward --config $CFG --load-format dummy --phase decode $a --iters 3 --warmup 1 > "$O/profile_${a// /_}.log" 2>&1
  el "profile $a"
done
bench prefill_8k --phase prefill --batch 1 --context 8192 --iters 5 --warmup 1
if grep -q "FAILED\|ERROR" $O/tests.log; then RS_MLA_DECODE=wmma timeout 100 $B/rackserve_tests --test-suite=gpu.cuda --no-intro > $O/tests_wmma.log 2>&1; echo "gpu.cuda (wmma kernel) rc=$? $(grep 'test cases' $O/tests_wmma.log | tail -1)" | tee -a $O/summary.txt; fi
el done; cat $O/summary.txt
