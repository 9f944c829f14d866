// SIGTERM: the server stops accepting, lets the running request finish, and exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, drainCompletion, startServer, MODEL } from './helpers.mjs';

test('SIGTERM drains the running stream and exits 0', async () => {
  const s = await startServer(['--max-model-len', '256', '--shutdown-timeout', '60']);
  const c = client(s.url);
  const stream = await c.completions.create({ model: MODEL, prompt: 'drain me', max_tokens: 24, temperature: 0, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();  // the stream is running
  assert.equal(first.done, false);
  s.proc.kill('SIGTERM');
  let text = first.value.choices[0]?.text ?? '', finish = null, n = 1;
  for (;;) {
    const { value, done } = await it.next();
    if (done) break;
    n++;
    for (const ch of value.choices) { text += ch.text ?? ''; if (ch.finish_reason) finish = ch.finish_reason; }
  }
  assert.equal(finish, 'length', 'the running request was not allowed to finish');
  const { code, signal } = await s.exited;
  assert.equal(signal, null);
  assert.equal(code, 0, s.log());
  assert.match(s.log(), /SIGTERM/);
  await assert.rejects(fetch(`${s.url}/health`));
});

test('SIGTERM with nothing running exits 0 promptly', async () => {
  const s = await startServer(['--max-model-len', '256']);
  const t0 = Date.now();
  s.proc.kill('SIGTERM');
  const { code } = await s.exited;
  assert.equal(code, 0);
  assert.ok(Date.now() - t0 < 10_000);
});

test('SIGTERM past --shutdown-timeout cancels what still runs, ends its stream, exits 0', async () => {
  const s = await startServer(['--max-model-len', '1024', '--shutdown-timeout', '0.5']);
  const c = client(s.url);
  const stream = await c.completions.create({ model: MODEL, prompt: 'long', max_tokens: 1000, temperature: 0, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  assert.equal((await it.next()).done, false);
  const t0 = Date.now();
  s.proc.kill('SIGTERM');
  let finish = null;
  for (;;) {
    const { value, done } = await it.next();
    if (done) break;
    for (const ch of value.choices) if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'abort');
  const { code } = await s.exited;
  assert.equal(code, 0, s.log());
  assert.ok(Date.now() - t0 < 15_000, 'the drain did not respect --shutdown-timeout');
});

test('SIGTERM while the model is still loading exits 0', async () => {
  const { spawn } = await import('node:child_process');
  const proc = spawn(process.env.RACKSERVE_BIN, ['serve', '--port', '0', '--device', process.env.RACKSERVE_E2E_DEVICE ?? 'cpu'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  await new Promise((resolve) => proc.stderr.on('data', (d) => { log += d; if (log.includes('listening on')) resolve(); }));
  // The listener is up before the weights: /health says 503 now, and a signal must still end cleanly.
  const url = log.match(/listening on (http:\/\/[0-9.:]+)/)[1];
  const health = await fetch(`${url}/health`);
  if (!log.includes('ready in')) assert.equal(health.status, 503);
  proc.kill('SIGTERM');
  const { code, signal } = await exited;
  assert.equal(signal, null);
  assert.equal(code, 0, log);
});
