// The checker, run as a user runs it (`tsx packages/checker/check.ts … --json`), against the demo server
// (it must find nothing wrong) and against fixture servers that each break one rule of the SEP
// (it must name exactly that rule).

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type HttpInstance, startHttpInstance } from '../../demo/processes/launch.js';
import { CHARGE_LIMIT } from '../../ledger.js';
import {
  checkHttpFixture,
  FIXTURE_CALL,
  faults,
  NEVER_CHECKABLE,
  ROOT,
  runChecker,
  stdioServer,
  THREE_TOKENS,
  withStatus,
} from '../fixtures/checker/harness.js';

/** Slow enough that a duplicate sent 100 ms later finds the original still running. */
const LATENCY_MS = '300';
/** A whole run of the checker (some 45 calls, a third of them 300 ms charges), on a busy machine. */
const RUN_TIMEOUT_MS = 120_000;

const DEMO_CALL = [
  '--tool',
  'charge_guarded',
  // Two members (key order), a string with a composed character (escapes, normalisation); the
  // demo's schema ignores `note`, the guard fingerprints it.
  '--arguments',
  '{"amount":1,"note":"café"}',
  '--slow-arguments',
  '{"amount":1}',
  // Declined by the ledger, each decline numbered: a stored decline shows the old number.
  '--error-arguments',
  JSON.stringify({ amount: CHARGE_LIMIT + 1 }),
  '--other-tool',
  'charge_unguarded',
  // A server starting on a busy machine may take seconds to answer its first request.
  '--timeout-ms',
  '30000',
  // The rules' own checks, four runs at once: the explorer's default run on the demo is
  // test/checker/explore.test.ts's.
  '--budget',
  '0',
];

describe('the checker finds nothing wrong with the demo server', () => {
  // One server per era: the checker reads the ledger's balance to see what executed, so nothing
  // else may charge that ledger while it runs.
  const http = new Map<string, HttpInstance>();
  beforeAll(async () => {
    for (const era of ['2026-07-28', '2025-11-25']) {
      const instance = await startHttpInstance(['--charge-latency-ms', LATENCY_MS], {
        // Alice's second token may only read: charge_guarded refuses it, a replay included.
        DEMO_BEARER_TOKENS: 'alice:token-a,alice:token-r:read,bob:token-b',
      });
      http.set(era, instance);
    }
  });
  afterAll(() => Promise.all([...http.values()].map((instance) => instance.stop(5_000))));

  const httpTarget = (era: string) => ['--url', http.get(era)?.url.href ?? '', ...THREE_TOKENS];
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
    { name: 'over HTTP, three tokens, on 2026-07-28', era: '2026-07-28', target: httpTarget },
    { name: 'over HTTP, three tokens, on 2025-11-25', era: '2025-11-25', target: httpTarget },
  ];

  test.concurrent.each(cases)(
    'passes every check it can make $name, and exits 0',
    async ({ era, target }) => {
      const run = await runChecker([...target(era), '--era', era, ...DEMO_CALL]);
      expect(run.stderr).toBe('');
      // Each check that did not pass, with what it saw: the first thing to read when this fails.
      expect([...run.checks.values()].filter((c) => c.status === 'failed' || c.status === 'warned')).toEqual(
        [],
      );
      expect(run.code).toBe(0);
      expect(withStatus(run, 'not checkable').sort()).toEqual([...NEVER_CHECKABLE].sort());
      // The keyed decline's retry got the stored decline, its number included.
      expect(run.checks.get('errors.replayed')?.status).toBe('passed');
      expect(run.checks.get('errors.replayed')?.observed).toMatch(
        /^the stored failure was replayed: .*Declined: amount \d+ over the limit of \d+ \(decline \d+\)/,
      );
      const notApplicable = withStatus(run, 'not applicable');
      const overStdio = target(era)[0] === '--command';
      expect(notApplicable.sort()).toEqual(
        [
          'equivalence.absent-arguments',
          ...(overStdio ? ['scope.per-caller', 'authorization.at-replay'] : []),
        ].sort(),
      );
      if (!overStdio) {
        // The read-only token's replay is refused by the SDK's scope challenge, before the guard.
        expect(run.checks.get('authorization.at-replay')?.observed).toMatch(
          /^refused: HTTP 403, WWW-Authenticate error="insufficient_scope", like a first call; the caller's retry replayed "Charged 1\. New balance: \d+"$/,
        );
      }
      expect(run.checks.get('in-progress.data')?.observed).toContain('idempotency_key_in_progress');
      expect(run.calls).toBeGreaterThan(10);
    },
    RUN_TIMEOUT_MS,
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
    expect(run.stdout).toMatch(
      /✓ equivalence\.number-spelling +retries with \{"amount":1\.0\}, \{"amount":1e0\}, \{"amount":1\.00\} replayed "Charged 1\. New balance: (\d+)"; counter \1 → \d+, the call without a key alone/,
    );
    expect(run.stdout).toMatch(/– in-progress\.not-executed +not applicable: needs --slow-arguments/);
    expect(run.stdout).toMatch(/^\d+ tools\/call requests made \(\d+ with an idempotencyKey\)$/m);
  });

  test('explains a bad command line with the usage text and exit status 2', async () => {
    const run = await runChecker(['--url', 'http://127.0.0.1:1/mcp', '--tool', 'x', '--arguments', '[1]']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--arguments must be a JSON object');
    expect(run.stderr).toContain('Usage: mcp-idempotency-check');
  });
});

