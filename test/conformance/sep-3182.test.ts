// SEP-3182's server scenarios (test/conformance/, in the official suite's own format) run by the suite's
// own CLI and runner: every check passes against the demo server, the replay rules fail against
// the demo's tools without the guard, and the checker (packages/checker) reaches the same verdict
// as the scenarios on every case both cover, on both servers.

import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { z } from 'zod';
import { type HttpInstance, startHttpInstance } from '../../demo/processes/launch.js';
import { CHARGE_LIMIT, MemoryLedger } from '../../ledger.js';
import { type CheckerRun, ROOT, runChecker, startFixtureHttp } from '../fixtures/checker/harness.js';
import { startBareHttpServer } from '../support/http.js';
import { CONFORMANCE_2026_CLI, findNode24, INSTALL_TIMEOUT_MS } from '../support/node24.js';
import { withScenarios } from './harness/hooks.mjs';

const HARNESS = join(ROOT, 'test', 'conformance', 'harness', 'register.mjs');
const SEP_YAML = join(ROOT, 'test', 'conformance', 'src', 'seps', 'sep-3182.yaml');
const SCENARIO = 'tools-call-idempotency';

/**
 * Every charge takes this long, so a duplicate sent 100 ms after its original, and a stream broken
 * 200 ms after it was sent, find the original running.
 */
const CHARGE_LATENCY_MS = 600;
/** Some 45 calls, most of them 600 ms charges, on a machine shared with other jobs. */
const RUN_TIMEOUT_MS = 150_000;

/**
 * Alice and bob, two callers with every scope but admin (scope per caller needs both), and a token
 * of alice's that may only read (authorization at replay).
 */
const TOKENS = 'alice:token-a,alice:token-r:read,bob:token-b';

/** What the scenario calls: the demo's charge, its twin for the conflict, and the two callers. */
const FIXTURE = {
  tool: 'charge_guarded',
  // Two members (key order), a number (1.0), a string with a composed character (escapes, NFD).
  arguments: { amount: 1, note: 'café' },
  // Every charge is slow on these servers; the demo's schema ignores `note`.
  slowArguments: { amount: 1 },
  otherTool: 'charge_unguarded',
  // Declined by the ledger, each decline numbered: a stored decline shows the old number.
  errorArguments: { amount: CHARGE_LIMIT + 1 },
  headers: { Authorization: 'Bearer token-a' },
  otherCallerHeaders: { Authorization: 'Bearer token-b' },
  forbiddenHeaders: { Authorization: 'Bearer token-r' },
};

/** The same call and callers, as the checker's command line says them. */
const CHECKER_CALL = [
  ...['--tool', FIXTURE.tool, '--arguments', JSON.stringify(FIXTURE.arguments)],
  ...['--slow-arguments', JSON.stringify(FIXTURE.slowArguments), '--other-tool', FIXTURE.otherTool],
  ...['--error-arguments', JSON.stringify(FIXTURE.errorArguments)],
  ...['--header', 'Authorization: Bearer token-a', '--other-header', 'Authorization: Bearer token-b'],
  ...['--forbidden-header', 'Authorization: Bearer token-r'],
  ...['--timeout-ms', '30000'],
];

