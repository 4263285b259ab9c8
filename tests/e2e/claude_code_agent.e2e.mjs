// The real Claude Code CLI (2.1.332, headless -p) against agentkv serving the tiny trained agent
// model (models/agent-tiny, tools/agent_model): the whole loop users depend on. A text turn ends
// with rc 0 and subtype success; "create the file X with Y" makes the CLI write X through the Write
// tool; a Bash turn runs its command; a --continue turn reads >= 90% of its prompt from the KV
// cache; the CLI's usage totals equal the server's per-request numbers. Run by agent_e2e.sh,
// which skips it (exit 77) while the model's weights are absent. (Not named *.test.mjs: run.sh
// runs those against the random model.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startServer } from './server.mjs';

const claude = new URL('./claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude', import.meta.url).pathname;
const MODEL = process.env.AGENTKV_AGENT_MODEL;
let server;
let work;
let home;

before(async () => {
  assert.ok(existsSync(claude), 'claude-code not installed (agent_e2e.sh installs it)');
  server = await startServer(['--model', MODEL, '--served-model-name', 'agent-tiny', '--api-key', 'local-key']);
  // The directory names the model was trained on (tools/agent_model/tasks.py work_dir).
  work = mkdtempSync('/tmp/akv-cc-');
  home = mkdtempSync('/tmp/akv-home-');
});
after(async () => server && server.stop());

function serverRequests(log) {
  return [...log.matchAll(/messages agent=(\S+) prompt_tokens=(\d+) cached_tokens=(\d+) .* output_tokens=(\d+) .* finish=(\w+)/g)]
    .map((m) => ({ agent: m[1], prompt: +m[2], cached: +m[3], output: +m[4], finish: m[5] }));
}

// Runs the CLI in `work`; returns its JSON result and the server's requests of its session.
async function runClaude(args) {
  const env = {
    PATH: process.env.PATH, HOME: home,
    ANTHROPIC_BASE_URL: server.url, ANTHROPIC_API_KEY: 'local-key', ANTHROPIC_MODEL: 'agent-tiny',
    ANTHROPIC_DEFAULT_HAIKU_MODEL: 'agent-tiny', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '512', CLAUDE_CODE_MAX_CONTEXT_TOKENS: '32768', CLAUDE_CODE_MAX_RETRIES: '0',
  };
  const before = serverRequests(server.log()).length;
  const run = await promisify(execFile)(claude, ['-p', ...args, '--output-format', 'json', '--max-turns', '4',
    '--allowedTools', 'Write', 'Bash', 'Read'], { env, cwd: work, encoding: 'utf8', timeout: 300000 }).catch((e) => e);
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

test('A1 text turn: rc 0, success, the answer the prompt asked for', async () => {
  const { result, context } = await runClaude(['Reply with PONG']);
  assert.equal(result.result.trim(), 'PONG', context);
});

test('A2 --continue: the second turn reads >= 90% of its prompt from the KV cache', async () => {
  const { result, reqs, context } = await runClaude(['--continue', 'Reply with alpha']);
  assert.equal(result.result.trim(), 'alpha', context);
  const last = reqs[reqs.length - 1];
  assert.ok(last.cached >= 0.9 * last.prompt, `${JSON.stringify(last)}\n${context}`);
});

test('A3 Write: "create the file X with Y" writes Y to X through the Write tool', async () => {
  const file = join(work, 'hello.txt');
  const { reqs, context } = await runClaude([`Create the file ${file} with the content greetings from agentkv`]);
  assert.ok(reqs.length >= 2, `expected a tool round trip; ${context}`);
  assert.equal(readFileSync(file, 'utf8'), 'greetings from agentkv', context);
  // The tool_result turn extends the call turn's prompt: it is read from the cache.
  assert.ok(reqs[1].cached >= 0.9 * reqs[1].prompt, `${JSON.stringify(reqs[1])}\n${context}`);
});

test('A4 Bash: the command runs', async () => {
  const file = join(work, 'tiger_notes.txt');
  const { reqs, context } = await runClaude([`Run the command touch ${file}`]);
  assert.ok(reqs.length >= 2, `expected a tool round trip; ${context}`);
  assert.ok(existsSync(file), context);
});