// --- Fixtures, each wrong in one way the SEP forbids ---

/** The fixtures' call, with room for a server starting on a busy machine. */
const FIXTURE_RUN = [...FIXTURE_CALL, '--timeout-ms', '30000', '--budget', '0'];

/** The fixtures' call over HTTP, with a caller's token and a token the server refuses the charge. */
const FORBIDDEN_TOKEN_RUN = [
  ...['--header', 'Authorization: Bearer token-a'],
  ...['--forbidden-header', 'Authorization: Bearer token-r'],
  ...FIXTURE_RUN,
];

const fixture = (name: string) => stdioServer(join('test', 'fixtures', 'checker', `${name}.ts`));

describe('the checker names exactly the rule each fixture breaks', () => {
  const cases = [
    {
      name: 'the SDK default, no deduplication and no capability',
      fixture: 'no-guard',
      breaks: [
        'capability.advertised',
        'in-progress.not-executed',
        'in-progress.data',
        'replay.not-executed',
        'replay.identical',
        'errors.replayed',
        'retention.per-key',
        'conflict.other-arguments',
        'conflict.other-tool',
        'equivalence.key-order',
        'equivalence.whitespace',
        'equivalence.number-spelling',
        'equivalence.string-escapes',
        'equivalence.no-unicode-normalization',
      ],
    },
    {
      name: 'fingerprints that tell 1 from 1.0',
      fixture: 'number-spelling',
      breaks: ['equivalence.number-spelling'],
    },
    {
      name: 'fingerprints that depend on key order',
      fixture: 'key-order',
      breaks: ['equivalence.key-order'],
    },
    {
      name: 'a duplicate in flight that waits for the original',
      fixture: 'waits-in-flight',
      breaks: ['in-progress.data', 'in-progress.not-blocked'],
    },
    {
      name: 'a conflict that replays the stored response',
      fixture: 'conflict-replays',
      // A renormalised string is other arguments, so that check meets the same flaw.
      breaks: ['conflict.other-arguments', 'conflict.other-tool', 'equivalence.no-unicode-normalization'],
    },
    { name: 'an error that is not recorded', fixture: 'errors-not-recorded', breaks: ['errors.replayed'] },
    {
      name: 'a correct server that never declares the capability',
      fixture: 'no-capability',
      breaks: ['capability.advertised'],
    },
  ];

  test.concurrent.each(cases)(
    '$name: fails only $breaks, exit status 1',
    async ({ fixture: name, breaks }) => {
      const run = await runChecker([...fixture(name), ...FIXTURE_RUN]);
      expect(run.stderr).toBe('');
      expect(faults(run)).toEqual([...breaks].sort());
      expect(run.code).toBe(1);
      expect(run.checks.get('no-key.executes-every-time')?.status).toBe('passed');
      if (!breaks.includes('errors.replayed'))
        expect(run.checks.get('errors.replayed')?.status).toBe('passed');
    },
    RUN_TIMEOUT_MS,
  );

  test('records keyed by the key alone over HTTP: another caller gets the stored result, scope.per-caller fails', async () => {
    const run = await checkHttpFixture(
      ['unscoped-http.ts'],
      [
        '--header',
        'Authorization: Bearer token-a',
        '--other-header',
        'Authorization: Bearer token-b',
        ...FIXTURE_RUN,
      ],
    );
    expect(faults(run)).toEqual(['scope.per-caller']);
    expect(run.checks.get('scope.per-caller')?.observed).toContain(
      "the other caller got the first caller's result",
    );
    expect(run.code).toBe(1);
  });

  test('deduplication in front of authorization over HTTP: a token refused a first call gets the stored result, authorization.at-replay fails', async () => {
    const run = await checkHttpFixture(['replays-unauthorized.ts'], FORBIDDEN_TOKEN_RUN);
    expect(faults(run)).toEqual(['authorization.at-replay']);
    expect(run.checks.get('authorization.at-replay')?.observed).toMatch(
      /^the stored result went to credentials that may not call it: "charge 1\. New balance: \d+" \(a first call with them got error -32003 This token may not call charge\)$/,
    );
    expect(run.code).toBe(1);
  });

  test('no deduplication over HTTP: authorization.at-replay is not applicable, naming the replay rule that fails', async () => {
    const run = await checkHttpFixture(['no-guard-http.ts'], FORBIDDEN_TOKEN_RUN);
    expect(run.stderr).toBe('');
    expect(run.checks.get('replay.not-executed')?.status).toBe('failed');
    expect(run.checks.get('authorization.at-replay')?.status).toBe('not applicable');
    expect(run.checks.get('authorization.at-replay')?.observed).toMatch(
      /^no replay to authorize: the server executes a keyed retry again \(replay\.not-executed\); the caller's retry got "charge 1\. New balance: (\d+)" after the original "charge 1\. New balance: (\d+)"$/,
    );
    expect(run.code).toBe(1);
  });

  test("the Python prototype's fingerprint on Python's mcp package: 1 and 1.0 conflict, in both eras", async (ctx) => {
    const python = await pythonWithMcp();
    if (typeof python !== 'string' || python.startsWith('skip:')) {
      console.log(`skipped: ${python}`);
      ctx.skip();
      return;
    }
    const server = [
      '--command',
      python,
      `--arg=${join(ROOT, 'test', 'fixtures', 'checker', 'prototype.py')}`,
    ];
    // A seed whose explored history starts a key with `1.0` and retries it with `1`. Python's mcp
    // package takes seconds to import on a busy machine: the first answer gets the fixtures' bound.
    const call = [
      ...['--tool', 'charge', '--arguments', '{"amount":1,"note":"café"}'],
      ...['--seed', '1832347801', '--timeout-ms', '30000'],
    ];
    const runs = await Promise.all(
      ['2026-07-28', '2025-11-25'].map((era) => runChecker([...server, '--era', era, ...call])),
    );
    expect(
      runs.map((run) => run.stdout.includes('"era": "2026-07-28"')),
      runs.map((run) => run.stderr).join('\n'),
    ).toEqual([true, false]);
    for (const run of runs) {
      expect(faults(run)).toEqual(['equivalence.number-spelling']);
      expect(run.checks.get('equivalence.number-spelling')?.observed).toContain('idempotency_key_conflict');
      expect(run.code).toBe(1);
    }
  }, 200_000);
});

