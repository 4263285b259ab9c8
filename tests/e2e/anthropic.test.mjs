// The Anthropic SDK (@anthropic-ai/sdk 1.14.0) against agentkv serving stories260K (a real
// trained model, fallback template) at temperature 0. Protocol invariants, not prose.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import { startServer, readSse, TESTDATA } from './server.mjs';

let server;
let client;
const model = 'claude-opus-5-5';  // any id is accepted and echoed
const user = (text) => [{ role: 'user', content: text }];

before(async () => {
  server = await startServer(['--model', `${TESTDATA}/models/stories260K/hf`, '--api-key', 'test-key',
    '--backend', 'reference', '--ping-interval-ms', '200']);
  client = new Anthropic({ baseURL: server.url, apiKey: 'test-key', maxRetries: 0 });
});
after(async () => server && server.stop());

test('A1 non-streaming message: shape, echoed model, usage', async () => {
  const msg = await client.messages.create({ model, max_tokens: 20, temperature: 0, messages: user('Once upon a time') });
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, model);
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.content[0].type, 'text');
  assert.ok(msg.content[0].text.length > 0);
  assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason));
  for (const k of ['input_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens', 'output_tokens'])
    assert.equal(typeof msg.usage[k], 'number', k);
  assert.ok(msg.usage.output_tokens <= 20);
});

test('A2 streaming: one message_start, sequential blocks, final message equals non-streaming', async () => {
  const body = { model, max_tokens: 25, temperature: 0, messages: user('The cat') };
  const plain = await client.messages.create(body);
  const stream = client.messages.stream(body);
  const types = [];
  for await (const ev of stream) types.push(ev.type);
  const final = await stream.finalMessage();
  assert.equal(types.filter((t) => t === 'message_start').length, 1);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.deepEqual(final.content, plain.content);
  assert.equal(final.stop_reason, plain.stop_reason);
  assert.equal(final.usage.output_tokens, plain.usage.output_tokens);
});

test('A3 count_tokens equals the usage sum of the same request', async () => {
  const body = { model, messages: user('Lily went to the park with her mom'), system: 'Tell a story.' };
  const { input_tokens } = await client.messages.countTokens(body);
  const msg = await client.messages.create({ ...body, max_tokens: 5, temperature: 0 });
  const u = msg.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, input_tokens);
});

test('A4 a repeated prompt is served from the KV cache', async () => {
  const body = { model, max_tokens: 5, temperature: 0, messages: user('Tom had a big red ball and a small dog.') };
  await client.messages.create(body);
  const again = await client.messages.create(body);
  const total = again.usage.input_tokens + again.usage.cache_read_input_tokens;
  assert.ok(again.usage.cache_read_input_tokens >= total - 16, JSON.stringify(again.usage));
});

test('A5 string content and a one-element text block list render identically', async () => {
  const a = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'hello there' }] });
  const b = await client.messages.countTokens({ model, messages: [{ role: 'user', content: [{ type: 'text', text: 'hello there' }] }] });
  assert.equal(a.input_tokens, b.input_tokens);
});

test('A6 role system inside messages and a billing-header system block are accepted', async () => {
  const withHeader = await client.messages.countTokens({
    model,
    system: [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.332; cch=abc123;' }, { type: 'text', text: 'Be kind.' }],
    messages: [{ role: 'user', content: 'hi' }, { role: 'system', content: 'reminder' }],
  });
  const without = await client.messages.countTokens({
    model,
    system: [{ type: 'text', text: 'Be kind.' }],
    messages: [{ role: 'user', content: 'hi' }, { role: 'system', content: 'reminder' }],
  });
  assert.equal(withHeader.input_tokens, without.input_tokens);
});

test('A7 stop_sequences: stop_reason stop_sequence and the match is not in the text', async () => {
  const free = await client.messages.create({ model, max_tokens: 40, temperature: 0, messages: user('Once upon a time') });
  const text = free.content[0].text;
  const stop = text.slice(10, 14);
  const msg = await client.messages.create({ model, max_tokens: 40, temperature: 0, stop_sequences: [stop], messages: user('Once upon a time') });
  assert.equal(msg.stop_reason, 'stop_sequence');
  assert.equal(msg.stop_sequence, stop);
  assert.equal(msg.content[0].text, text.slice(0, text.indexOf(stop)));
});

test('A8 max_tokens: stop_reason max_tokens with exactly max_tokens output tokens', async () => {
  const msg = await client.messages.create({ model, max_tokens: 7, temperature: 0, messages: user('Once upon a time') });
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.usage.output_tokens, 7);
});

