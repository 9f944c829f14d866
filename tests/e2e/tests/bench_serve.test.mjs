// `rackserve bench serve` against the shared server: the figures it reports must add up to the
// requests it sent, and a bad target must fail with a clear message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, URL, MODEL, client } from './helpers.mjs';

function run(args) {
  return new Promise((resolve) => {
    execFile(BIN, args, { timeout: 300_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
  });
}

test('bench serve reports every request with consistent token counts and latencies', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rs-bench-serve-'));
  const json = join(dir, 'out.json');
  const r = await run(['bench', 'serve', '--base-url', URL, '--num-prompts', '12', '--input-len', '20',
    '--output-len', '6', '--prefix-len', '4', '--max-concurrency', '4', '--request-rate', '50', '--json', json]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /successful requests\s+12 of 12/);
  const j = JSON.parse(readFileSync(json, 'utf8'));
  assert.equal(j.model, MODEL);
  assert.equal(j.completed, 12);
  assert.equal(j.failed, 0);
  assert.equal(j.input_tokens, 12 * 24);   // exact lengths: range ratio 0
  assert.equal(j.output_tokens, 12 * 6);   // ignore_eos: every request runs to max_tokens
  assert.ok(j.ttft.median_ms > 0 && j.ttft.median_ms <= j.e2e.median_ms);
  assert.ok(j.tpot.mean_ms > 0 && j.itl.mean_ms > 0);
  assert.ok(Math.abs(j.output_throughput - j.output_tokens / j.duration_s) < 1e-6 * j.output_throughput + 1e-9);
  // The model card carries the vocab size the benchmark draws its prompt ids from.
  const m = await client().models.list();
  assert.ok(m.data.some((x) => x.id === MODEL && x.vocab_size > 0));
});

test('bench serve fails clearly on a bad target or bad parameters', async () => {
  let r = await run(['bench', 'serve', '--base-url', 'http://127.0.0.1:1', '--num-prompts', '1']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /GET \/v1\/models on 127\.0\.0\.1:1/);
  r = await run(['bench', 'serve', '--base-url', URL, '--model', 'no-such-model']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /'no-such-model' is not served here/);
  r = await run(['bench', 'serve', '--base-url', URL, '--input-len', '2000', '--output-len', '10']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /over the model's max_model_len 1024/);
  r = await run(['bench', 'serve', '--base-url', URL, '--request-rate', '0']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--request-rate must be > 0/);
});
