#!/usr/bin/env bash
# The whole GPU suite and the issue-5 benchmarks in one go on an H200 machine (with the in-graph
# cost of each kernel of a batch-1 step), summary table last.
#   tests/gpu/run_gpu_suite.sh [--bin DIR] [--out DIR] [--quick]
# --bin DIR: use prebuilt rackserve and rackserve_tests from DIR (or DIR/bins.tgz); otherwise
#            configure and build here (cmake + ninja; RS_VENDORED_DEPS=.gpu-build if present).
# Logs and JSON go to --out (default $OUT, else ./gpu-suite-out).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN="" ; OUTDIR="${OUT:-$ROOT/gpu-suite-out}" ; QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUTDIR"
# Test binaries carry the source tree's absolute fixture path; make it resolve here too.
FIXDIR_BAKED=/work/main
if [ ! -e "$FIXDIR_BAKED" ]; then mkdir -p "$(dirname $FIXDIR_BAKED)" && ln -s "$ROOT" "$FIXDIR_BAKED"; fi

if [ -n "$BIN" ]; then
  if [ -f "$BIN/bins.tgz" ]; then mkdir -p /tmp/rs-bin && tar xzf "$BIN/bins.tgz" -C /tmp/rs-bin && BIN=/tmp/rs-bin; fi
else
  VENDOR=""; [ -d "$ROOT/.gpu-build" ] && VENDOR="-DRS_VENDORED_DEPS=$ROOT/.gpu-build"
  cmake -S . -B /tmp/rs-build -G Ninja -DCMAKE_BUILD_TYPE=Release $VENDOR > "$OUTDIR/build.log" 2>&1 &&
    ninja -C /tmp/rs-build -j"$(nproc)" rackserve rackserve_tests >> "$OUTDIR/build.log" 2>&1 ||
    { tail -30 "$OUTDIR/build.log"; exit 1; }
  BIN=/tmp/rs-build; cp /tmp/rs-build/tests/rackserve_tests "$BIN/" 2>/dev/null
fi
RS="$BIN/rackserve"; TESTS="$BIN/rackserve_tests"
# The spin-wait self-test launches this binary; NCCL comes from the image's wheel where
# /usr/lib has none.
export RS_RACKSERVE_BINARY=$RS NCCL_NVLS_ENABLE=0
if [ -z "${RS_NCCL_LIBRARY:-}" ] && ! ldconfig -p | grep -q libnccl.so.2; then
  RS_NCCL_LIBRARY=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
  export RS_NCCL_LIBRARY
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUTDIR/gpu.txt"

declare -a ROWS
echo "== GPU tests: every gpu.* suite in its own process (a suite that traps on purpose cannot poison the next)"
SUITES=$("$TESTS" --list-test-suites --no-intro 2>/dev/null | grep -E '^gpu\.' | sort -u)
[ -z "$SUITES" ] && SUITES="gpu*"
for S in $SUITES; do
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1} NCCL_NVLS_ENABLE=0 timeout 300 "$TESTS" --test-suite="$S" --no-intro \
    > "$OUTDIR/tests_$S.log" 2>&1
  TRC=$?
  grep -E "^\[gpu|ERROR|FAILED|CHECK|REQUIRE|values:" "$OUTDIR/tests_$S.log" | head -40
  ROWS+=("tests $S|$(grep 'test cases' "$OUTDIR/tests_$S.log" | tail -1 | sed 's/\[doctest\] //') rc=$TRC")
done
cat "$OUTDIR"/tests_*.log > "$OUTDIR/gpu_tests.log" 2>/dev/null

