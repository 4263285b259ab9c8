// Tools, long prompts and multi-turn cache reuse against a tiny random Qwen3-architecture model
// with the real Qwen3 tokenizer and chat template (32K context): random weights, so only the
// protocol is asserted, and forced tool calls must still be valid thanks to the grammar.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startServer, MODELS, TESTDATA } from './server.mjs';

let server;
let anthropic;
let openai;
const model = 'qwen3-tiny';
const weatherTool = {
  name: 'get_weather',
  description: 'Weather for a city',
  input_schema: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    properties: {
      city: { type: 'string', maxLength: 40, pattern: '^[A-Z]' },
      days: { type: 'integer', exclusiveMinimum: 0 },
      unit: { type: 'string', enum: ['c', 'f'] },
    },
    required: ['city', 'unit'],
    additionalProperties: false,
  },
};

// Arguments long enough to arrive over many tokens: every property is required.
const formTool = {
  name: 'fill_form',
  description: 'Fill in a delivery form',
  input_schema: {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 8, maxLength: 16 },
      street: { type: 'string', minLength: 8, maxLength: 24 },
      zip: { type: 'integer' },
      country: { type: 'string', enum: ['NO', 'FR', 'PE'] },
      gift: { type: 'boolean' },
      notes: { type: 'string', minLength: 30, maxLength: 40 },
      items: { type: 'array', minItems: 2, maxItems: 3, items: { type: 'object', properties: { sku: { type: 'string', minLength: 4, maxLength: 6 }, n: { type: 'integer' } }, required: ['sku', 'n'] } },
    },
    required: ['name', 'street', 'zip', 'country', 'gift', 'notes', 'items'],
    additionalProperties: false,
  },
};

before(async () => {
  server = await startServer(['--model', `${MODELS}/qwen3-tiny`, '--served-model-name', model, '--max-batch-tokens', '2048', '--prefill-chunk', '2048']);
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'any', maxRetries: 0 });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'any', maxRetries: 0 });
});
after(async () => server && server.stop());

function checkWeatherInput(input) {
  assert.equal(typeof input, 'object');
  assert.equal(typeof input.city, 'string');
  assert.ok(['c', 'f'].includes(input.unit), JSON.stringify(input));
  for (const k of Object.keys(input)) assert.ok(['city', 'days', 'unit'].includes(k), k);
  if ('days' in input) assert.ok(Number.isInteger(input.days));
}

test('T1 forced tool (tool_choice tool): one valid tool_use block, stop_reason tool_use', async () => {
  const msg = await anthropic.messages.create({
    model, max_tokens: 200, temperature: 0, tools: [weatherTool], tool_choice: { type: 'tool', name: 'get_weather' },
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
  });
  const calls = msg.content.filter((b) => b.type === 'tool_use');
  assert.equal(calls.length, 1, JSON.stringify(msg.content));
  assert.equal(calls[0].name, 'get_weather');
  assert.match(calls[0].id, /^(toolu_|call_)/);
  checkWeatherInput(calls[0].input);
  assert.equal(msg.stop_reason, 'tool_use');
});

test('T2 forced tool streamed: one block per call, input_json_delta concatenates to the input', async () => {
  const stream = anthropic.messages.stream({
    model, max_tokens: 200, temperature: 0, tools: [weatherTool], tool_choice: { type: 'any' },
    messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  });
  let partial = '';
  let starts = 0;
  for await (const ev of stream) {
    if (ev.type === 'content_block_start' && ev.content_block.type === 'tool_use') starts++;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') partial += ev.delta.partial_json;
  }
  const final = await stream.finalMessage();
  assert.equal(starts, 1);
  const call = final.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(JSON.parse(partial), call.input);
  checkWeatherInput(call.input);
});

test('T3 tool round trip: turn 2 reuses turn 1 (prompt and generated tokens) from the cache', async () => {
  // The conversation is named (an agent id): turns are reused within their own conversation only.
  const options = { headers: { 'x-agent-id': 't3-conversation' } };
  const messages = [{ role: 'user', content: 'Weather in Rome? Use the tool.' }];
  const first = await anthropic.messages.create({ model, max_tokens: 200, temperature: 0, tools: [weatherTool], tool_choice: { type: 'any' }, messages }, options);
  const call = first.content.find((b) => b.type === 'tool_use');
  const turn1Tokens = first.usage.input_tokens + first.usage.cache_read_input_tokens;
  messages.push({ role: 'assistant', content: first.content });
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'sunny, 24C', is_error: false, cache_control: { type: 'ephemeral' } }] });
  const second = await anthropic.messages.create({ model, max_tokens: 5, temperature: 0, tools: [weatherTool], messages }, options);
  const { input_tokens } = await anthropic.messages.countTokens({ model, tools: [weatherTool], messages }, options);
  const u = second.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, input_tokens);
  // Everything of turn 1 that fills whole KV blocks (16 tokens) is reused.
  assert.ok(u.cache_read_input_tokens >= Math.floor((turn1Tokens + first.usage.output_tokens - 1) / 16) * 16 - 16, JSON.stringify({ u, turn1Tokens, out: first.usage.output_tokens }));
});

