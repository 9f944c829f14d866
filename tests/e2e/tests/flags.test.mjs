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
