// The agent loop through the official SDKs' tool runners against agentkv serving the tiny trained
// agent model (models/agent-tiny): @anthropic-ai/sdk `client.beta.messages.toolRunner` (streamed
// and not) and openai `client.chat.completions.runTools`, with Write, Bash and Read implemented
// here in a temporary directory as Claude Code implements them. The requests are the ones the model
// was trained on (tools/agent_model/tasks.py): Claude Code's system prompt and tool definitions
// (tools/agent_model/claude_code_request.json), then the attribution reminder and the task in the
// user turn and the environment as a system message. Run by agent_e2e.sh after the CLI test.
//
// Per run, asserted at once: every reply stops with tool_use or end_turn (OpenAI tool_calls or
// stop), each reply's usage equals the server's log line for it (and the OpenAI runner's total
// their sum), and the tool_result turn reads >= 90% of its prompt from the KV cache. What the model
// wrote (which tool, the path, the text, the final answer) is a "miss" that runs the loop again in
// a fresh directory, at most 3 times, as in claude_code_agent.e2e.mjs (the model samples at
// temperature 1 and sometimes miscopies).
//
// The Anthropic runner keeps its default (threaded): agentkv refuses its `thread` field with
// error.details {error_code: "thread_unsupported_request"}, and the SDK sends every turn whole
// (the cache assert fails if a turn arrives without its history). The OpenAI request's leading
// system message is the system prompt, as Anthropic's `system` (server/openai_request.cpp).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import OpenAI from 'openai';
import { startServer } from './server.mjs';
import { untilNoMiss, workDir } from './agent_util.mjs';

const CC = JSON.parse(readFileSync(new URL('../../tools/agent_model/claude_code_request.json', import.meta.url), 'utf8'));
const MODEL = process.env.AGENTKV_AGENT_MODEL;
const KEY = 'local-key';
const MAX_TOKENS = 512;  // as the CLI test sets CLAUDE_CODE_MAX_OUTPUT_TOKENS
let server;
const dirs = [];  // the runs' directories (workDir), removed at the end

before(async () => {
  server = await startServer(['--model', MODEL, '--served-model-name', 'agent-tiny', '--api-key', KEY]);
});
after(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (server) await server.stop();
});

// --- The tools, as Claude Code runs them (results in its wording) -------------------------------

// Runs the tools of one loop in `work` and records each call.
function toolbox(work) {
  const calls = [];
  const run = {
    Write: ({ file_path, content }) => {
      writeFileSync(file_path, content);
      return `File created successfully at: ${file_path}`;
    },
    Bash: async ({ command }) => {
      const r = await promisify(execFile)('bash', ['-c', command], { cwd: work, encoding: 'utf8', timeout: 10000 })
        .catch((e) => e);
      const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
      return out || '(Bash completed with no output)';
    },
    Read: ({ file_path }) => {
      const lines = readFileSync(file_path, 'utf8').replace(/\n$/, '').split('\n');
      return lines.map((line, i) => `${String(i + 1).padStart(6)}\t${line}`).join('\n') + '\n';
    },
  };
  // A failing tool answers with Claude Code's error text (the OpenAI runner would throw).
  const invoke = async (name, input) => {
    calls.push({ name, input });
    try {
      return await run[name](input);
    } catch (e) {
      return `<tool_use_error>${e.message}</tool_use_error>`;
    }
  };
  return { work, calls, invoke, names: Object.keys(run) };
}

// --- The requests ---------------------------------------------------------------------------

// The environment message after the task (tasks.py Conversation.env): the working directory.
function envText(work) {
  return CC.messages[1].content[0].text.replace('/tmp/ccwork', work).replace('stub-model', 'agent-tiny');
}
const reminder = () => CC.messages[0].content[0];

