// Admission control: with --max-queue 1, a second request while one is in flight gets 529
// overloaded_error (Anthropic) / 429 (OpenAI) with retry headers, and is served once the first ends.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODELS } from './server.mjs';

let server;
before(async () => {
  server = await startServer(['--model', `${MODELS}/qwen3-tiny`, '--max-queue', '1', '--prefill-chunk', '256', '--max-batch-tokens', '256']);
});
after(async () => server && server.stop());

const post = (path, body) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('Q1 queue full: 529 overloaded_error / 429, then served again', async () => {
  // A long prompt keeps the first request busy in prefill for a while.
  const long = 'word '.repeat(6000);
  const first = post('/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: long }] });
  await new Promise((r) => setTimeout(r, 150));
  const second = await post('/v1/messages', { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(second.status, 529);
  assert.equal((await second.json()).error.type, 'overloaded_error');
  assert.equal(second.headers.get('x-should-retry'), 'true');
  const third = await post('/v1/chat/completions', { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(third.status, 429);
  assert.ok(third.headers.get('retry-after'));
  assert.equal((await first).status, 200);
  const again = await post('/v1/messages', { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(again.status, 200);
});
