// The server's command line, run as a user runs it: `--help` answers with the usage; a mistake is
// refused with it.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';

const ROOT = join(import.meta.dirname, '..');

function runServer(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const argv = ['--import', 'tsx', join(ROOT, 'server.ts'), ...args];
  return new Promise((resolve) => {
    execFile(process.execPath, argv, { cwd: ROOT, timeout: 20_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

describe('the server command line', () => {
  test.concurrent.each(['--help', '-h'])('%s prints the usage to stdout and exits 0', async (flag) => {
    const run = await runServer(flag);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: tsx server\.ts \[options\]\n/);
    expect(run.stdout).toContain('--charge-latency-ms N');
    expect(run.stderr).toBe('');
  });

  test.concurrent('an unknown option still exits 2, naming it, with the usage on stderr', async () => {
    const run = await runServer('--bogus');
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("Unknown option '--bogus'");
    expect(run.stderr).toContain('Usage: tsx server.ts [options]');
    expect(run.stdout).toBe('');
  });
});
