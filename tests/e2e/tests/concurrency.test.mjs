// 32 simultaneous streaming clients, a quarter of them hanging up mid-stream: the rest get the
// same greedy text as when each request runs alone, and afterwards every KV block is free and
// /metrics says so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, drainCompletion, metricsText, metric, waitFor, MODEL } from './helpers.mjs';

const c = client();
const N = 32;
const MAX_TOKENS = 6;
const request = (i) => ({
  model: MODEL,
  prompt: `Request ${i}: tell me about the number ${i * 7919}.`,
  max_tokens: MAX_TOKENS,
  temperature: 0,
  ignore_eos: true,
});

test('32 concurrent streams, some aborted: identical greedy outputs, all KV freed', async () => {
  const alone = [];
  for (let i = 0; i < N; i++) alone.push((await c.completions.create(request(i))).choices[0].text);

  const aborting = (i) => i % 4 === 3;
  const results = await Promise.allSettled(Array.from({ length: N }, async (_, i) => {
    const ac = new AbortController();
    const stream = await c.completions.create({ ...request(i), stream: true }, { signal: ac.signal });
    if (!aborting(i)) return drainCompletion(stream);
    // Hang up after the first content token.
    for await (const chunk of stream) {
      if (chunk.choices[0]?.text) { ac.abort(); break; }
    }
    return null;
  }));

  for (let i = 0; i < N; i++) {
    if (aborting(i)) continue;
    assert.equal(results[i].status, 'fulfilled', `stream ${i}: ${results[i].reason}`);
    assert.equal(results[i].value.text, alone[i], `stream ${i} differs from the same request run alone`);
    assert.equal(results[i].value.finish, 'length');
  }

  // Aborted requests are cancelled: nothing runs, nothing waits, no KV block is referenced.
  const text = await waitFor(async () => {
    const t = await metricsText();
    return metric(t, 'rackserve:num_requests_running') === 0 && metric(t, 'rackserve:num_requests_waiting') === 0 &&
      metric(t, 'rackserve:kv_cache_usage_perc') === 0 ? t : null;
  }, { what: 'KV blocks to be free after the streams' });
  assert.equal(metric(text, 'rackserve:kv_cache_blocks_used'), 0);
  assert.ok(metric(text, 'rackserve:kv_cache_blocks_total') > 0);
  assert.ok(metric(text, 'rackserve:time_to_first_token_seconds_count') >= N);
  assert.ok(metric(text, 'rackserve:e2e_request_latency_seconds_count') >= N);
  assert.ok(metric(text, 'rackserve:inter_token_latency_seconds_count') > 0);
});

test('a non-streaming client that hangs up cancels its request', async () => {
  const before = metric(await metricsText(), 'rackserve:generation_tokens_total');
  const ac = new AbortController();
  const pending = c.completions.create(
    { model: MODEL, prompt: 'a long answer please', max_tokens: 900, temperature: 0, ignore_eos: true },
    { signal: ac.signal });
  await waitFor(async () => metric(await metricsText(), 'rackserve:num_requests_running') === 1, { what: 'the request to run' });
  ac.abort();
  await assert.rejects(pending);
  const text = await waitFor(async () => {
    const t = await metricsText();
    return metric(t, 'rackserve:num_requests_running') === 0 && metric(t, 'rackserve:kv_cache_usage_perc') === 0 ? t : null;
  }, { what: 'the cancelled request to free its blocks' });
  assert.ok(metric(text, 'rackserve:generation_tokens_total') - before < 900, 'the request ran to the end');
});
