// Every error status with OpenAI's error object: 400 (bad params, malformed JSON, invalid UTF-8,
// too long), 401, 404, 413, 429. The server keeps serving after each.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { client, postRaw, startServer, metricsText, metric, waitFor, MODEL, URL } from './helpers.mjs';

const c = client();

function assertErrorObject(r, status, param) {
  assert.equal(r.status, status, r.text);
  const e = r.json().error;
  assert.ok(e, `no error object in ${r.text}`);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e);
  if (param !== undefined) assert.equal(e.param, param);
  return e;
}

async function assertApiError(promise, status, param) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof OpenAI.APIError, `not an APIError: ${err}`);
    assert.equal(err.status, status);
    if (param !== undefined) assert.equal(err.param, param);
    assert.ok(err.message.length > 0);
    return true;
  });
}

test('400: malformed JSON, invalid UTF-8, non-object bodies', async () => {
  assertErrorObject(await postRaw('/v1/chat/completions', '{"messages": [', {}), 400);
  const bad = new Uint8Array([...Buffer.from('{"prompt": "'), 0xff, 0xfe, ...Buffer.from('"}')]);
  const e = assertErrorObject(await postRaw('/v1/completions', bad), 400);
  assert.match(e.message, /UTF-8/);
  assertErrorObject(await postRaw('/v1/completions', '"just a string"'), 400);
  // A million levels of nesting would overflow any recursive walk of the tree: refused up front.
  const deep = '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":' + '['.repeat(1e6) + ']'.repeat(1e6) + '}}';
  assertErrorObject(await postRaw('/v1/chat/completions', deep), 400);
  assert.equal((await fetch(`${URL}/health`)).status, 200);
});

