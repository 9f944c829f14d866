// The API surface with the official client: models, chat and completions (plain and
// streaming, with usage), stop strings, seeds, logprobs, echo, n, tokenize/detokenize.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, postRaw, drainChat, drainCompletion, MODEL, URL } from './helpers.mjs';

const c = client();
const chatMsg = (s) => [{ role: 'user', content: s }];

test('GET /v1/models lists the embedded model and says its weights are random', async () => {
  const list = await c.models.list();
  assert.equal(list.data.length, 1);
  const m = list.data[0];
  assert.equal(m.id, MODEL);
  assert.equal(m.object, 'model');
  assert.equal(m.random_weights, true);
  assert.match(m.description, /RANDOM/);
});

test('chat: greedy non-streaming and streaming give the same text; usage adds up', async () => {
  const req = { model: MODEL, messages: chatMsg('Say something.'), max_tokens: 8, temperature: 0 };
  const r = await c.chat.completions.create(req);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

  const s = await drainChat(await c.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.text, r.choices[0].message.content);
  assert.equal(s.finish, r.choices[0].finish_reason);
  assert.deepEqual(
    [s.usage.prompt_tokens, s.usage.completion_tokens],
    [r.usage.prompt_tokens, r.usage.completion_tokens]);
});

test('completions: non-streaming and streaming agree; echo prepends the prompt', async () => {
  const req = { model: MODEL, prompt: 'The capital of France is', max_tokens: 6, temperature: 0, ignore_eos: true };
  const r = await c.completions.create(req);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  const s = await drainCompletion(await c.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.text, r.choices[0].text);
  assert.equal(s.usage.completion_tokens, 6);
  const e = await c.completions.create({ ...req, echo: true });
  assert.equal(e.choices[0].text, req.prompt + r.choices[0].text);
});

test('completions accept token ids and batches of prompts', async () => {
  const tok = (await postRaw('/tokenize', { prompt: 'Hello world' })).json();
  assert.equal(tok.count, tok.tokens.length);
  const byText = await c.completions.create({ model: MODEL, prompt: 'Hello world', max_tokens: 4, temperature: 0, ignore_eos: true });
  const byIds = await c.completions.create({ model: MODEL, prompt: tok.tokens, max_tokens: 4, temperature: 0, ignore_eos: true });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  const batch = await c.completions.create({ model: MODEL, prompt: ['Hello world', 'Goodbye'], max_tokens: 4, temperature: 0, ignore_eos: true });
  assert.equal(batch.choices.length, 2);
  assert.equal(batch.choices[0].text, byText.choices[0].text);
  assert.equal(batch.usage.completion_tokens, 8);
});

test('/tokenize and /detokenize round-trip', async () => {
  const t = (await postRaw('/tokenize', { prompt: 'Hello, rackserve!', add_special_tokens: false })).json();
  assert.ok(t.tokens.length > 1);
  assert.equal(t.max_model_len, 1024);
  const d = (await postRaw('/detokenize', { tokens: t.tokens })).json();
  assert.equal(d.prompt, 'Hello, rackserve!');
});

test('stop strings cut the text before the stop and report finish_reason stop', async () => {
  const req = { model: MODEL, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, ignore_eos: true };
  const full = (await c.completions.create(req)).choices[0].text;
  assert.ok(full.length >= 4, `need some text to cut, got ${JSON.stringify(full)}`);
  // A stop string from the middle of the greedy text: the output ends right before its first
  // occurrence.
  const k = Math.floor(full.length / 2);
  const stop = full.slice(k, k + 2);
  const cut = full.slice(0, full.indexOf(stop));
  const r = await c.completions.create({ ...req, stop: [stop] });
  assert.equal(r.choices[0].text, cut);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await drainCompletion(await c.completions.create({ ...req, stop, stream: true }));
  assert.equal(s.text, cut);
  assert.equal(s.finish, 'stop');
});