test('A9 unknown fields, betas, thinking history and metadata are accepted', async () => {
  const msg = await client.messages.create({
    model, max_tokens: 5, temperature: 0,
    thinking: { type: 'adaptive', display: 'omitted' },
    output_config: { effort: 'high' },
    context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    metadata: { user_id: JSON.stringify({ device_id: 'd', session_id: 'sess-1' }) },
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: 'anything' }, { type: 'redacted_thinking', data: 'zzz' }, { type: 'text', text: 'hello' }] },
      { role: 'user', content: [{ type: 'text', text: 'more', cache_control: { type: 'ephemeral' } }, { type: 'search_result', source: 'x' }] },
    ],
  }, { headers: { 'anthropic-beta': 'made-up-beta-2099-01-01,context-management-2025-06-27' } });
  assert.equal(msg.type, 'message');
});

test('A10 max_tokens 0 pre-warms the cache and returns no content', async () => {
  const body = { model, temperature: 0, messages: user('Sam saw a bird in the tall green tree today.') };
  const warm = await client.messages.create({ ...body, max_tokens: 0 });
  assert.deepEqual(warm.content, []);
  assert.equal(warm.usage.output_tokens, 0);
  const after = await client.messages.create({ ...body, max_tokens: 3 });
  assert.ok(after.usage.cache_read_input_tokens > 0);
});

test('A11 context overflow is a 400 with Anthropic\'s wording', async () => {
  const long = 'Once upon a time there was a dog. '.repeat(120);
  await assert.rejects(client.messages.create({ model, max_tokens: 10, messages: user(long) }), (err) => {
    assert.equal(err.status, 400);
    assert.match(err.message, /input length and `max_tokens` exceed context limit: \d+ \+ \d+ > 512/);
    return true;
  });
});

test('A12 max_tokens beyond the context is clamped, not refused', async () => {
  // The SDK insists on streaming for a max_tokens this large (as Claude Code does).
  const msg = await client.messages.stream({ model, max_tokens: 32000, temperature: 0, messages: user('Once upon a time') }).finalMessage();
  assert.ok(msg.usage.output_tokens + msg.usage.input_tokens + msg.usage.cache_read_input_tokens <= 512);
});

test('A13 models list and retrieve', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['agentkv']);
  const one = await client.models.retrieve('claude-sonnet-4-5');
  assert.equal(one.id, 'claude-sonnet-4-5');
  assert.equal(one.type, 'model');
});

test('A14 raw SSE: event lines, JSON type equals event name, cumulative usage', async () => {
  const res = await fetch(`${server.url}/v1/messages?beta=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'test-key', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 6, stream: true, temperature: 0, messages: user('Once') }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const events = await readSse(res);
  for (const e of events) assert.equal(e.data.type, e.event);
  const start = events.find((e) => e.event === 'message_start').data.message.usage;
  const delta = events.find((e) => e.event === 'message_delta').data.usage;
  assert.equal(delta.output_tokens, 6);
  assert.equal(delta.input_tokens + delta.cache_read_input_tokens, start.input_tokens + start.cache_read_input_tokens);
});

test('A15 an aborted stream cancels generation and the server keeps serving', async () => {
  const stream = client.messages.stream({ model, max_tokens: 400, temperature: 0, messages: user('Once upon a time') });
  let n = 0;
  for await (const ev of stream) {
    if (ev.type === 'content_block_delta' && ++n === 3) {
      stream.abort();
      break;
    }
  }
  await new Promise((r) => setTimeout(r, 300));
  assert.match(server.log(), /finish=cancelled/);
  const msg = await client.messages.create({ model, max_tokens: 3, temperature: 0, messages: user('hi') });
  assert.equal(msg.type, 'message');
});

test('A16 message_start carries the full, real usage (not zeros, no missing cache fields)', async () => {
  const res = await fetch(`${server.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'test-key', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 3, stream: true, temperature: 0, messages: user('Lily and Tom went out') }),
  });
  const events = await readSse(res);
  assert.equal(events[0].event, 'message_start');
  const u = events[0].data.message.usage;
  for (const k of ['input_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens', 'output_tokens'])
    assert.equal(typeof u[k], 'number', k);
  assert.ok(u.input_tokens + u.cache_read_input_tokens > 5, JSON.stringify(u));
  const { input_tokens } = await client.messages.countTokens({ model, messages: user('Lily and Tom went out') });
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, input_tokens);
});

test('A17 any anthropic-version (or none) is accepted; x-api-key wins over a Bearer token', async () => {
  for (const version of ['2099-12-31', 'garbage', null]) {
    const headers = { 'content-type': 'application/json', 'x-api-key': 'test-key', authorization: 'Bearer wrong-token' };
    if (version) headers['anthropic-version'] = version;
    const res = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers, body: JSON.stringify({ model, max_tokens: 1, messages: user('x') }) });
    assert.equal(res.status, 200, `anthropic-version ${version}`);
  }
});

