// The checker, run as a user runs it (`tsx checker/check.ts … --json`), against the demo server
// (it must find nothing wrong) and against fixture servers that each break one rule of the SEP
// (it must name exactly that rule).

import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { CheckResult, Status } from '../checker/rules.js';
import { type HttpInstance, startHttpInstance } from '../launch.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CHECKER_TIMEOUT_MS = 50_000;
/** Slow enough that a duplicate sent 100 ms later finds the original still running. */
const LATENCY_MS = '300';

interface CheckerRun {
  code: number | null;
  stdout: string;
  stderr: string;
  checks: Map<string, CheckResult>;
  calls: number;
}

function runChecker(args: string[], json = true): Promise<CheckerRun> {
  const argv = ['--import', 'tsx', join(ROOT, 'checker', 'check.ts'), ...args, ...(json ? ['--json'] : [])];
  return new Promise((resolve) => {
    execFile(process.execPath, argv, { cwd: ROOT, timeout: CHECKER_TIMEOUT_MS }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
      const checks = new Map<string, CheckResult>();
      let calls = 0;
      if (json && stdout.trim().startsWith('{')) {
        const report: { checks: CheckResult[]; calls: number } = JSON.parse(stdout);
        for (const check of report.checks) checks.set(check.id, check);
        calls = report.calls;
      }
      resolve({ code, stdout, stderr, checks, calls });
    });
  });
}

/** The checks whose status is `status`, by id. */
function withStatus(run: CheckerRun, ...statuses: Status[]): string[] {
  return [...run.checks.values()].filter((c) => statuses.includes(c.status)).map((c) => c.id);
}

/** A server over stdio: `--command node --arg=…`, so no path is split on spaces. */
function stdioServer(script: string, ...args: string[]): string[] {
  return [
    '--command',
    process.execPath,
    ...['--import', 'tsx', join(ROOT, script), ...args].map((a) => `--arg=${a}`),
  ];
}

const DEMO_CALL = [
  '--tool',
  'charge_guarded',
  // Two members (key order), a string with a composed character (escapes, normalisation); the
  // demo's schema ignores `note`, the guard fingerprints it.
  '--arguments',
  '{"amount":1,"note":"café"}',
  '--slow-arguments',
  '{"amount":1}',
  '--error-arguments',
  '{"amount":-1}',
  '--other-tool',
  'charge_unguarded',
];

/** What no client can observe, whatever the server. */
const NEVER_CHECKABLE = [
  'equivalence.tool-implementation',
  'retention.bounded',
  'retention.documented',
  'ordering.crash',
  'stateless.shared-store',
  'authorization.at-replay',
  'security.resource-limits',
];

describe('the checker finds nothing wrong with the demo server', () => {
  let http: HttpInstance;
  beforeAll(async () => {
    http = await startHttpInstance(['--charge-latency-ms', LATENCY_MS], {
      DEMO_BEARER_TOKENS: 'alice:token-a,bob:token-b',
    });
  });
  afterAll(() => http?.stop(5_000));

  const httpTarget = () => [
    '--url',
    http.url.href,
    '--header',
    'Authorization: Bearer token-a',
    '--other-header',
    'Authorization: Bearer token-b',
  ];
  const cases = [
    {
      name: 'over stdio on 2026-07-28',
      era: '2026-07-28',
      target: () => stdioServer('server.ts', '--charge-latency-ms', LATENCY_MS),
    },
    {
      name: 'over stdio on 2025-11-25',
      era: '2025-11-25',
      target: () => stdioServer('server.ts', '--charge-latency-ms', LATENCY_MS),
    },
    { name: 'over HTTP with two callers on 2026-07-28', era: '2026-07-28', target: httpTarget },
    { name: 'over HTTP with two callers on 2025-11-25', era: '2025-11-25', target: httpTarget },
  ];

  test.concurrent.each(cases)(
    'passes every check it can make $name, and exits 0',
    async ({ era, target }) => {
      const run = await runChecker([...target(), '--era', era, ...DEMO_CALL]);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(withStatus(run, 'failed', 'warned')).toEqual([]);
      expect(withStatus(run, 'not checkable').sort()).toEqual(
        // The demo's failing call is a schema rejection, the same every time: a stored error and a
        // fresh one cannot be told apart, and the checker says so rather than guessing.
        [...NEVER_CHECKABLE, 'errors.replayed'].sort(),
      );
      const notApplicable = withStatus(run, 'not applicable');
      const overStdio = target()[0] === '--command';
      expect(notApplicable.sort()).toEqual(
        ['equivalence.absent-arguments', ...(overStdio ? ['scope.per-caller'] : [])].sort(),
      );
      expect(run.checks.get('in-progress.data')?.observed).toContain('idempotency_key_in_progress');
      expect(run.calls).toBeGreaterThan(10);
    },
  );

  test('prints a table a person reads, with the count of calls it made', async () => {
    const run = await runChecker(
      [...stdioServer('server.ts'), '--tool', 'charge_guarded', '--arguments', '{"amount":1}'],
      false,
    );
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(
      /✓ capability\.advertised +tools\.idempotency = \{\} in the server\/discover result/,
    );
    expect(run.stdout).toMatch(/✓ equivalence\.number-spelling +retry with \{"amount":1\.0\} replayed/);
    expect(run.stdout).toMatch(/– in-progress\.not-executed +not applicable: needs --slow-arguments/);
    expect(run.stdout).toMatch(/^\d+ tools\/call requests made \(\d+ with an idempotencyKey\)$/m);
  });

  test('explains a bad command line with the usage text and exit status 2', async () => {
    const run = await runChecker(['--url', 'http://127.0.0.1:1/mcp', '--tool', 'x', '--arguments', '[1]']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--arguments must be a JSON object');
    expect(run.stderr).toContain('Usage: npm run check');
  });
});
