// Admission control: with --max-queue 1, a second request while one is in flight gets 529
// overloaded_error (Anthropic) / 429 (OpenAI) with retry headers, and is served once the first ends.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, readSse, MODELS } from './server.mjs';

let server;
before(async () => {
  server = await startServer(['--model', `${MODELS}/qwen3-tiny`, '--max-queue', '1', '--prefill-chunk', '256', '--max-batch-tokens', '256',
    '--ping-interval-ms', '200']);
});
after(async () => server && server.stop());

const post = (path, body) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

// Resolves once the server reports `n` requests holding an admission slot. A fixed sleep is not
// enough on a loaded machine: the previous test's request may still be letting go of its slot,
// or the next one may not have arrived yet.
async function inFlight(n) {
  const want = new RegExp(`^agentkv_requests_in_flight ${n}(\\.0+)?$`, 'm');
  for (let i = 0; i < 1000; ++i) {
    if (want.test(await (await fetch(`${server.url}/metrics`)).text())) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`never saw ${n} request(s) holding the admission slot`);
}

test('Q1 queue full: 529 overloaded_error / 429, then served again', async () => {
  // A long prompt keeps the first request busy in prefill for a while.
  const long = 'word '.repeat(6000);
  await inFlight(0);
  const first = post('/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: long }] });
  await inFlight(1);
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

// cpp-httplib tells a handler nothing about a client that leaves; the server watches the socket
// of a non-streaming request and cancels its generation within a step or so, in prefill (a long
// prompt) as in decoding (a short one).
for (const [route, prompt] of [['/v1/messages', 'word '.repeat(3000)], ['/v1/chat/completions', 'hi']]) {
  test(`Q2 an aborted non-streaming request (${route}, ${prompt.length} chars) is cancelled, and its slot is free again`, async () => {
    const finished = () => [...server.log().matchAll(/output_tokens=(\d+) .*finish=(\w+)/g)].map((m) => ({ output: +m[1], finish: m[2] }));
    const before = finished().length;
    const controller = new AbortController();
    const body = { model: 'm', max_tokens: 4000, temperature: 0, messages: [{ role: 'user', content: prompt }] };
    const request = fetch(`${server.url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: controller.signal });
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(finished().length, before, 'the request ended before the abort; make it longer');
    const abortedAt = Date.now();
    controller.abort();
    await assert.rejects(request, { name: 'AbortError' });
    while (finished().length === before && Date.now() - abortedAt < 5000) await new Promise((r) => setTimeout(r, 20));
    const elapsed = Date.now() - abortedAt;
    const last = finished().at(-1);
    assert.equal(finished().length, before + 1, server.log());
    assert.equal(last.finish, 'cancelled');
    assert.ok(last.output < 4000, JSON.stringify(last));
    assert.ok(elapsed < 2000, `cancelled ${elapsed} ms after the abort`);
    const again = await post(route, { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(again.status, 200);
  });
}

test('Q3 a long prefill is kept alive with ping events after message_start', async () => {
  const res = await post('/v1/messages', { model: 'm', max_tokens: 2, stream: true, messages: [{ role: 'user', content: 'ping '.repeat(10000) }] });
  assert.equal(res.status, 200);
  const events = await readSse(res);
  assert.equal(events[0].event, 'message_start');
  const firstBlock = events.findIndex((e) => e.event === 'content_block_start');
  const pings = events.slice(0, firstBlock).filter((e) => e.event === 'ping');
  assert.ok(pings.length >= 1, events.map((e) => e.event).join(','));
  for (const p of pings) assert.deepEqual(p.data, { type: 'ping' });
  assert.equal(events.at(-1).event, 'message_stop');
});

test('Q4 a burst of 25 count_tokens calls (Claude Code\'s /context) is answered while a generation holds the only slot', async () => {
  await inFlight(0);
  const first = post('/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'other '.repeat(6000) }] });
  await inFlight(1);
  const busy = await post('/v1/messages', { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(busy.status, 529);  // the slot is taken
  const counts = await Promise.all(Array.from({ length: 25 }, (_, i) =>
    post('/v1/messages/count_tokens?beta=true', { model: 'm', tools: [], messages: [{ role: 'user', content: `section ${i} `.repeat(i + 1) }] })));
  for (const r of counts) assert.equal(r.status, 200);
  const tokens = await Promise.all(counts.map((r) => r.json()));
  for (let i = 1; i < tokens.length; ++i) assert.ok(tokens[i].input_tokens > tokens[i - 1].input_tokens);
  assert.equal((await first).status, 200);
});