test('a seed makes sampling reproducible; different seeds explore', async () => {
  const req = { model: MODEL, messages: chatMsg('Pick a word.'), max_tokens: 8, temperature: 1.0, ignore_eos: true };
  const a = await c.chat.completions.create({ ...req, seed: 1234 });
  const b = await c.chat.completions.create({ ...req, seed: 1234 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const others = [];
  for (const seed of [1, 2, 3]) others.push((await c.chat.completions.create({ ...req, seed })).choices[0].message.content);
  assert.ok(others.some((t) => t !== a.choices[0].message.content), 'three other seeds all gave the same text');
});

test('logprobs: chat top_logprobs and completions logprobs; greedy picks the most likely', async () => {
  const r = await c.chat.completions.create({
    model: MODEL, messages: chatMsg('Hi'), max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-4, 'greedy token is not the most likely');
    assert.ok(Array.isArray(t.bytes));
  }
  const cr = await c.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 3, temperature: 0, ignore_eos: true, logprobs: 2 });
  const lp = cr.choices[0].logprobs;
  assert.equal(lp.tokens.length, 3);
  assert.equal(lp.token_logprobs.length, 3);
  assert.equal(Object.keys(lp.top_logprobs[0]).length <= 2, true);
  assert.equal(lp.text_offset[0], 0);
  // Echo with logprobs scores the prompt too: its first token has nothing before it.
  const ec = await c.completions.create({ model: MODEL, prompt: 'Hi there', max_tokens: 1, temperature: 0, echo: true, logprobs: 1 });
  const elp = ec.choices[0].logprobs;
  assert.equal(elp.token_logprobs[0], null);
  assert.ok(elp.token_logprobs.length >= 3);
  assert.ok(elp.token_logprobs.slice(1).every((v) => typeof v === 'number' && v <= 0));
});

test('logit_bias: +100 forces a token at any temperature, -100 bans it; logprobs stay raw', async () => {
  const id = (await postRaw('/tokenize', { prompt: ' rack', add_special_tokens: false })).json().tokens[0];
  const piece = (await postRaw('/detokenize', { tokens: [id] })).json().prompt;
  for (const temperature of [0, 1.0]) {
    const r = await c.completions.create({
      model: MODEL, prompt: 'Hi', max_tokens: 3, temperature, seed: 7, ignore_eos: true, logprobs: 1,
      logit_bias: { [id]: 100 },
    });
    assert.equal(r.choices[0].text, piece.repeat(3));
    // Raw logprobs of random weights over a 129K vocabulary: far from log(1) = 0.
    assert.ok(r.choices[0].logprobs.token_logprobs.every((v) => v < -1), 'logprob includes the bias');
  }
  const free = await c.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 1, temperature: 0, ignore_eos: true });
  const top = (await postRaw('/tokenize', { prompt: free.choices[0].text, add_special_tokens: false })).json().tokens[0];
  const banned = await c.completions.create({
    model: MODEL, prompt: 'Hi', max_tokens: 1, temperature: 0, ignore_eos: true, logit_bias: { [top]: -100 },
  });
  assert.notEqual(banned.choices[0].text, free.choices[0].text);
});

test('min_tokens: a stop token cannot end the choice before min_tokens', async () => {
  const free = await c.completions.create({ model: MODEL, prompt: [5, 17, 300], max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: 0 });
  // The greedy second token as a stop token ends the choice at two tokens...
  const second = (await postRaw('/tokenize', { prompt: free.choices[0].logprobs.tokens[1], add_special_tokens: false })).json().tokens;
  assert.equal(second.length, 1, 'the greedy second token re-tokenizes to one id');
  const stopped = await c.completions.create({
    model: MODEL, prompt: [5, 17, 300], max_tokens: 6, temperature: 0, ignore_eos: true, stop_token_ids: second });
  assert.equal(stopped.usage.completion_tokens, 2);
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  // ...unless min_tokens asks for more.
  const held = await c.completions.create({
    model: MODEL, prompt: [5, 17, 300], max_tokens: 6, temperature: 0, ignore_eos: true, stop_token_ids: second, min_tokens: 4 });
  assert.ok(held.usage.completion_tokens >= 4);
});

test('tools are accepted with the official client; a reply without calls is plain content', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const r = await c.chat.completions.create({ model: MODEL, messages: chatMsg('Weather in Paris?'), tools, max_tokens: 4, temperature: 0 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  // Earlier turns with tool calls and tool results render through the chat template.
  const r2 = await c.chat.completions.create({
    model: MODEL, tools, max_tokens: 2, temperature: 0, messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ],
  });
  assert.equal(r2.choices.length, 1);
});

