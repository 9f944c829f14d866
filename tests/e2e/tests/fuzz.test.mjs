// Seeded random mutations of request bodies sent to the live server: every answer is a
// well-formed HTTP response (errors with an error object), and the server still serves after.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { URL, client, metricsText, metric, waitFor, MODEL } from './helpers.mjs';

function rng(seed) {  // mulberry32
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const seeds = [
  { path: '/v1/chat/completions', body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, temperature: 0 } },
  { path: '/v1/chat/completions', body: { messages: [{ role: 'system', content: 's' }, { role: 'user', content: [{ type: 'text', text: 'x' }] }], max_tokens: 2, stream: true, stream_options: { include_usage: true }, logprobs: true, top_logprobs: 2, stop: ['a'], seed: 3 } },
  { path: '/v1/completions', body: { model: MODEL, prompt: 'abc', max_tokens: 2, echo: true, logprobs: 1, n: 2 } },
  { path: '/v1/completions', body: { prompt: [[1, 2, 3], 'x'], max_tokens: 2, stop_token_ids: [5], stream: true } },
  { path: '/tokenize', body: { prompt: 'hello' } },
  { path: '/detokenize', body: { tokens: [1, 2, 3] } },
];
const nasty = [null, true, false, 0, -1, 1e308, -1e308, 2 ** 53, 0.5, '', 'x', '{{ raise_exception("x") }}', '{%', '\u0000',
  '<｜User｜>', [], {}, [1, 'a', null], { role: 'user' }, 'a'.repeat(3000)];

function mutate(v, r, depth = 0) {
  if (depth > 3 || r() < 0.25) return nasty[Math.floor(r() * nasty.length)];
  if (Array.isArray(v)) {
    const a = v.slice();
    if (a.length && r() < 0.5) a[Math.floor(r() * a.length)] = mutate(a[Math.floor(r() * a.length)], r, depth + 1);
    else if (r() < 0.5) a.push(nasty[Math.floor(r() * nasty.length)]);
    else a.pop();
    return a;
  }
  if (v && typeof v === 'object') {
    const o = { ...v };
    const keys = Object.keys(o);
    const k = keys[Math.floor(r() * keys.length)];
    if (k !== undefined && r() < 0.6) o[k] = mutate(o[k], r, depth + 1);
    else if (k !== undefined && r() < 0.5) delete o[k];
    else o[['n', 'stop', 'max_tokens', 'temperature', 'prompt', 'messages', 'stream', 'logprobs'][Math.floor(r() * 8)]] = nasty[Math.floor(r() * nasty.length)];
    return o;
  }
  return nasty[Math.floor(r() * nasty.length)];
}

function mutateText(s, r) {
  const b = Buffer.from(s);
  const n = 1 + Math.floor(r() * 3);
  let out = b;
  for (let i = 0; i < n; i++) {
    const pos = Math.floor(r() * (out.length + 1));
    const pick = r();
    if (pick < 0.3) out = Buffer.concat([out.subarray(0, pos), Buffer.from([Math.floor(r() * 256)]), out.subarray(pos)]);
    else if (pick < 0.6) out = Buffer.concat([out.subarray(0, pos), out.subarray(pos + 1 + Math.floor(r() * 5))]);
    else out = out.subarray(0, pos);
  }
  return out;
}

test('mutated bodies get answers, never a dead server', async () => {
  const r = rng(0xC0FFEE);
  const statuses = new Map();
  for (let i = 0; i < 300; i++) {
    const seed = seeds[Math.floor(r() * seeds.length)];
    let body = mutate(seed.body, r);
    // Bound the work a mutant may ask for; the cap itself is part of what is exercised.
    if (body && typeof body === 'object' && !Array.isArray(body) && r() < 0.9) body.max_tokens = 2;
    let payload = JSON.stringify(body) ?? 'null';
    if (r() < 0.3) payload = mutateText(payload, r);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 3000);  // a hang-up must be harmless as well
    try {
      const res = await fetch(`${URL}${seed.path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: payload, signal: ac.signal });
      const text = await res.text();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok([200, 400, 404, 413].includes(res.status), `status ${res.status} for ${payload}: ${text}`);
      if (res.status !== 200) assert.ok(JSON.parse(text).error, `no error object for ${payload}`);
    } catch (e) {
      if (e.name !== 'AbortError') throw e;
    } finally {
      clearTimeout(timer);
    }
  }
  assert.ok((statuses.get(400) ?? 0) > 20, `too few rejections: ${[...statuses]}`);
  assert.ok((statuses.get(200) ?? 0) > 5, `too few successes: ${[...statuses]}`);
  assert.equal((await fetch(`${URL}/health`)).status, 200);
  const ok = await client().completions.create({ model: MODEL, prompt: 'ok?', max_tokens: 1 });
  assert.equal(ok.choices.length, 1);
  await waitFor(async () => metric(await metricsText(), 'rackserve:num_requests_running') === 0, { what: 'fuzzed requests to end' });
});
