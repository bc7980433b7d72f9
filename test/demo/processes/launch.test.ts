// Whatever starts an HTTP server through demo/processes/launch.ts (the demo, the tests, the benchmark) leaves no
// server behind when it dies of an error no one handled: the way the benchmark died on a busy
// machine, leaving its servers to serve on.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, waitUntil } from '../../../demo/processes/bounds.js';

const ROOT = join(import.meta.dirname, '..', '..', '..');

/** True while `pid` runs (signal 0 only asks). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('an HTTP server started through demo/processes/launch.ts', () => {
  it(
    'is gone once the process that started it dies of an unhandled rejection',
    async () => {
      // Starts a server, prints its pid, then rejects a promise no one awaits.
      const script = `import { startHttpInstance } from './demo/processes/launch.ts';
const instance = await startHttpInstance();
console.log(instance.pid);
Promise.reject(new Error('nobody handles this'));`;
      const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
        const argv = ['--import', 'tsx', '--input-type=module', '-e', script];
        execFile(process.execPath, argv, { cwd: ROOT, timeout: START_TIMEOUT_MS * 2 }, (error, out) =>
          resolve({ code: error && typeof error.code === 'number' ? error.code : 0, stdout: out }),
        );
      });
      const pid = Number(stdout.trim());
      expect(code).toBe(1);
      expect(Number.isSafeInteger(pid) && pid > 0).toBe(true);
      try {
        await waitUntil(async () => !isRunning(pid));
      } finally {
        if (isRunning(pid)) process.kill(pid, 'SIGKILL');
      }
      expect(isRunning(pid)).toBe(false);
    },
    START_TIMEOUT_MS * 3,
  );
});
