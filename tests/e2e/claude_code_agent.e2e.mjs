// The real Claude Code CLI (2.1.332, headless -p) against agentkv serving the tiny trained agent
// model (models/agent-tiny, tools/agent_model): the whole loop users depend on. A text turn ends
// with rc 0 and subtype success; "create the file X with Y" makes the CLI write X through the Write
// tool; a Bash turn runs its command; a --continue turn reads >= 90% of its prompt from the KV
// cache; the CLI's usage totals equal the server's per-request numbers. First (A0), the CLI's
// prompt in this environment must be the training request but for what the training data varies:
// the model's choices depend on the rest of it. Run by agent_e2e.sh, which skips it (exit 77)
// while the model's weights are absent. (Not named *.test.mjs: run.sh runs those against the
// random model.)
//
// The model copies a random path or text exactly in ~90% of turns (its held-out accuracy,
// tools/agent_model/README.md), and Claude Code samples at temperature 1. So what the model wrote
// (the answer, the tool call's path and text, whether it called a tool) is a "miss" that runs the
// turn again, at most 3 times; everything the server and the CLI do (rc 0, success, no turn cut at
// max_tokens, usage totals, cache reads) is asserted on every run and fails the test at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startServer } from './server.mjs';
import { untilNoMiss, workDir } from './agent_util.mjs';

const claude = new URL('./claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude', import.meta.url).pathname;
const MODEL = process.env.AGENTKV_AGENT_MODEL;
const TRAINED_MEMORY_DIR = '/tmp/cchome1/.claude/projects/-tmp-ccwork/memory/';
let server;
let work;
let home;
const dirs = [];  // work and home, removed at the end

before(async () => {
  assert.ok(existsSync(claude), 'claude-code not installed (agent_e2e.sh installs it)');
  server = await startServer(['--model', MODEL, '--served-model-name', 'agent-tiny', '--api-key', 'local-key']);
  work = workDir(dirs);  // a directory name of the kind the model was trained on
  home = mkdtempSync('/tmp/akv-home-');
  dirs.push(home);
});
after(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (server) await server.stop();
});

function serverRequests(log) {
  return [...log.matchAll(/messages agent=(\S+) prompt_tokens=(\d+) cached_tokens=(\d+) .* output_tokens=(\d+) .* finish=(\w+)/g)]
    .map((m) => ({ agent: m[1], prompt: +m[2], cached: +m[3], output: +m[4], finish: m[5] }));
}

// The CLI's environment and flags. They pin the parts of the CLI's prompt that vary by machine to
// the request the model was trained on (tools/agent_model/claude_code_request.json; A0 checks);
// the other machine-dependent parts (working directory, OS version, model name, date) vary in the
// training data.
function cliEnv(baseUrl) {
  return {
    PATH: process.env.PATH, HOME: home,
    ANTHROPIC_BASE_URL: baseUrl, ANTHROPIC_API_KEY: 'local-key', ANTHROPIC_MODEL: 'agent-tiny',
    ANTHROPIC_DEFAULT_HAIKU_MODEL: 'agent-tiny',
    // The system prompt names the memory directory, HOME/.claude/projects/<cwd>/memory/ by default:
    // the training request's, whatever HOME and cwd are (the CLI creates it).
    CLAUDE_COWORK_MEMORY_PATH_OVERRIDE: TRAINED_MEMORY_DIR,
    // Telemetry, error reports and updates off one by one rather than with
    // CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, which changes the prompt; so does DISABLE_TELEMETRY
    // (the training request was sent with it: without it two paragraphs of the system prompt go). No
    // CLAUDE_CODE_MAX_CONTEXT_TOKENS: any value shortens the skills list (the last skills lose
    // their descriptions), and without them the model answers text tasks with tools.
    DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1', DISABLE_AUTOUPDATER: '1',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '512', CLAUDE_CODE_MAX_RETRIES: '0',
  };
}

function execClaude(args, baseUrl) {
  return promisify(execFile)(claude, ['-p', ...args, '--output-format', 'json', '--max-turns', '4',
    '--allowedTools', 'Write', 'Bash', 'Read',
    // A deferred tool this CLI lists that the training request lacks.
    '--disallowedTools', 'DesignSync'], { env: cliEnv(baseUrl), cwd: work, encoding: 'utf8', timeout: 300000 })
    .catch((e) => e);
}

// Runs the CLI in `work`; returns its JSON result and the server's requests of its session.
async function runClaude(args) {
  const before = serverRequests(server.log()).length;
  const run = await execClaude(args, server.url);
  await new Promise((r) => setTimeout(r, 200));
  const context = `stdout: ${run.stdout}\nstderr: ${run.stderr}\nserver:\n${server.log().slice(-4000)}`;
  assert.ok(run.stdout, `no output; ${context}`);
  const result = JSON.parse(run.stdout);
  const reqs = serverRequests(server.log()).slice(before).filter((r) => r.agent === result.session_id);
  assert.equal(run.code ?? 0, 0, context);
  assert.equal(result.subtype, 'success', context);
  assert.equal(result.is_error, false, context);
  assert.ok(reqs.length >= 1, context);
  for (const r of reqs) assert.notEqual(r.finish, 'max_tokens', context);
  // Usage totals: the CLI adds up exactly what the server reported for each request.
  const sum = (f) => reqs.reduce((a, r) => a + f(r), 0);
  assert.equal(result.usage.input_tokens, sum((r) => r.prompt - r.cached), context);
  assert.equal(result.usage.cache_read_input_tokens, sum((r) => r.cached), context);
  assert.equal(result.usage.output_tokens, sum((r) => r.output), context);
  return { result, reqs, context };
}