echo "== end to end: generate on cuda vs cpu, and the server on the GPU backend"
G_ARGS="--model $ROOT/tests/fixtures/models/tiny-v3 --prompt-ids 5,17,300,42,7,99 --max-tokens 12 --print-ids --ignore-eos"
GC=$(CUDA_VISIBLE_DEVICES=0 timeout 60 "$RS" generate $G_ARGS --device cuda 2>"$OUTDIR/generate_cuda.err" | tail -1)
GP=$(timeout 120 "$RS" generate $G_ARGS --device cpu 2>"$OUTDIR/generate_cpu.err" | tail -1)
echo "generate cuda: $GC"; echo "generate cpu:  $GP"
ROWS+=("generate tiny-v3 cuda vs cpu|$([ -n "$GC" ] && [ "$GC" = "$GP" ] && echo "same 12 greedy ids" || echo "DIFFERENT or failed (cuda '$GC' cpu '$GP')")")
PORT=18123
CUDA_VISIBLE_DEVICES=0 "$RS" serve --port $PORT --device cuda > "$OUTDIR/serve.log" 2>&1 &
SPID=$!
SERVE_RESULT=$(python3 - "$PORT" <<'PY' 2>&1
import json, sys, time, threading, urllib.request
port = sys.argv[1]; base = f"http://127.0.0.1:{port}"
for _ in range(120):
    try:
        models = json.load(urllib.request.urlopen(base + "/v1/models", timeout=2)); break
    except Exception:
        time.sleep(0.5)
else:
    print("server did not come up"); sys.exit(0)
name = models["data"][0]["id"]
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
out, errs = [], []
def one(i):
    try:
        r = post("/v1/completions", {"model": name, "prompt": f"Request {i}: the quick brown fox", "max_tokens": 16,
                                     "temperature": 0, "ignore_eos": True})
        out.append(r["usage"]["completion_tokens"])
    except Exception as e:
        errs.append(str(e))
ts = [threading.Thread(target=one, args=(i,)) for i in range(12)]
[t.start() for t in ts]; [t.join() for t in ts]
c = post("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0.7, "seed": 3})
# The GPU sampler's guided-decoding mask and logit bias, end to end: JSON mode pushed towards "}".
close = post("/tokenize", {"prompt": "}", "add_special_tokens": False})["tokens"][0]
j = post("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "JSON"}], "max_tokens": 20,
                                  "temperature": 0, "response_format": {"type": "json_object"}, "logit_bias": {str(close): 100}})
jm = j["choices"][0]["message"]["content"]
json_ok = json.loads(jm) == {} and j["choices"][0]["finish_reason"] == "stop"
free = post("/v1/completions", {"model": name, "prompt": "Hi", "max_tokens": 16, "temperature": 1.0, "seed": 4,
                                "response_format": {"type": "json_object"}})
ft = free["choices"][0]["text"]
prefix_ok = ft.lstrip().startswith("{")
print(f"{len(out)}/12 concurrent completions ok ({sum(out)} tokens), chat ok: {c['choices'][0]['finish_reason']}, "
      f"json mode {'ok' if json_ok and prefix_ok else 'FAILED ' + repr(jm) + ' ' + repr(ft)}, errors: {errs[:2]}")
PY
)
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
echo "serve: $SERVE_RESULT"
ROWS+=("serve (embedded model) on cuda|$SERVE_RESULT")

CFG="$ROOT/tests/fixtures/model-shapes/deepseek-v2-lite/config.json"
bench() {  # name, args...
  local name="$1"; shift
  echo "== bench $name: rackserve bench forward $*"
  CUDA_VISIBLE_DEVICES=0 timeout 200 "$RS" bench forward --config "$CFG" --load-format dummy "$@" --json "$OUTDIR/$name.json" \
    > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  cat "$OUTDIR/$name.log" | tail -12
  if [ $rc -eq 0 ] && [ -f "$OUTDIR/$name.json" ]; then
    ROWS+=("$name|$(python3 -c "import json;d=json.load(open('$OUTDIR/$name.json'));print('%.1f tok/s  median %.3f ms  p90 %.3f ms  %.1f%% of copy BW  roofline %.0f tok/s'%(d['tokens_per_s'],d['median_ms'],d['p90_ms'],d['pct_of_copy_bw'],d['roofline_tokens_per_s']))" 2>/dev/null || echo ok)")
  else
    ROWS+=("$name|FAILED rc=$rc")
  fi
}
ITERS=20; [ $QUICK = 1 ] && ITERS=5
if [ "${RS_PROFILE_BENCH:-0}" = 1 ]; then  # per-op breakdown (eager steps) before the timed runs
  for args in "--phase decode --batch 1 --context 1024" "--phase decode --batch 64 --context 2048" "--phase prefill --batch 1 --context 8192"; do
    echo "== profile: $args"
    RS_CUDA_PROFILE=1 CUDA_VISIBLE_DEVICES=0 timeout 120 "$RS" bench forward --config "$CFG" --load-format dummy $args --iters 3 --warmup 1 2>&1 | grep -A40 "op profile" | head -30
  done