const Checks = z.array(
  z.object({
    id: z.string(),
    status: z.enum(['SUCCESS', 'FAILURE', 'WARNING', 'SKIPPED', 'INFO']),
    errorMessage: z.string().optional(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
);
type Check = z.infer<typeof Checks>[number];

interface SuiteRun {
  checks: Check[];
  /** The suite's exit status: 0 when every check passed. */
  code: number | null;
}

/** Runs the scenario through the suite's own CLI and reads its checks.json. */
async function runScenario(node: string, url: URL, fixture: object): Promise<SuiteRun> {
  const out = await mkdtemp(join(tmpdir(), 'sep3182-conformance-sep-'));
  try {
    const args = ['--import', 'tsx', '--import', HARNESS, CONFORMANCE_2026_CLI, 'server'];
    args.push('--url', url.href, '--scenario', SCENARIO, '-o', out);
    const env = { ...process.env, MCP_CONFORMANCE_SEP_3182_FIXTURE: JSON.stringify(fixture) };
    const { code, stderr } = await new Promise<{
      code: number | null;
      stdout: string;
      stderr: string;
    }>((resolve) =>
      execFile(node, args, { cwd: ROOT, env, timeout: RUN_TIMEOUT_MS }, (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
      ),
    );
    const [results] = await readdir(out);
    if (results === undefined) throw new Error(`the suite wrote no results: ${stderr}`);
    const checks = Checks.parse(JSON.parse(await readFile(join(out, results, 'checks.json'), 'utf8')));
    return { checks, code };
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

/** The check ids the SEP's traceability file declares, in its order. */
async function declaredChecks(): Promise<string[]> {
  const yaml = await readFile(SEP_YAML, 'utf8');
  return [...yaml.matchAll(/^ {2}- check: (\S+)$/gm)].map((match) => match[1] ?? '');
}

const notPassed = (checks: Check[]) =>
  checks.filter((check) => check.status !== 'SUCCESS').map((check) => check.id);

const describeCheck = (check: Check) => `${check.status} ${check.id}: ${check.errorMessage ?? ''}`;

/** The number of the decline a response's text reports. */
const declineNumber = (text: unknown) =>
  typeof text === 'string' ? /\(decline (\d+)\)/.exec(text)?.[1] : undefined;

describe('SEP-3182 scenarios through the conformance suite’s own runner', () => {
  let node: string;
  let guarded: HttpInstance;
  let unguarded: { url: URL; close(): Promise<void> };
  // One run of each per server, shared by the tests below: each run charges that server's ledger,
  // and the checker must not run on a server while the scenario does.
  const runs = new Map<string, Promise<SuiteRun>>();
  const suiteOn = (name: 'guarded' | 'unguarded') => {
    const run = runs.get(name) ?? runScenario(node, (name === 'guarded' ? guarded : unguarded).url, FIXTURE);
    runs.set(name, run);
    return run;
  };
  const scenarioOn = async (name: 'guarded' | 'unguarded') => (await suiteOn(name)).checks;

  // The first run on Node 20 installs Node 24 into .cache: the hook waits as long as that may take.
  beforeAll(async () => {
    [node, guarded, unguarded] = await Promise.all([
      findNode24(),
      startHttpInstance(['--charge-latency-ms', String(CHARGE_LATENCY_MS)], { DEMO_BEARER_TOKENS: TOKENS }),
      // The demo's own tools on the SDK's bare server: the same server, without the guard.
      startBareHttpServer(new MemoryLedger(CHARGE_LATENCY_MS)),
    ]);
  }, INSTALL_TIMEOUT_MS + 30_000);
  afterAll(async () => {
    await Promise.all([guarded?.stop(), unguarded?.close()]);
  });

  test(
    'against the demo server, every check the SEP file declares runs, and every one passes',
    async () => {
      const { checks, code } = await suiteOn('guarded');
      // Each check that did not pass, with what it saw: the first thing to read when this fails.
      expect(checks.filter((check) => check.status !== 'SUCCESS').map(describeCheck)).toEqual([]);
      // The suite's own verdict, with no baseline of expected failures.
      expect(code).toBe(0);
      const emitted = checks.map((check) => check.id).filter((id) => id.startsWith('sep-3182-'));
      expect(emitted).toEqual(await declaredChecks());
      // The keyed decline's retry got its own number back, not a new decline.
      const declines = checks.find((check) => check.id === 'sep-3182-errors-replayed')?.details;
      expect(declineNumber(declines?.original)).toMatch(/^\d+$/);
      expect(declineNumber(declines?.retry)).toBe(declineNumber(declines?.original));
      // The re-issues after the broken stream met the original still running, then its record.
      const answers = checks.find((check) => check.id === 'sep-3182-reissue-after-broken-stream')?.details
        ?.answers;
      expect(answers).toEqual(
        expect.arrayContaining(['no answer (stream broken)', 'error -32602 (idempotency_key_in_progress)']),
      );
    },
    RUN_TIMEOUT_MS,
  );

  test(
    'against the same tools without the guard, every rule that rests on deduplication fails',
    async () => {
      const { checks, code } = await suiteOn('unguarded');
      expect(code).toBe(1);
      expect(notPassed(checks).sort()).toEqual(
        [
          'sep-3182-capability-advertised',
          'sep-3182-replay-not-executed',
          'sep-3182-replay-identical',
          'sep-3182-errors-replayed',
          'sep-3182-in-progress-not-executed',
          'sep-3182-in-progress-error',
          'sep-3182-conflict-other-arguments',
          'sep-3182-conflict-other-tool',
          'sep-3182-conflict-error',
          'sep-3182-equivalence-key-order',
          'sep-3182-equivalence-whitespace',
          'sep-3182-equivalence-number-spelling',
          'sep-3182-equivalence-string-escapes',
          'sep-3182-equivalence-no-unicode-normalization',
          'sep-3182-authorization-at-replay',
          'sep-3182-reissue-after-broken-stream',
        ].sort(),
      );
      // Without records, a keyed decline's retry is declined again, under a new number.
      expect(checks.find((check) => check.id === 'sep-3182-errors-replayed')?.errorMessage).toMatch(
        /^the retry got another answer: /,
      );
      const reissue = checks.find((check) => check.id === 'sep-3182-reissue-after-broken-stream');
      expect(reissue?.errorMessage).toMatch(/^2 executions for one call re-issued after its stream broke/);
      // Without records there is no conflict to read, and the bare server lets the read-only token
      // charge: missing prerequisites, not verdicts.
      for (const id of ['sep-3182-conflict-error', 'sep-3182-authorization-at-replay'])
        expect(checks.find((check) => check.id === id)?.errorMessage).toMatch(/^Not testable: /);
    },
    RUN_TIMEOUT_MS,
  );

  test(
    'against a server that deduplicates in front of authorization, a stored failure replays and the replay to a read-only token fails',
    async () => {
      const server = await startFixtureHttp('replays-unauthorized.ts');
      try {
        const { checks } = await runScenario(node, new URL(server.url), {
          tool: 'charge',
          arguments: { amount: 1, note: 'café' },
          slowArguments: { amount: 1, slow: true },
          // Over 100 is declined, each decline numbered: a stored failure shows the old number.
          errorArguments: { amount: 1000 },
          otherTool: 'refund',
          headers: { Authorization: 'Bearer token-a' },
          forbiddenHeaders: { Authorization: 'Bearer token-r' },
        });
        const byId = new Map(checks.map((check) => [check.id, check]));
        expect(byId.get('sep-3182-errors-replayed')?.status).toBe('SUCCESS');
        expect(byId.get('sep-3182-authorization-at-replay')?.errorMessage).toMatch(
          /^the stored response went to credentials that may not call the tool: /,
        );
        // The fixture has one caller: scope is the other check it cannot show.
        expect(notPassed(checks).sort()).toEqual([
          'sep-3182-authorization-at-replay',
          'sep-3182-scope-per-caller',
        ]);
      } finally {
        server.child.kill('SIGKILL');
      }
    },
    RUN_TIMEOUT_MS,
  );

  test(
    'the checker reaches the scenarios’ verdict on every case both cover, on both servers',
    async () => {
      for (const name of ['guarded', 'unguarded'] as const) {
        const checks = await scenarioOn(name);
        const url = name === 'guarded' ? guarded.url : unguarded.url;
        // The rules' checks alone: the explorer's generated histories have no scenario to agree with.
        const checker = await runChecker(['--url', url.href, ...CHECKER_CALL, '--budget', '0']);
        expect(checker.stderr).toBe('');
        const pairs = Object.entries(CHECKER_RULE).map(([check, rule]) => ({
          check,
          rule,
          scenario: scenarioVerdict(checks.find((c) => c.id === check)),
          checker: checkerVerdict(checker, rule),
        }));
        // Every case is judged on both sides: a renamed rule or check fails here, not silently.
        const missing = pairs.filter((pair) => pair.scenario === 'missing' || pair.checker === 'missing');
        expect(missing.map((pair) => `${pair.check} / ${pair.rule}`)).toEqual([]);
        // A pair per case, each side named, so a disagreement reads as one line.
        const disagreements = pairs
          .filter((pair) => pair.scenario !== pair.checker)
          .map((p) => `${name}: ${p.check} ${p.scenario}, ${p.rule} ${p.checker}`);
        expect(disagreements).toEqual([]);
        // The unguarded server breaks rules: the agreement is not all "holds".
        if (name === 'unguarded') expect(new Set(pairs.map((pair) => pair.checker))).toContain('broken');
      }
    },
    2 * RUN_TIMEOUT_MS,
  );
});

describe('the harness that registers the scenario in the published runner', () => {
  test('finds each piece of the bundle it needs once, and stops naming the piece that moved', async () => {
    const bundle = await readFile(CONFORMANCE_2026_CLI, 'utf8');
    const patched = withScenarios(bundle);
    expect(patched).toContain('import{IdempotencyScenario as __Sep3182Scenario}');
    expect(patched).toMatch(
      /export\{\w+ as buildStandardHeaders,\w+ as withRequestMeta,\w+ as untestableCheck\};\n$/,
    );
    // A release that renames the listing's message (and so hides the map) never runs without the scenario.
    const moved = bundle.replace('Server scenarios (test against a server):', 'Server scenarios:');
    expect(() => withScenarios(moved)).toThrow(/the server scenario listing found 0 times/);
  });
});

// --- The same cases, as the scenarios and the checker name them ---

/**
 * Each scenario check and the checker rule that judges the same case. Rules the checker has that
 * no scenario covers (and any it gains) are not compared; the broken-stream re-issue is the
 * scenarios' alone.
 */
const CHECKER_RULE: Record<string, string> = {
  'sep-3182-capability-advertised': 'capability.advertised',
  'sep-3182-no-key-executes': 'no-key.executes-every-time',
  'sep-3182-new-key-executes': 'new-key.executes',
  'sep-3182-replay-not-executed': 'replay.not-executed',
  'sep-3182-replay-identical': 'replay.identical',
  'sep-3182-errors-replayed': 'errors.replayed',
  'sep-3182-in-progress-not-executed': 'in-progress.not-executed',
  'sep-3182-in-progress-not-blocked': 'in-progress.not-blocked',
  'sep-3182-in-progress-error': 'in-progress.data',
  'sep-3182-conflict-other-arguments': 'conflict.other-arguments',
  'sep-3182-conflict-other-tool': 'conflict.other-tool',
  'sep-3182-conflict-error': 'conflict.data',
  'sep-3182-equivalence-key-order': 'equivalence.key-order',
  'sep-3182-equivalence-whitespace': 'equivalence.whitespace',
  'sep-3182-equivalence-number-spelling': 'equivalence.number-spelling',
  'sep-3182-equivalence-string-escapes': 'equivalence.string-escapes',
  'sep-3182-equivalence-no-unicode-normalization': 'equivalence.no-unicode-normalization',
  'sep-3182-scope-per-caller': 'scope.per-caller',
  'sep-3182-authorization-at-replay': 'authorization.at-replay',
};

/** A verdict both tools can state: the rule held, was broken, or could not be observed. */
type Verdict = 'holds' | 'broken' | 'unobservable' | 'missing';

function scenarioVerdict(check: Check | undefined): Verdict {
  if (check === undefined) return 'missing';
  if (check.status === 'SUCCESS') return 'holds';
  return check.details?.untestable === true ? 'unobservable' : 'broken';
}

function checkerVerdict(run: CheckerRun, rule: string): Verdict {
  const status = run.checks.get(rule)?.status;
  if (status === undefined) return 'missing';
  if (status === 'passed') return 'holds';
  return status === 'failed' || status === 'warned' ? 'broken' : 'unobservable';
}
