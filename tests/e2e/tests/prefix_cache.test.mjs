// A second request sharing a long prefix hits the prefix cache (/metrics counts the hits) and
// gives the same greedy output as a server with prefix caching off.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, metricsText, metric, startServer, MODEL } from './helpers.mjs';

const prefix = 'You are a careful assistant. ' + Array.from({ length: 40 }, (_, i) => `Rule ${i}: be precise about item ${i}.`).join(' ');
const req = (q) => ({ model: MODEL, prompt: `${prefix}\nQuestion: ${q}\nAnswer:`, max_tokens: 6, temperature: 0, ignore_eos: true });

test('prefix cache: hits grow on a shared prefix and greedy output is unchanged', async (t) => {
  const c = client();
  const first = await c.completions.create(req('what is rule 3?'));
  const m0 = await metricsText();
  const hits0 = metric(m0, 'rackserve:prefix_cache_hits_total');
  const queries0 = metric(m0, 'rackserve:prefix_cache_queries_total');

  const second = await c.completions.create(req('what is rule 7?'));
  const again = await c.completions.create(req('what is rule 3?'));
  const m1 = await metricsText();
  const hits1 = metric(m1, 'rackserve:prefix_cache_hits_total');
  assert.ok(metric(m1, 'rackserve:prefix_cache_queries_total') > queries0);
  // The shared prefix is hundreds of tokens: many full blocks must have been reused.
  assert.ok(hits1 - hits0 >= 2 * 128, `only ${hits1 - hits0} cached tokens reused`);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 100);
  assert.equal(again.choices[0].text, first.choices[0].text);

  const off = await startServer(['--no-enable-prefix-caching', '--max-model-len', '1024']);
  t.after(() => off.stop());
  const c2 = client(off.url);
  const ref = await c2.completions.create(req('what is rule 7?'));
  assert.equal(second.choices[0].text, ref.choices[0].text);
  assert.equal(ref.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(metric(await metricsText(off.url), 'rackserve:prefix_cache_hits_total'), 0);
});