fi
bench decode_b1_ctx1k_bf16  --phase decode --batch 1 --context 1024 --iters $ITERS
bench decode_b1_ctx1k_fp8   --phase decode --batch 1 --context 1024 --quantization fp8 --iters $ITERS
# The same steps read one by one (no step launched before the last is read): what overlapping
# the host's work with the device's saves.
bench decode_b1_ctx1k_bf16_sync --phase decode --batch 1 --context 1024 --iters $ITERS --no-overlap
bench decode_b1_ctx1k_fp8_sync  --phase decode --batch 1 --context 1024 --quantization fp8 --iters $ITERS --no-overlap
# The batch-1 decode megakernel (kernels/mega/, opt-in while it is slower than the graph), with
# its time per kind of instruction.
RS_MEGAKERNEL=1 RS_MEGA_PROFILE=1 bench decode_b1_ctx1k_bf16_mega --phase decode --batch 1 --context 1024 --iters $ITERS
sed -n '/megakernel profile/,$p' "$OUTDIR/decode_b1_ctx1k_bf16_mega.log" | head -12
RS_MEGAKERNEL=1 bench decode_b1_ctx1k_fp8_mega --phase decode --batch 1 --context 1024 --quantization fp8 --iters $ITERS
bench decode_b64_ctx2k_bf16 --phase decode --batch 64 --context 2048 --iters $ITERS
bench decode_b64_ctx2k_bf16_sync --phase decode --batch 64 --context 2048 --iters $ITERS --no-overlap
bench prefill_8k_bf16       --phase prefill --batch 1 --context 8192 --iters 5 --warmup 1

# Where a batch-1 step goes inside its CUDA graph: each kernel's nodes disabled in turn, the
# graph replayed (the full tables are in the logs; the summary keeps the four largest).
for q in bf16 fp8; do
  qa=""; [ $q = fp8 ] && qa="--quantization fp8"
  echo "== bench forward --ablate: b1 ctx1K $q"
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$RS" bench forward --config "$CFG" --load-format dummy --phase decode \
    --batch 1 --context 1024 --iters 5 --ablate $qa > "$OUTDIR/ablate_b1_$q.log" 2>&1
  sed -n '/whole graph/,$p' "$OUTDIR/ablate_b1_$q.log" | head -16
  ROWS+=("in-graph b1 $q, us a node|$(grep -o 'whole graph [0-9.]* ms' "$OUTDIR/ablate_b1_$q.log"): $(sed -n '/us\/node/,$p' "$OUTDIR/ablate_b1_$q.log" | sed 1d | head -4 | awk '{sub(/<.*/, "", $4); printf "%s %s  ", $4, $3}')")
done

# When each kernel of one batch-1 graph replay ran (CUPTI): the overlap PDL buys and the bubbles.
for q in bf16 fp8; do
  qa=""; [ $q = fp8 ] && qa="--quantization fp8"
  echo "== bench forward --timeline: b1 ctx1K $q"
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$RS" bench forward --config "$CFG" --load-format dummy --phase decode \
    --batch 1 --context 1024 --iters 5 --timeline "$OUTDIR/timeline_b1_$q.csv" $qa > "$OUTDIR/timeline_b1_$q.log" 2>&1
  sed -n '/kernel timeline/,$p' "$OUTDIR/timeline_b1_$q.log" | head -18
  ROWS+=("timeline b1 $q|$(grep -o 'first start to last end.*' "$OUTDIR/timeline_b1_$q.log" || tail -1 "$OUTDIR/timeline_b1_$q.log")")
done

echo "== bench mla-prefill (attention kernel alone)"
CUDA_VISIBLE_DEVICES=0 timeout 120 "$RS" bench mla-prefill --iters 20 > "$OUTDIR/mla_prefill.log" 2>&1
tail -8 "$OUTDIR/mla_prefill.log"
ROWS+=("mla-prefill kernel 8K|$(grep -E '^\s*8K|8192' "$OUTDIR/mla_prefill.log" | head -1 | tr -s ' ')")

# The comm layer's fused AR+residual+RMSNorm variants side by side with the plain one-shot
# (7168 bf16 = 14K), when two GPUs are visible.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for v in auto whole-row; do
    echo "== bench allreduce --tp 2 --sizes 14K --fused-variant $v"
    CUDA_VISIBLE_DEVICES=0,1 timeout 60 "$RS" bench allreduce --tp 2 --dtype bf16 --reps 31 --sizes 1K,14K,28K \
      --fused-variant $v $([ $v = auto ] || echo --no-nccl) > "$OUTDIR/allreduce_$v.log" 2>&1
    cat "$OUTDIR/allreduce_$v.log" | tail -12
    # The first 14K row is the chained table's (graph/eager us): oneshot fused twoshot trayfirst
    # nccl auto, what auto picks, fused - oneshot, best vs NCCL.
    ROWS+=("allreduce 14K chained ($v)|$(grep -E '^\s*14K' "$OUTDIR/allreduce_$v.log" | head -1 | tr -s ' ' |
      awk '{printf "1shot %s fused %s 2shot %s nccl %s | fused-1shot %s | vs nccl %s", $2, $3, $4, $6, $9, $10}')")
  done
