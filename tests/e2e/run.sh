#!/usr/bin/env bash
# End-to-end tests: the real rackserve binary (embedded default model, CPU or GPU) on loopback,
# driven by the official openai npm client (node:test). Called by ctest with the binary path.
set -euo pipefail
bin=$(realpath "${1:?usage: run.sh path/to/rackserve}")
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ ! -d node_modules/openai ]; then npm install --silent --no-audit --no-fund; fi

log=$(mktemp)
# The shared server: small context so the "too long" case is cheap; keep-alive comments often
# enough to be observable in a test.
# The CPU reference by default: deterministic and batch-invariant, which the "identical to one
# at a time" checks rely on. RACKSERVE_E2E_DEVICE=auto|cuda runs the same tests on a GPU.
export RACKSERVE_E2E_DEVICE=${RACKSERVE_E2E_DEVICE:-cpu}
"$bin" serve --port 0 --device "$RACKSERVE_E2E_DEVICE" --max-model-len 1024 --max-num-seqs 64 --sse-keepalive 0.05 2>"$log" &
pid=$!
cleanup() {
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT

url=""
for _ in $(seq 1 600); do
  url=$(grep -o 'listening on http://[0-9.:]*' "$log" | head -1 | sed 's/listening on //') || true
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "e2e: server exited before listening"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$log"; echo "e2e: server never printed its address"; exit 1; }
for _ in $(seq 1 600); do
  code=$(node -e 'fetch(process.argv[1]).then(r=>console.log(r.status)).catch(()=>console.log(0))' "$url/health")
  [ "$code" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "e2e: server exited while loading"; exit 1; }
  sleep 0.1
done
[ "$code" = 200 ] || { cat "$log"; echo "e2e: /health never became 200"; exit 1; }
echo "e2e: server ready at $url"

status=0
RACKSERVE_URL="$url" RACKSERVE_BIN="$bin" node --test --test-concurrency=1 tests/ || status=$?
if [ $status -ne 0 ]; then echo "---- server log ----"; tail -50 "$log"; fi
exit $status