test('T4 OpenAI tool_choice required through the stream helper: valid tool_calls', async () => {
  const runner = openai.chat.completions.stream({
    model, max_tokens: 200, temperature: 0, tool_choice: 'required',
    tools: [{ type: 'function', function: { name: weatherTool.name, description: weatherTool.description, parameters: weatherTool.input_schema } }],
    messages: [{ role: 'user', content: 'Weather in Lima?' }],
  });
  const done = await runner.finalChatCompletion();
  const choice = done.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  assert.equal(choice.message.tool_calls[0].type, 'function');
  checkWeatherInput(JSON.parse(choice.message.tool_calls[0].function.arguments));
});

test('T5 the real Claude Code request (about 12K tokens): count_tokens, then a streamed turn whose usage adds up', async () => {
  const body = JSON.parse(readFileSync(`${TESTDATA}/../docs/claude-code-request-sample.json`, 'utf8'));
  body.model = model;
  const { input_tokens } = await anthropic.messages.countTokens({ model, messages: body.messages, system: body.system, tools: body.tools });
  assert.ok(input_tokens > 8000, `only ${input_tokens} tokens`);
  const res = await fetch(`${server.url}/v1/messages?beta=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14', 'x-api-key': 'any', 'x-claude-code-session-id': 'cc-session-1' },
    body: JSON.stringify({ ...body, max_tokens: 8, stream: true }),
  });
  assert.equal(res.status, 200);
  const text = await res.text();
  const events = text.split('\n\n').filter((e) => e.startsWith('event: ')).map((e) => ({ name: e.slice(7, e.indexOf('\n')), data: JSON.parse(e.slice(e.indexOf('data: ') + 6)) }));
  assert.equal(events.filter((e) => e.name === 'message_start').length, 1);
  assert.equal(events.at(-1).name, 'message_stop');
  const u = events.find((e) => e.name === 'message_delta').data.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, input_tokens);
  await new Promise((r) => setTimeout(r, 300));  // the request's log line follows its last byte
  assert.match(server.log(), /agent=cc-session-1/);
});

test('T6 a long forced call streams its input in many input_json_delta pieces that add up to the non-streamed input', async () => {
  const body = {
    model, max_tokens: 400, temperature: 0, tools: [formTool], tool_choice: { type: 'tool', name: 'fill_form' },
    messages: [{ role: 'user', content: 'Send the parcel to Oslo.' }],
  };
  const stream = anthropic.messages.stream(body);
  const snapshots = [];
  stream.on('inputJson', (_partial, snapshot) => snapshots.push(snapshot));
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalMessage();
  const starts = events.filter((e) => e.type === 'content_block_start');
  const toolStart = starts.find((e) => e.content_block.type === 'tool_use');
  assert.deepEqual(toolStart.content_block.input, {});
  assert.equal(toolStart.content_block.name, 'fill_form');
  assert.deepEqual(starts.map((e) => e.index), [...starts.keys()]);  // indexes 0, 1, 2...
  const deltas = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta');
  assert.ok(deltas.length > 5, `only ${deltas.length} input_json_delta events`);
  assert.ok(deltas.every((d) => d.index === toolStart.index));
  const joined = deltas.map((d) => d.delta.partial_json).join('');
  const call = final.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(JSON.parse(joined), call.input);
  assert.deepEqual(snapshots.at(-1), call.input);
  assert.ok(snapshots.length > 1);
  assert.equal(final.stop_reason, 'tool_use');
  assert.ok(call.input.notes.length >= 30 && call.input.items.length >= 2, JSON.stringify(call.input));
  const plain = await anthropic.messages.create(body);
  assert.deepEqual(plain.content.find((b) => b.type === 'tool_use').input, call.input);
});

test('T7 OpenAI: the first tool_calls delta names the call, argument fragments follow and add up to the non-streamed arguments', async () => {
  const body = {
    model, max_tokens: 400, temperature: 0, tool_choice: { type: 'function', function: { name: 'fill_form' } },
    tools: [{ type: 'function', function: { name: formTool.name, description: formTool.description, parameters: formTool.input_schema } }],
    messages: [{ role: 'user', content: 'Send the parcel to Lima.' }],
  };
  const stream = await openai.chat.completions.create({ ...body, stream: true });
  const toolDeltas = [];
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice?.delta?.tool_calls) toolDeltas.push(...choice.delta.tool_calls);
    if (choice?.finish_reason) finish = choice.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  const [first, ...rest] = toolDeltas;
  assert.equal(first.index, 0);
  assert.match(first.id, /^call_/);
  assert.equal(first.type, 'function');
  assert.equal(first.function.name, 'fill_form');
  assert.equal(first.function.arguments, '');
  assert.ok(rest.length > 5, `only ${rest.length} argument fragments`);
  for (const d of rest) {
    assert.equal(d.index, 0);
    assert.equal(d.id, undefined);
    assert.equal(d.function.name, undefined);
  }
  const args = rest.map((d) => d.function.arguments).join('');
  const plain = await openai.chat.completions.create(body);
  const call = plain.choices[0].message.tool_calls[0];
  assert.equal(args, call.function.arguments);
  assert.equal(typeof JSON.parse(args), 'object');
});

// A prefill that opens <think> makes even the random model reason (the Qwen3 template's tags).
const thinkingTurn = [{ role: 'user', content: 'Think first.' }, { role: 'assistant', content: '<think>\n' }];

test('T8 reasoning streams in a thinking block only, with one signature_delta just before its stop', async () => {
  const stream = anthropic.messages.stream({ model, max_tokens: 12, temperature: 0, messages: thinkingTurn });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalMessage();
  const open = new Map();
  for (const [i, ev] of events.entries()) {
    if (ev.type === 'content_block_start') open.set(ev.index, ev.content_block.type);
    if (ev.type === 'content_block_delta') {
      const want = { text_delta: 'text', thinking_delta: 'thinking', signature_delta: 'thinking', input_json_delta: 'tool_use' }[ev.delta.type];
      assert.equal(open.get(ev.index), want, JSON.stringify(ev));
      if (ev.delta.type === 'signature_delta') assert.equal(events[i + 1].type, 'content_block_stop');
    }
  }
  const thinking = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'thinking_delta');
  assert.ok(thinking.length > 0);
  assert.equal(events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'signature_delta').length, 1);
  assert.equal(final.content[0].type, 'thinking');
  assert.equal(final.content[0].thinking, thinking.map((e) => e.delta.thinking).join(''));
});

test('T9 thinking display "omitted": no reasoning is sent, streamed or not', async () => {
  const body = { model, max_tokens: 12, temperature: 0, thinking: { type: 'adaptive', display: 'omitted' }, messages: thinkingTurn };
  const plain = await anthropic.messages.create(body);
  assert.ok(plain.content.every((b) => b.type !== 'thinking'), JSON.stringify(plain.content));
  assert.equal(plain.usage.output_tokens, 12);
  const stream = anthropic.messages.stream(body);
  const types = [];
  for await (const ev of stream) types.push(ev.delta?.type ?? ev.content_block?.type ?? ev.type);
  assert.ok(!types.includes('thinking') && !types.includes('thinking_delta'), types.join(','));
  assert.equal(types.at(-1), 'message_stop');
});

test('T10 tool results: text and tool_result in one user turn, array content, is_error, empty signatures in history', async () => {
  const messages = [
    { role: 'user', content: 'List the files.' },
    { role: 'assistant', content: [
      { type: 'thinking', thinking: 'use the tool', signature: '' },
      { type: 'redacted_thinking', data: '' },
      { type: 'text', text: 'Listing.' },
      { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Oslo', unit: 'c' } },
      { type: 'tool_use', id: 'toolu_02', name: 'get_weather', input: { city: 'Rome', unit: 'f' } },
    ] },
    { role: 'user', content: [
      { type: 'text', text: 'Here you go:' },
      { type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'sunny' }, { type: 'text', text: '24C' }] },
      { type: 'tool_result', tool_use_id: 'toolu_02', content: 'no such city', is_error: true, cache_control: { type: 'ephemeral', ttl: '1h' } },
    ] },
  ];
  const msg = await anthropic.messages.create({ model, max_tokens: 3, temperature: 0, tools: [weatherTool], messages });
  const { input_tokens } = await anthropic.messages.countTokens({ model, tools: [weatherTool], messages });
  const u = msg.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, input_tokens);
  const s = await anthropic.messages.stream({ model, max_tokens: 3, temperature: 0, tools: [weatherTool], messages }).finalMessage();
  assert.equal(s.usage.output_tokens, 3);
});

test('T11 schemas with format, propertyNames, $schema and \\p{..} patterns compile for a forced call', async () => {
  const tool = {
    name: 'Edit',
    input_schema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', additionalProperties: false,
      propertyNames: { pattern: '^[a-z_]+$' },
      properties: {
        file_path: { type: 'string', format: 'uri-reference', maxLength: 30 },
        label: { type: 'string', pattern: '^\\p{L}+$', maxLength: 10 },
        when: { type: 'string', format: 'date-time', maxLength: 25 },
      },
      required: ['file_path', 'label'],
    },
  };
  const msg = await anthropic.messages.create({ model, max_tokens: 120, temperature: 0, tools: [tool], tool_choice: { type: 'tool', name: 'Edit' }, messages: [{ role: 'user', content: 'Edit a.txt' }] });
  const call = msg.content.find((b) => b.type === 'tool_use');
  assert.equal(call.name, 'Edit');
  assert.equal(typeof call.input.file_path, 'string');
  assert.equal(typeof call.input.label, 'string');
  assert.equal(msg.stop_reason, 'tool_use');
});