fi

# Online serving at V2-Lite shapes (random weights, config-only directory): one client at a time
# (interactive latency) and 64 concurrent clients (throughput), 1024-token prompts, 128 out.
echo "== bench serve: V2-Lite dummy weights on the GPU"
SPORT=18124
start_server() {  # log name, extra serve flags...
  local log="$1"; shift
  CUDA_VISIBLE_DEVICES=0 "$RS" serve --model "$ROOT/tests/fixtures/model-shapes/deepseek-v2-lite" --load-format dummy \
    --port $SPORT --device cuda --max-model-len 4096 --max-num-seqs 64 "$@" > "$OUTDIR/$log.log" 2>&1 &
  SPID=$!
  for _ in $(seq 1 240); do grep -q "ready in" "$OUTDIR/$log.log" 2>/dev/null && break; kill -0 $SPID 2>/dev/null || break; sleep 0.5; done
}
start_server serve_v2lite
serve_bench() {  # name, args...
  local name="$1"; shift
  timeout 180 "$RS" bench serve --base-url http://127.0.0.1:$SPORT --input-len 1024 --output-len 128 "$@" \
    --json "$OUTDIR/$name.json" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  tail -12 "$OUTDIR/$name.log"
  if [ $rc -eq 0 ]; then
    ROWS+=("$name|$(python3 -c "import json;d=json.load(open('$OUTDIR/$name.json'));print('%d/%d ok  %.0f out tok/s  %.0f total tok/s  TTFT median %.1f ms  TPOT median %.2f ms'%(d['completed'],d['num_prompts'],d['output_throughput'],d['total_token_throughput'],d['ttft']['median_ms'],d['tpot']['median_ms']))" 2>/dev/null || echo ok)")
  else
    ROWS+=("$name|FAILED rc=$rc $(tail -1 "$OUTDIR/$name.log")")
  fi
}
overlapped_steps() {  # the server's overlapped_steps_total counter
  python3 -c "import urllib.request,re;m=urllib.request.urlopen('http://127.0.0.1:$SPORT/metrics').read().decode();print(int(float(re.search(r'^\S*overlapped_steps_total(?:\{[^}]*\})? (\S+)',m,re.M).group(1))))" 2>/dev/null || echo "?"
}
# Penalised requests: their decode steps chain too (the token in flight counted on the device).
PENALTIES="--frequency-penalty 0.5 --presence-penalty 0.3 --repetition-penalty 1.1"
serve_bench serve_v2lite_c1  --num-prompts 8 --max-concurrency 1
serve_bench serve_v2lite_c64 --num-prompts 256 --max-concurrency 64
OV0=$(overlapped_steps)
serve_bench serve_v2lite_c64_penalties --num-prompts 256 --max-concurrency 64 $PENALTIES
OV1=$(overlapped_steps)
overlap_row() {  # name, before, after: FAILED when the run chained no step
  local verdict="ok"
  { [ "$2" = "?" ] || [ "$3" = "?" ] || [ "$3" -le "$2" ]; } && verdict="FAILED: no step overlapped"
  ROWS+=("$1|$verdict, $2 -> $3 (overlapped_steps_total)")
}
overlap_row "overlapped steps, penalties c64" "$OV0" "$OV1"
# More clients than --max-num-seqs (64): requests queue, and the running ones still chain.
serve_bench serve_v2lite_c96 --num-prompts 288 --max-concurrency 96
OV2=$(overlapped_steps)
overlap_row "overlapped steps, c96 (64 run)" "$OV1" "$OV2"
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
# The same server reading each step before launching the next (--no-overlap-steps).
start_server serve_v2lite_sync --no-overlap-steps
serve_bench serve_v2lite_c1_sync  --num-prompts 8 --max-concurrency 1
serve_bench serve_v2lite_c64_sync --num-prompts 256 --max-concurrency 64
serve_bench serve_v2lite_c64_penalties_sync --num-prompts 256 --max-concurrency 64 $PENALTIES
serve_bench serve_v2lite_c96_sync --num-prompts 288 --max-concurrency 96
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null

echo
echo "== summary (targets: decode b1 ctx1K bf16 >= 565 tok/s; fp8 >= 1.6x bf16; b64 ctx2K >= 4500 tok/s; prefill 8K >= 50000 tok/s)"
printf '%-30s | %s\n' "what" "result"
for r in "${ROWS[@]}"; do printf '%-30s | %s\n' "${r%%|*}" "${r#*|}"; done