function anthropicParams(prompt, box, stream) {
  const work = box.work;
  const { messages: _m, tools: _t, stream: _s, model: _model, ...options } = CC;
  const tools = CC.tools.map((t) => (box.names.includes(t.name)
    ? betaTool({ name: t.name, description: t.description, inputSchema: t.input_schema,
      run: (input) => box.invoke(t.name, input) })
    : t));
  const messages = [{ role: 'user', content: [reminder(), { type: 'text', text: prompt }] },
    { role: 'system', content: [{ type: 'text', text: envText(work) }] }];
  return { ...options, model: 'agent-tiny', max_tokens: MAX_TOKENS, tools, messages, stream, max_iterations: 4 };
}

// The same request in OpenAI's form: the system blocks (without Claude Code's billing header) as a
// system message, the tools as functions (deferred ones, which the Anthropic path drops, left out).
function openaiParams(prompt, box) {
  const system = CC.system.filter((b) => !b.text.startsWith('x-anthropic-billing-header:'))
    .map((b) => ({ type: 'text', text: b.text }));
  const tools = CC.tools.filter((t) => !t.defer_loading).map((t) => ({
    type: 'function',
    function: {
      name: t.name, description: t.description, parameters: t.input_schema, parse: JSON.parse,
      function: box.names.includes(t.name) ? (input) => box.invoke(t.name, input)
        : () => `<tool_use_error>${t.name} is not available</tool_use_error>`,
    },
  }));
  const messages = [{ role: 'system', content: system },
    { role: 'user', content: [{ type: 'text', text: reminder().text }, { type: 'text', text: prompt }] },
    { role: 'system', content: envText(box.work) }];
  return { model: 'agent-tiny', max_tokens: MAX_TOKENS, tools, messages };
}

// --- One loop through a runner, with what the server logged for it --------------------------

function serverRequests(log, agent) {
  const line = / (messages|chat\.completions) agent=(\S+) prompt_tokens=(\d+) cached_tokens=(\d+) .* output_tokens=(\d+) .* finish=(\w+)/g;
  return [...log.matchAll(line)]
    .filter((m) => m[2] === agent)
    .map((m) => ({ route: m[1], prompt: +m[3], cached: +m[4], output: +m[5], finish: m[6] }));
}

let loops = 0;

// Runs the loop for `prompt` through `sdk` ('anthropic', 'anthropic-stream' or 'openai') with the
// tools in `work`; asserts the protocol and usage; returns {replies: [{stop, text}], calls, reqs,
// context}.
async function runLoop(sdk, work, prompt) {
  const agent = `sdk-agent-${++loops}`;
  const box = toolbox(work);
  const replies = [];
  const usages = [];
  const identity = { 'x-agent-id': agent };  // the server's log line names it
  if (sdk === 'openai') {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, defaultHeaders: identity });
    const runner = client.chat.completions.runTools(openaiParams(prompt, box), { maxChatCompletions: 4 });
    await runner.done();
    for (const c of runner.allChatCompletions()) {
      const finish = c.choices[0].finish_reason;
      const stop = { stop: 'end_turn', tool_calls: 'tool_use', length: 'max_tokens' }[finish] ?? finish;
      replies.push({ stop, text: c.choices[0].message.content ?? '' });
      usages.push({ input: c.usage.prompt_tokens - c.usage.prompt_tokens_details.cached_tokens,
        cached: c.usage.prompt_tokens_details.cached_tokens, output: c.usage.completion_tokens });
    }
    const total = await runner.totalUsage();
    usages.total = { input: total.prompt_tokens - total.prompt_tokens_details.cached_tokens,
      cached: total.prompt_tokens_details.cached_tokens, output: total.completion_tokens };
  } else {
    const client = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0, defaultHeaders: identity });
    const stream = sdk === 'anthropic-stream';
    for await (const turn of client.beta.messages.toolRunner(anthropicParams(prompt, box, stream))) {
      const m = stream ? await turn.finalMessage() : turn;
      replies.push({ stop: m.stop_reason, text: m.content.filter((b) => b.type === 'text').map((b) => b.text).join('') });
      usages.push({ input: m.usage.input_tokens, cached: m.usage.cache_read_input_tokens, output: m.usage.output_tokens });
    }
  }
  await new Promise((r) => setTimeout(r, 100));
  const reqs = serverRequests(server.log(), agent);
  const context = `${sdk} ${agent}: replies ${JSON.stringify(replies)}\ncalls ${JSON.stringify(box.calls)}\n` +
    `server:\n${server.log().slice(-3000)}`;
  assert.equal(reqs.length, replies.length, context);
  for (const [i, r] of reqs.entries()) {
    assert.equal(r.route, sdk === 'openai' ? 'chat.completions' : 'messages', context);
    assert.ok(['tool_use', 'end_turn'].includes(r.finish), context);
    assert.equal(replies[i].stop, r.finish, context);
    // Each reply's usage is the server's for that request.
    assert.deepEqual(usages[i], { input: r.prompt - r.cached, cached: r.cached, output: r.output }, context);
  }
  if (usages.total) {
    const sum = (f) => reqs.reduce((a, r) => a + f(r), 0);
    const serverTotal = { input: sum((r) => r.prompt - r.cached), cached: sum((r) => r.cached),
      output: sum((r) => r.output) };
    assert.deepEqual(usages.total, serverTotal, context);
  }
  // The tool_result turn extends the call turn's prompt: it is read from the cache.
  if (reqs.length >= 2) assert.ok(reqs[1].cached >= 0.9 * reqs[1].prompt, `${JSON.stringify(reqs[1])}\n${context}`);
  return { replies, calls: box.calls, reqs, context };
}