test('400: each parameter is type- and range-checked and named', async () => {
  const base = { model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 2 };
  const cases = [
    [{ temperature: 'hot' }, 'temperature'], [{ temperature: 3 }, 'temperature'], [{ top_p: 0 }, 'top_p'],
    [{ top_p: 1.5 }, 'top_p'], [{ top_k: -2 }, 'top_k'], [{ min_p: 2 }, 'min_p'],
    [{ presence_penalty: 9 }, 'presence_penalty'], [{ frequency_penalty: -9 }, 'frequency_penalty'],
    [{ repetition_penalty: 0 }, 'repetition_penalty'], [{ n: 0 }, 'n'], [{ n: 'two' }, 'n'],
    [{ max_tokens: 0 }, 'max_tokens'], [{ max_completion_tokens: -1 }, 'max_completion_tokens'],
    [{ seed: 1.5 }, 'seed'], [{ stop: 5 }, 'stop'], [{ stop: [''] }, 'stop'], [{ stop_token_ids: [-1] }, 'stop_token_ids'],
    [{ logprobs: 'yes' }, 'logprobs'], [{ logprobs: true, top_logprobs: 50 }, 'top_logprobs'],
    [{ top_logprobs: 2 }, 'top_logprobs'], [{ stream: 'yes' }, 'stream'],
    [{ stream_options: { include_usage: true } }, 'stream_options'], [{ messages: [] }, 'messages'],
    [{ messages: 'hi' }, 'messages'], [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content[0].type'],
    [{ logit_bias: { 5: 101 } }, 'logit_bias'], [{ logit_bias: { x: 1 } }, 'logit_bias'],
    [{ logit_bias: { 99999999: 1 } }, 'logit_bias'], [{ logit_bias: { 5: 1, '05': 2 } }, 'logit_bias'],
    [{ logit_bias: [5] }, 'logit_bias'], [{ logit_bias: { 5: 'a' } }, 'logit_bias'],
    [{ min_tokens: 3 }, 'min_tokens'], [{ response_format: { type: 'json_schema', json_schema: {} } }, 'response_format'], [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^x' } } } } } }, 'response_format'], [{ min_tokens: -1 }, 'min_tokens'], [{ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }, 'tool_choice'],
    [{ tools: [{ type: 'function', function: { name: 'bad name' } }] }, 'tools[0].function.name'], [{ tools: {} }, 'tools'],
  ];
  for (const [extra, param] of cases) {
    const r = await postRaw('/v1/chat/completions', { ...base, ...extra });
    assertErrorObject(r, 400, param);
  }
  await assertApiError(c.completions.create({ model: MODEL, prompt: [1, 10 ** 7] }), 400, 'prompt');
  await assertApiError(c.completions.create({ model: MODEL, prompt: 'x', logprobs: 99 }), 400, 'logprobs');
});

test('400: a prompt longer than the context says the numbers', async () => {
  const long = 'hello '.repeat(1500);
  const r = await postRaw('/v1/completions', { model: MODEL, prompt: long, max_tokens: 4 });
  const e = assertErrorObject(r, 400, 'prompt');
  assert.match(e.message, /1024/);
  assert.match(e.message, /\d{4,} input tokens/);
  const r2 = await postRaw('/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 5000 });
  const e2 = assertErrorObject(r2, 400, 'max_tokens');
  assert.match(e2.message, /1024/);
  assert.match(e2.message, /5000 in the completion/);
});

test('404: unknown model (and unknown route)', async () => {
  await assertApiError(c.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }), 404, 'model');
  const r = await fetch(`${URL}/v1/nope`);
  assert.equal(r.status, 404);
  assert.ok((await r.json()).error);
});

test('413: a body over the limit', async () => {
  const big = JSON.stringify({ model: MODEL, prompt: 'a'.repeat(9 * 1024 * 1024) });
  assertErrorObject(await postRaw('/v1/completions', big), 413);
  const ok = await c.completions.create({ model: MODEL, prompt: 'still alive', max_tokens: 1 });
  assert.equal(ok.choices.length, 1);
});

test('401: --api-key requires the right Bearer key', async (t) => {
  const s = await startServer(['--api-key', 'k-123', '--max-model-len', '256']);
  t.after(() => s.stop());
  await assertApiError(client(s.url, 'wrong').models.list(), 401);
  const missing = await fetch(`${s.url}/v1/models`);
  assert.equal(missing.status, 401);
  assert.equal((await missing.json()).error.type, 'authentication_error');
  const list = await client(s.url, 'k-123').models.list();
  assert.equal(list.data[0].id, MODEL);
  assert.equal((await fetch(`${s.url}/health`)).status, 200);
});

test('429: the waiting queue is full', async (t) => {
  const s = await startServer(['--max-num-seqs', '1', '--max-queued-requests', '1', '--max-model-len', '512']);
  t.after(() => s.stop());
  const long = JSON.stringify({ model: MODEL, prompt: 'occupy', max_tokens: 400, ignore_eos: true, stream: true });
  const ac = new AbortController();
  const post = () => fetch(`${s.url}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: long, signal: ac.signal });
  // Streams being held must be read: an unread fetch body can be garbage-collected and its
  // connection closed, which (correctly) cancels the request and empties the queue.
  const readers = [];
  const keepReading = (res) => readers.push(res.body.pipeTo(new WritableStream()).catch(() => {}));
  try {
    const a = await post();  // A runs (streams answer 200 at once)
    assert.equal(a.status, 200);
    keepReading(a);
    await waitFor(async () => metric(await metricsText(s.url), 'rackserve:num_requests_running') === 1, { what: 'A to run' });
    // B and C race for the one queue slot: the second is refused with 429 and an error object.
    const [b, c2] = await Promise.all([post(), post()]);
    const refused = [b, c2].filter((r) => r.status === 429);
    for (const r of [b, c2]) if (r.status === 200) keepReading(r);
    assert.deepEqual([b.status, c2.status].sort(), [200, 429]);
    const e = (await refused[0].json()).error;
    assert.equal(e.code, 429);
    assert.equal(e.type, 'rate_limit_exceeded');
    // The official client surfaces it as an APIError with status 429 while the queue is full.
    await assertApiError(client(s.url).completions.create({ model: MODEL, prompt: 'x', max_tokens: 1 }), 429);
  } finally {
    ac.abort();
    await Promise.all(readers);
  }
});
