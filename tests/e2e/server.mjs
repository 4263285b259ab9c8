// Starts `agentkv serve` on a free port for a test file and stops it afterwards.
import { spawn } from 'node:child_process';

export const AGENTKV = process.env.AGENTKV_BIN;
export const TESTDATA = process.env.AGENTKV_TESTDATA;
export const MODELS = process.env.AGENTKV_E2E_MODELS;

export async function startServer(args) {
  const proc = spawn(AGENTKV, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60000);
    proc.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
  });
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    log: () => log,
    async stop() {
      const exited = new Promise((r) => proc.on('exit', r));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 20000);
      await exited;
      clearTimeout(timer);
    },
  };
}

// Raw SSE events of a streaming response: [{event, data}].
export async function readSse(response) {
  const text = await response.text();
  const events = [];
  for (const chunk of text.split('\n\n')) {
    if (!chunk.trim()) continue;
    let event = null;
    let data = '';
    for (const line of chunk.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    events.push({ event, data: data === '[DONE]' ? data : JSON.parse(data) });
  }
  return events;
}