test('A18 cache_control on short prefixes, with ttl, and at the top level is a no-op, never an error', async () => {
  const msg = await client.messages.create({
    model, max_tokens: 2, temperature: 0, cache_control: { type: 'ephemeral', ttl: '1h' },
    system: [{ type: 'text', text: 'Hi.', cache_control: { type: 'ephemeral', ttl: '5m' } }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'a', cache_control: { type: 'ephemeral', ttl: '1h' } }] }],
  });
  assert.equal(msg.type, 'message');
});

test('A19 a changing billing-header nonce does not bust the prefix cache', async () => {
  const system = (nonce) => [{ type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.332; cch=${nonce};` }, { type: 'text', text: 'You tell short stories about a girl named Lily and her dog.' }];
  const messages = user('Lily found a red ball in the garden and gave it to her dog.');
  await client.messages.create({ model, max_tokens: 1, temperature: 0, system: system('aaaa1111'), messages });
  const again = await client.messages.create({ model, max_tokens: 1, temperature: 0, system: system('bbbb2222'), messages });
  const total = again.usage.input_tokens + again.usage.cache_read_input_tokens;
  assert.ok(again.usage.cache_read_input_tokens >= total - 16, JSON.stringify(again.usage));
});

test('E1 bad JSON is a 400 invalid_request_error', async () => {
  const res = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': 'test-key', 'content-type': 'application/json' }, body: '{"model": ' });
  assert.equal(res.status, 400);
  const body = await res.json();
  assert.equal(body.type, 'error');
  assert.equal(body.error.type, 'invalid_request_error');
});

test('E2 a missing field is a 400 naming it', async () => {
  await assert.rejects(client.messages.create({ model, messages: user('x') }), (err) => {
    assert.equal(err.status, 400);
    assert.match(err.message, /max_tokens/);
    return true;
  });
});

test('E3 a wrong key is a 401, with either header', async () => {
  const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 1, messages: user('x') }), (err) => err.status === 401);
  const res = await fetch(`${server.url}/v1/messages/count_tokens`, { method: 'POST', headers: { authorization: 'Bearer test-key' }, body: JSON.stringify({ model, messages: user('x') }) });
  assert.equal(res.status, 200);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
});

test('E4 unknown route is a 404 in the error envelope', async () => {
  const res = await fetch(`${server.url}/v1/nothing`, { headers: { 'x-api-key': 'test-key', 'anthropic-version': '2023-06-01' } });
  assert.equal(res.status, 404);
  assert.equal((await res.json()).error.type, 'not_found_error');
  // A base URL ending in /v1 (a common setup mistake) gets told so.
  const doubled = await fetch(`${server.url}/v1/v1/messages`, { method: 'POST', headers: { 'x-api-key': 'test-key' }, body: '{}' });
  assert.equal(doubled.status, 404);
  assert.match((await doubled.json()).error.message, /base URL should not end in \/v1/);
});

test('E5 an oversized body is a 413', async () => {
  const res = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': 'test-key', 'content-type': 'application/json' }, body: 'x'.repeat(33 * 1024 * 1024) });
  assert.equal(res.status, 413);
  assert.equal((await res.json()).error.type, 'request_too_large');
});

test('E6 an invalid agent id header is a 400 naming the header', async () => {
  await assert.rejects(
    client.messages.create({ model, max_tokens: 1, messages: user('x') }, { headers: { 'x-agent-id': '../../etc/passwd' } }),
    (err) => err.status === 400 && /x-agent-id/.test(err.message));
});

test('A-thread the tool runner\'s default threading is refused as the SDK expects, and it resends unthreaded', async () => {
  // The runner's first turn carries thread: {type: "create"}; agentkv keeps no threads and
  // answers 400 with error.details {error_code: "thread_unsupported_request"}, on which the SDK
  // drops the thread and sends every turn whole. Before, a continue turn was answered from its
  // new messages alone.
  const echo = betaTool({ name: 'echo', description: 'Echo the text back',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    run: (input) => input.text });
  const runner = client.beta.messages.toolRunner({ model, max_tokens: 8, temperature: 0, tools: [echo],
    messages: user('Once upon a time'), max_iterations: 2 });
  let final;
  for await (const message of runner) final = message;
  assert.equal(final.type, 'message');
  assert.ok(final.content.length >= 1);
  const raw = await fetch(`${server.url}/v1/messages`, { method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'test-key', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 4, messages: user('hi'), thread: { type: 'create' } }) });
  assert.equal(raw.status, 400);
  const err = await raw.json();
  assert.equal(err.error.type, 'invalid_request_error');
  assert.deepEqual(err.error.details, { error_code: 'thread_unsupported_request', unsupported: ['thread'] });
});
