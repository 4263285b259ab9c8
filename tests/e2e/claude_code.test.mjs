// The real Claude Code CLI (2.1.332, headless -p) against agentkv serving a tiny random
// Qwen3-architecture model with the real Qwen3 tokenizer and template. Random weights never end
// a turn on their own, so each request runs to the CLI's max output tokens and the CLI gives up
// with "max_output_tokens" after its retries; what is asserted is the protocol: every request is
// accepted and streamed to completion, later turns reuse the earlier prompt from the KV cache,
// the CLI's usage totals equal the server's per-request numbers, and the client talks only to
// the server.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, MODELS } from './server.mjs';

const claude = new URL('./claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude', import.meta.url).pathname;
let server;

before(async () => {
  server = await startServer(['--model', `${MODELS}/qwen3-tiny`, '--served-model-name', 'local-model', '--api-key', 'local-key',
    '--max-batch-tokens', '2048', '--prefill-chunk', '2048']);
});
after(async () => server && server.stop());

function serverRequests(log) {
  return [...log.matchAll(/messages agent=(\S+) prompt_tokens=(\d+) cached_tokens=(\d+) .* output_tokens=(\d+) .* finish=(\w+)/g)]
    .map((m) => ({ agent: m[1], prompt: +m[2], cached: +m[3], output: +m[4], finish: m[5] }));
}

test('C1 Claude Code headless: requests stream to completion, cache reuse, usage equals the server\'s', { skip: !existsSync(claude) && 'claude-code not installed' }, async () => {
  const home = mkdtempSync(join(tmpdir(), 'akv-cc-'));
  const env = {
    PATH: process.env.PATH, HOME: home,
    ANTHROPIC_BASE_URL: server.url, ANTHROPIC_API_KEY: 'local-key', ANTHROPIC_MODEL: 'local-model',
    ANTHROPIC_DEFAULT_HAIKU_MODEL: 'local-model', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '24', CLAUDE_CODE_MAX_CONTEXT_TOKENS: '32768', CLAUDE_CODE_MAX_RETRIES: '0',
  };
  // Asynchronous, so this process keeps reading the server's log meanwhile. The CLI exits 1
  // when it gives up on max_output_tokens; its JSON result is on stdout either way.
  const run = await promisify(execFile)(claude, ['-p', 'Reply with PONG', '--output-format', 'json', '--max-turns', '2', '--allowedTools', 'Bash'],
    { env, encoding: 'utf8', timeout: 180000 }).catch((e) => e);
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(run.stdout, `no output; stderr: ${run.stderr}`);
  const result = JSON.parse(run.stdout);
  const reqs = serverRequests(server.log());
  assert.ok(reqs.length >= 1, `${server.log()}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`);
  // The only failure is the random model running out of output tokens, never a protocol error.
  assert.ok(!result.is_error || result.api_error === 'max_output_tokens', run.stdout);
  for (const r of reqs) {
    assert.equal(r.finish, 'max_tokens');
    assert.equal(r.agent, result.session_id);  // the session id header names the agent
  }
  for (const r of reqs.slice(1)) assert.ok(r.cached >= r.prompt - 128, JSON.stringify(r));
  const sum = (f) => reqs.reduce((a, r) => a + f(r), 0);
  assert.equal(result.usage.input_tokens, sum((r) => r.prompt - r.cached));
  assert.equal(result.usage.cache_read_input_tokens, sum((r) => r.cached));
  assert.equal(result.usage.output_tokens, sum((r) => r.output));
});