test('tool_choice named and required: the random model is held to one call whose arguments match the parameters', async () => {
  const params = {
    type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] }, celsius: { type: 'boolean' } },
    required: ['city'], additionalProperties: false,
  };
  const tools = ['get_weather', 'get_time'].map((name) => ({ type: 'function', function: { name, parameters: params } }));
  for (const tool_choice of [{ type: 'function', function: { name: 'get_time' } }, 'required']) {
    const r = await c.chat.completions.create({
      model: MODEL, messages: chatMsg('What now?'), tools, tool_choice, max_tokens: 300, temperature: 1, seed: 3,
    });
    const ch = r.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
    assert.equal(ch.message.tool_calls.length, 1);
    const call = ch.message.tool_calls[0];
    if (typeof tool_choice === 'object') assert.equal(call.function.name, 'get_time');
    else assert.ok(['get_weather', 'get_time'].includes(call.function.name));
    const args = JSON.parse(call.function.arguments);
    assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
    assert.ok(args.celsius === undefined || typeof args.celsius === 'boolean');
  }
});

test('response_format json_object: the output is JSON; pushed towards "}", it is exactly {}', async () => {
  const close = (await postRaw('/tokenize', { prompt: '}', add_special_tokens: false })).json().tokens;
  assert.equal(close.length, 1);
  const r = await c.chat.completions.create({
    model: MODEL, messages: chatMsg('Reply in JSON'), max_tokens: 20, temperature: 0,
    response_format: { type: 'json_object' }, logit_bias: { [close[0]]: 100 },
  });
  assert.deepEqual(JSON.parse(r.choices[0].message.content), {});  // whitespace tokens may come between
  assert.equal(r.choices[0].finish_reason, 'stop');
  // Free sampling from random weights: whatever comes is an object or the start of one.
  const s = await drainChat(await c.chat.completions.create({
    model: MODEL, messages: chatMsg('Reply in JSON'), max_tokens: 12, temperature: 1, seed: 5, stream: true,
    response_format: { type: 'json_object' },
  }));
  assert.match(s.text, /^\s*\{/);
  if (s.finish === 'stop') assert.equal(typeof JSON.parse(s.text), 'object');
  else assert.equal(s.finish, 'length');
});

test('response_format json_schema: whatever the random model wants, the reply is a document the schema accepts', async () => {
  const schema = {
    type: 'object',
    properties: { answer: { enum: ['yes', 'no'] }, ok: { type: 'boolean' }, n: { type: ['boolean', 'null'] } },
    required: ['answer', 'ok'],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3]) {
    const r = await c.chat.completions.create({
      model: MODEL, messages: chatMsg('Reply in JSON'), max_tokens: 300, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } },
    });
    const text = r.choices[0].message.content;
    // The schema allows finitely many documents (whitespace runs are capped), so it must end.
    assert.equal(r.choices[0].finish_reason, 'stop', text);
    const j = JSON.parse(text);
    assert.ok(['yes', 'no'].includes(j.answer), text);
    assert.equal(typeof j.ok, 'boolean', text);
    assert.ok(j.n === undefined || j.n === null || typeof j.n === 'boolean', text);
    assert.deepEqual(Object.keys(j).filter((k) => !['answer', 'ok', 'n'].includes(k)), [], text);
  }
});

test('n = 2 returns two choices; with a seed they are reproducible', async () => {
  const req = { model: MODEL, prompt: 'Numbers:', max_tokens: 5, temperature: 1, seed: 7, n: 2, ignore_eos: true };
  const a = await c.completions.create(req);
  const b = await c.completions.create(req);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((x) => x.text), b.choices.map((x) => x.text));
  assert.equal(a.usage.completion_tokens, 10);
});

test('SSE framing: data frames, keep-alive comments while the prefill runs, [DONE] last', async () => {
  // run.sh starts the server with --sse-keepalive 0.05: a comment is due every 50 ms of silence.
  const t0 = Date.now();
  const res = await fetch(`${URL}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'x '.repeat(900), max_tokens: 3, temperature: 0, ignore_eos: true, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let body = '', firstDataMs = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    body += decoder.decode(value, { stream: true });
    if (firstDataMs === null && body.includes('data: ')) firstDataMs = Date.now() - t0;
  }
  const frames = body.split('\n\n').filter((f) => f.length > 0);
  assert.equal(frames.at(-1), 'data: [DONE]');
  for (const f of frames) assert.ok(f.startsWith('data: ') || f === ': keep-alive', `bad frame ${JSON.stringify(f)}`);
  // Only a prefill slower than a few intervals can be required to show comments (a GPU may
  // answer before the first one is due).
  const before = body.slice(0, body.indexOf('data: '));
  if (firstDataMs > 300) assert.match(before, /: keep-alive\n\n/, `no keep-alive in ${firstDataMs} ms of prefill`);
});