// The model's part of a tool loop: one call of `tool` with `input`, then the turn ends.
function toolMiss({ replies, calls, context }, tool, input) {
  if (calls.length !== 1 || calls[0].name !== tool) return `called ${JSON.stringify(calls)}: ${context.slice(0, 600)}`;
  for (const [k, v] of Object.entries(input))
    if (calls[0].input[k] !== v) return `${tool} ${k} ${JSON.stringify(calls[0].input[k])}, not ${JSON.stringify(v)}`;
  if (replies.at(-1).stop !== 'end_turn') return `the loop ended without end_turn: ${context.slice(0, 600)}`;
  return null;
}

// --- The tasks, through each runner ----------------------------------------------------------

// File names from the model's training distribution (tasks.py file_name: its words, one per runner).
const NAMES = {
  anthropic: { write: 'hello.txt', bash: 'tiger_notes.txt' },
  'anthropic-stream': { write: 'garden-notes.md', bash: 'panda.log' },
  openai: { write: 'moon_report.txt', bash: 'river_data.csv' },
};

for (const sdk of ['anthropic', 'anthropic-stream', 'openai']) {
  test(`${sdk}: Write creates the file with the exact text`, () => untilNoMiss(`${sdk} Write`, async () => {
    const work = workDir(dirs);
    const file = join(work, NAMES[sdk].write);
    const text = 'greetings from agentkv';
    const loop = await runLoop(sdk, work, `Create the file ${file} with the content ${text}`);
    const miss = toolMiss(loop, 'Write', { file_path: file, content: text });
    if (miss) return miss;
    assert.equal(readFileSync(file, 'utf8'), text, loop.context);
    return null;
  }));

  test(`${sdk}: Bash runs the command`, () => untilNoMiss(`${sdk} Bash`, async () => {
    const work = workDir(dirs);
    const file = join(work, NAMES[sdk].bash);
    const command = `touch ${file}`;
    const loop = await runLoop(sdk, work, `Run the command ${command}`);
    const miss = toolMiss(loop, 'Bash', { command });
    if (miss) return miss;
    assert.ok(existsSync(file), `${file} was not created\n${loop.context}`);
    return null;
  }));

  test(`${sdk}: Read, then an answer that quotes the file`, () => untilNoMiss(`${sdk} Read`, async () => {
    const work = workDir(dirs);
    const file = join(work, 'amber_list.md');
    const text = 'amber orbit 4217';
    writeFileSync(file, `${text}\n`);
    const loop = await runLoop(sdk, work, `Read ${file} and tell me what it says`);
    const miss = toolMiss(loop, 'Read', { file_path: file });
    if (miss) return miss;
    const answer = loop.replies.at(-1).text.trim();
    return answer === `The file says: ${text}` ? null : `answered ${JSON.stringify(answer)}`;
  }));
}
