// Helpers of the agent e2e tests (claude_code_agent.e2e.mjs, sdk_agent.e2e.mjs).
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';

// Runs `turn` until it returns no miss (a string saying what the model got wrong), at most 3
// times; a run's protocol asserts throw at once. The tiny agent model samples at temperature 1
// and sometimes miscopies a path or text.
export async function untilNoMiss(name, turn) {
  const misses = [];
  for (let run = 1; run <= 3; run++) {
    const miss = await turn();
    if (!miss) return;
    misses.push(`run ${run}: ${miss}`);
    console.log(`# ${name}: the model missed (run ${run}): ${miss.slice(0, 300)}`);
  }
  assert.fail(`${name}: the model missed 3 times\n${misses.join('\n')}`);
}

// A fresh directory for a run, named as the model was trained on (tools/agent_model/tasks.py
// work_dir): /tmp/ and a pseudo-word of its syllables, made exclusively (another name if it
// exists); pushed onto `made` for the caller to remove. Not mkdtemp's /tmp/akv-cc-XXXXXX, also in
// its training set: the model copies such a random tail into a Write call in ~80% of turns (16 of
// 20) against 29 of 30 for these names.
const SYLLABLES = ['ka', 'ro', 'mi', 'te', 'lu', 'sa', 'no', 'vi', 'de', 'po', 'zu', 'ri', 'ga', 'fe', 'bo', 'ni'];
export function workDir(made) {
  for (;;) {
    const pick = () => SYLLABLES[Math.floor(Math.random() * SYLLABLES.length)];
    const dir = `/tmp/${pick()}${pick()}${Math.random() < 0.5 ? pick() : ''}`;
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (e) {
      if (e.code === 'EEXIST') continue;
      throw e;
    }
    made.push(dir);
    return dir;
  }
}