/** A venv with Python's `mcp` package, kept across runs in the temp dir; installed if missing. */
const VENV = join(tmpdir(), 'sep3182-checker-python');
const INSTALL_TIMEOUT_MS = 180_000;

async function pythonWithMcp(): Promise<string> {
  const python = join(VENV, 'bin', 'python');
  const run = (file: string, args: string[], timeout: number) =>
    new Promise<{ ok: boolean; output: string }>((resolve) =>
      execFile(file, args, { timeout }, (error, stdout, stderr) =>
        resolve({ ok: !error, output: stdout + stderr }),
      ),
    );
  if (existsSync(python) && (await run(python, ['-c', 'import mcp.server.lowlevel'], 30_000)).ok)
    return python;
  const venv = await run('python3', ['-m', 'venv', VENV], 60_000);
  if (!venv.ok) throw new Error(`python3 -m venv failed (is python3-venv installed?): ${venv.output}`);
  // No retries: an index that cannot be reached fails at once, the next one is tried.
  const pip = await run(
    python,
    ['-m', 'pip', 'install', '--retries', '0', '--timeout', '20', 'mcp'],
    INSTALL_TIMEOUT_MS,
  );
  if (pip.ok) return python;
  if (/No matching distribution|Could not find a version|NewConnectionError/.test(pip.output)) {
    return `skip: pip could not reach an index with the mcp package: ${pip.output.slice(-300)}`;
  }
  throw new Error(`pip install mcp failed: ${pip.output.slice(-1000)}`);
}
