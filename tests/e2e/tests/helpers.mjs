// Shared helpers for the e2e tests: clients, extra servers, /metrics parsing.
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

export const BIN = process.env.RACKSERVE_BIN;
export const URL = process.env.RACKSERVE_URL;
export const MODEL = 'deepseek-v3-tiny-random';

export function client(base = URL, apiKey = 'none') {
  // No retries: a 429 or 5xx must reach the test, not be hidden by the client.
  return new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });
}

export async function postRaw(path, body, { base = URL, headers = {}, signal } = {}) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
    signal,
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

export async function metricsText(base = URL) {
  const res = await fetch(`${base}/metrics`);
  return res.text();
}

// Sum of every sample of `name` (any labels) in Prometheus text.
export function metric(text, name) {
  let sum = 0, seen = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([^{\s]+)(\{[^}]*\})?\s+(\S+)$/);
    if (m && m[1] === name) { sum += Number(m[3]); seen = true; }
  }
  if (!seen) throw new Error(`metric ${name} not found`);
  return sum;
}

export async function waitFor(pred, { timeoutMs = 20_000, stepMs = 50, what = 'condition' } = {}) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

// Starts another server (own flags) on a free port; resolves once /health is 200.
export async function startServer(args = []) {
  const device = process.env.RACKSERVE_E2E_DEVICE ?? 'cpu';
  const proc = spawn(BIN, ['serve', '--port', '0', '--device', device, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on (http:\/\/[0-9.:]+)/);
      if (m) resolve(m[1]);
    });
    exited.then(() => reject(new Error(`server exited early:\n${log}`)));
  });
  proc.stderr.on('data', (d) => { log += d.toString(); });
  await waitFor(async () => {
    try { return (await fetch(`${url}/health`)).status === 200; } catch { return false; }
  }, { timeoutMs: 120_000, what: 'extra server /health' });
  return {
    url,
    proc,
    exited,
    log: () => log,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

// Every chunk of an openai stream: the concatenated text (textOf picks a choice's piece) and the
// last finish_reason / usage.
async function drainStream(stream, textOf) {
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      const piece = textOf(ch);
      if (piece) text += piece;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks };
}

export function drainChat(stream) {
  return drainStream(stream, (ch) => ch.delta?.content);
}

export function drainCompletion(stream) {
  return drainStream(stream, (ch) => ch.text);
}