// The tool_result turn extends the call turn's prompt: it is read from the cache.
function assertToolResultCached(reqs, context) {
  assert.ok(reqs[1].cached >= 0.9 * reqs[1].prompt, `${JSON.stringify(reqs[1])}\n${context}`);
}

// The first request of a turn as the CLI sends it, caught by a stand-in server that answers
// every request with an error (CLAUDE_CODE_MAX_RETRIES=0: the CLI gives up at once).
async function captureRequest(prompt) {
  const bodies = [];
  const stub = createServer((req, res) => {
    let data = '';
    req.on('data', (chunk) => { data += chunk; });
    req.on('end', () => {
      if (req.url.startsWith('/v1/messages') && data) bodies.push(JSON.parse(data));
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: 'stand-in server' } }));
    });
  });
  await new Promise((r) => stub.listen(0, '127.0.0.1', r));
  try {
    await execClaude([prompt], `http://127.0.0.1:${stub.address().port}`);
  } finally {
    stub.close();
  }
  const turns = bodies.filter((b) => (b.tools ?? []).length > 0);
  assert.ok(turns.length >= 1, `the CLI sent no request with tools: ${JSON.stringify(bodies).slice(0, 600)}`);
  return turns[0];
}

// A request's prompt as lines, with what the training data draws at random (tools/agent_model/
// tasks.py Conversation.env) and the per-request attribution (dropped by the server) masked.
function promptLines(body, cwd) {
  const lines = [];
  for (const s of body.system) {
    if (!s.text.startsWith('x-anthropic-billing-header:')) lines.push(...`system: ${s.text}`.split('\n'));
  }
  lines.push(...JSON.stringify(body.tools, null, 1).split('\n'));
  for (const m of body.messages) {
    for (const block of m.content) {
      if (block.type !== 'text') continue;
      const text = block.text.replaceAll(cwd, 'CWD')
        .replace(/OS Version: .*/, 'OS Version: OS').replace(/powered by the model \S+/, 'powered by the model MODEL')
        .replace(/Today's date is \S+/, "Today's date is DATE");
      lines.push(...`${m.role}: ${text}`.split('\n'));
    }
  }
  return lines;
}

test('A0 the CLI sends the prompt the model was trained on (but for what the training data varies)', async () => {
  const trained = JSON.parse(readFileSync(new URL('../../tools/agent_model/claude_code_request.json', import.meta.url), 'utf8'));
  const sent = await captureRequest(trained.messages[0].content.at(-1).text);
  const want = promptLines(trained, '/tmp/ccwork');
  const got = promptLines(sent, work);
  const diff = [];
  for (let i = 0; i < Math.max(want.length, got.length) && diff.length < 12; i++) {
    if (want[i] !== got[i]) diff.push(`line ${i}:\n  trained: ${want[i]?.slice(0, 200)}\n  sent:    ${got[i]?.slice(0, 200)}`);
  }
  assert.deepEqual(diff, [], `the CLI's prompt differs from the training request:\n${diff.join('\n')}`);
});

test('A1 text turn: rc 0, success, the answer the prompt asked for', () => untilNoMiss('A1', async () => {
  const { result } = await runClaude(['Reply with PONG']);
  return result.result.trim() === 'PONG' ? null : `answered ${JSON.stringify(result.result)}`;
}));

test('A2 --continue: the second turn reads >= 90% of its prompt from the KV cache', () => untilNoMiss('A2', async () => {
  const { result, reqs, context } = await runClaude(['--continue', 'Reply with alpha']);
  const last = reqs[reqs.length - 1];
  assert.ok(last.cached >= 0.9 * last.prompt, `${JSON.stringify(last)}\n${context}`);
  return result.result.trim() === 'alpha' ? null : `answered ${JSON.stringify(result.result)}`;
}));

test('A3 Write: "create the file X with Y" writes Y to X through the Write tool', () => untilNoMiss('A3', async () => {
  const file = join(work, 'hello.txt');
  const { reqs, context } = await runClaude([`Create the file ${file} with the content greetings from agentkv`]);
  if (reqs.length < 2) return `no tool call: ${context.slice(0, 600)}`;
  assertToolResultCached(reqs, context);
  if (!existsSync(file)) return `${file} was not written: ${context.slice(0, 600)}`;
  const text = readFileSync(file, 'utf8');
  return text === 'greetings from agentkv' ? null : `wrote ${JSON.stringify(text)}`;
}));

test('A4 Bash: the command runs', () => untilNoMiss('A4', async () => {
  const file = join(work, 'tiger_notes.txt');
  const { reqs, context } = await runClaude([`Run the command touch ${file}`]);
  if (reqs.length < 2) return `no tool call: ${context.slice(0, 600)}`;
  assertToolResultCached(reqs, context);
  return existsSync(file) ? null : `${file} was not created: ${context.slice(0, 600)}`;
}));
