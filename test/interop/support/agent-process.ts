// --- An agent framework whose current release needs Node 22+, run in a process of its own ---
//
// `ai` 7, `@ai-sdk/mcp` 2 and `@mastra/*` declare Node 22 or later; the project runs on Node 20.
// As with the conformance suite (node24.ts), only the process that runs the framework moves to a
// newer Node: the test starts the server and the fault proxy, and reads the ledger and the wire,
// in its own. A driver script takes its options as one JSON argument and prints its result as
// one JSON line.

import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { AGENT_RUN_TIMEOUT_MS, exitedAndRead } from '../../../demo/processes/bounds.js';
import { ROOT } from '../../../demo/processes/launch.js';

/**
 * Runs `test/support/<script>` with `options` on `node`; resolves with what it printed last,
 * taken to be the `Result` the driver declares (the driver and its caller are one test's).
 */
export async function runAgentProcess<Result>(
  node: string,
  script: string,
  options: object,
): Promise<Result> {
  const child = spawn(
    node,
    ['--import', 'tsx', join(ROOT, 'test', 'interop', 'support', script), JSON.stringify(options)],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const timer = setTimeout(() => child.kill('SIGKILL'), AGENT_RUN_TIMEOUT_MS);
  const code = await exitedAndRead(child);
  clearTimeout(timer);
  const last = stdout.trim().split('\n').at(-1);
  if (code !== 0 || last === undefined) {
    throw new Error(
      `${script} exited with ${code ?? 'a signal (killed after its bound?)'}: ${stderr.trim()}`,
    );
  }
  return JSON.parse(last);
}
