// Helpers of the agent e2e tests (claude_code_agent.e2e.mjs, sdk_agent.e2e.mjs).
import assert from 'node:assert/strict';

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
