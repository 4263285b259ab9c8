// The OpenAI SDK (openai 7.57.0) against agentkv serving stories260K at temperature 0.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, TESTDATA } from './server.mjs';

let server;
let client;
const model = 'local-model';
const user = (text) => [{ role: 'user', content: text }];

before(async () => {
  server = await startServer(['--model', `${TESTDATA}/models/stories260K/hf`, '--api-key', 'k', '--backend', 'reference']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'k', maxRetries: 0 });
});
after(async () => server && server.stop());

test('O1 chat completion: shape and usage', async () => {
  const r = await client.chat.completions.create({ model, max_tokens: 12, temperature: 0, messages: user('Once upon a time') });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('O2 streaming with include_usage: role first, usage chunk with choices [], same text', async () => {
  const body = { model, max_tokens: 15, temperature: 0, messages: user('The dog') };
  const plain = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, []);
  assert.equal(usageChunk.usage.completion_tokens, 15);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, plain.choices[0].message.content);
  assert.ok(chunks.every((c) => c.id === chunks[0].id));
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
});

test('O3 a repeated prompt reports cached tokens', async () => {
  const body = { model, max_tokens: 3, temperature: 0, messages: user('Ben and Mia played with blocks all day long.') };
  await client.chat.completions.create(body);
  const again = await client.chat.completions.create(body);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0);
});

test('O4 stop strings end with finish_reason stop and are not in the text', async () => {
  const free = await client.chat.completions.create({ model, max_tokens: 30, temperature: 0, messages: user('Once upon a time') });
  const text = free.choices[0].message.content;
  const stop = text.slice(8, 11);
  const r = await client.chat.completions.create({ model, max_tokens: 30, temperature: 0, stop: [stop], messages: user('Once upon a time') });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
});

test('O5 legacy completions with text and with token ids', async () => {
  const a = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(a.object, 'text_completion');
  assert.equal(a.usage.completion_tokens, 8);
  const b = await client.completions.create({ model, prompt: [1, 403, 407, 261, 378], max_tokens: 8, temperature: 0 });
  assert.equal(b.choices[0].text, a.choices[0].text);
  const s = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.text ?? '';
  assert.equal(text, a.choices[0].text);
});

test('O6 models list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['agentkv']);
});

test('O7 errors use the OpenAI envelope', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'x' }] }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.error.type, 'invalid_request_error');
    assert.match(err.message, /messages\.0\.role/);
    return true;
  });
  const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model, messages: user('x') }), (err) => err.status === 401);
});

test('O8 seeded sampling is reproducible', async () => {
  const body = { model, max_tokens: 20, temperature: 0.9, seed: 1234, messages: user('Once upon a time') };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('O-system a leading system message is the system prompt: an Anthropic request with it as `system` renders the same prompt', async () => {
  // stories260K's fallback template renders the system turn; before, an OpenAI system message
  // became a <system-reminder> in the user turn, so the two dialects never shared a prompt.
  const system = 'Once upon a time there was a little dog named Tim who liked to run in the park.';
  const text = 'One day Tim saw a big red ball.';
  const anthropicOnce = () => fetch(`${server.url}/v1/messages`, { method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'k', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 1, temperature: 0, system, messages: user(text) }) }).then((r) => r.json());
  const anthropic = await anthropicOnce();
  const openai = await client.chat.completions.create({ model, max_tokens: 1, temperature: 0,
    messages: [{ role: 'system', content: system }, { role: 'user', content: text }] });
  assert.equal(openai.usage.prompt_tokens, anthropic.usage.input_tokens + anthropic.usage.cache_read_input_tokens);
  // The OpenAI request reads from the Anthropic request's KV what a repeat of it reads.
  const repeat = await anthropicOnce();
  assert.ok(repeat.usage.cache_read_input_tokens > 0);
  assert.equal(openai.usage.prompt_tokens_details.cached_tokens, repeat.usage.cache_read_input_tokens);
});
