// serve flags that change behaviour visible over HTTP: --served-model-name, --chat-template.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, postRaw, startServer } from './helpers.mjs';

test('--served-model-name and --chat-template (literal text) are honoured', async (t) => {
  const s = await startServer([
    '--max-model-len', '256', '--served-model-name', 'tiny', 'tiny-alias',
    '--chat-template', '{{ "T:" }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}',
  ]);
  t.after(() => s.stop());
  const names = (await client(s.url).models.list()).data.map((m) => m.id);
  assert.deepEqual(names, ['tiny', 'tiny-alias']);
  const tok = (await postRaw('/tokenize', { model: 'tiny-alias', messages: [{ role: 'user', content: 'hi' }] }, { base: s.url })).json();
  const text = (await postRaw('/detokenize', { model: 'tiny', tokens: tok.tokens }, { base: s.url })).json().prompt;
  assert.equal(text, 'T:[user]hi');
  const r = await client(s.url).chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ignore_eos: true });
  assert.equal(r.model, 'tiny');
  assert.equal(r.usage.prompt_tokens, tok.count);
});

test('--load-format dummy with a config-only model directory serves random weights with the embedded tokenizer', async (t) => {
  const { mkdtempSync, copyFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join, dirname } = await import('node:path');
  const { fileURLToPath } = await import('node:url');
  const here = dirname(fileURLToPath(import.meta.url));
  const dir = mkdtempSync(join(tmpdir(), 'rs-config-only-'));
  copyFileSync(join(here, '../../fixtures/models/tiny-v3/config.json'), join(dir, 'config.json'));
  const s = await startServer(['--model', dir, '--load-format', 'dummy', '--max-model-len', '256']);
  t.after(() => s.stop());
  const m = (await client(s.url).models.list()).data[0];
  assert.equal(m.id, dir);
  assert.equal(m.random_weights, true);
  assert.equal(m.vocab_size, 512);  // the config's vocabulary, not the tokenizer's
  const r = await client(s.url).completions.create({ model: dir, prompt: [5, 17, 300], max_tokens: 3, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 3);
  // Text the stand-in tokenizer encodes beyond the model's vocabulary is a clear 400.
  const bad = await postRaw('/v1/completions', { model: dir, prompt: 'hello world', max_tokens: 1 }, { base: s.url });
  assert.equal(bad.status, 400);
  assert.match(bad.json().error.message, /outside the vocabulary/);
});
