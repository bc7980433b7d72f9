// The checker against target servers in plain Node (`fixtures/checker/raw.ts`), each with one
// flaw an implementer could ship (`fixtures/checker/flawed.ts`), and the correct ones beside
// them: each flaw must fail the rule it breaks, or end the run non-zero saying why, and each
// correct server must pass. What executed is read from the balance, never from the answers.

import { describe, expect, test } from 'vitest';
import {
  CONFLICTS,
  checkHttpFixture,
  FIXTURE_CALL,
  faults,
  NEVER_CHECKABLE,
  REPLAYS,
  runChecker,
  stdioServer,
  THREE_TOKENS,
  withStatus,
} from '../fixtures/checker/harness.js';

const CALL = [
  ...FIXTURE_CALL,
  // Long enough for any answer on a busy machine; short for the server that never answers.
  '--timeout-ms',
  '5000',
  // The rules' own checks: what the explorer finds is test/checker/explore.test.ts's.
  '--budget',
  '0',
];

const flawed = (flaw: string) => stdioServer('test/fixtures/checker/flawed.ts', flaw);

interface FlawCase {
  flaw: string;
  /** Every ✗ and ⚠ of the run. */
  faults: string[];
  /** The rule the flaw breaks, and what the checker must have seen. */
  rule?: string;
  observed?: RegExp;
}

const FLAWS: FlawCase[] = [
  {
    flaw: 'replay-executes',
    faults: [...REPLAYS, 'retention.per-key'],
    rule: 'replay.not-executed',
    observed:
      /^the retry got "charge 1\. New balance: (\d+)", the stored answer, yet something executed \(the counter moved 1 step more than the call without a key alone\): the counter went from \1 \(the original\) to \d+/,
  },
  {
    flaw: 'conflict-executes',
    faults: CONFLICTS,
    rule: 'conflict.other-arguments',
    observed:
      /^rejected it \(error -32602 idempotency_key_conflict\), yet something executed \(the counter moved 2 steps more/,
  },
  {
    flaw: 'in-progress-executes',
    faults: ['in-progress.not-executed'],
    rule: 'in-progress.not-executed',
    observed:
      /^the duplicate got error -32602 idempotency_key_in_progress, yet something executed \(the counter moved 1 step more/,
  },
  {
    flaw: 'dedup-by-arguments',
    // Every scenario after it starts from a replayed original: nothing more to judge.
    // A key spelled another way is a fresh key too: it replays the older result as well.
    faults: ['new-key.executes', 'key.opaque'],
    rule: 'new-key.executes',
    observed:
      /^a call with a fresh key got "charge 1\. New balance: (\d+)", and the counter stayed at \1: an earlier result was replayed, nothing executed$/,
  },
  {
    flaw: 'conflict-overwrites',
    faults: CONFLICTS,
    rule: 'conflict.other-arguments',
    observed:
      /^rejected it \(error -32602 idempotency_key_conflict\), but then the original request under the key got error -32602 idempotency_key_conflict, not the stored "charge 1\. New balance: \d+": the conflict changed the record$/,
  },
  {
    flaw: 'holds-duplicate',
    faults: ['in-progress.data', 'in-progress.not-blocked'],
    rule: 'in-progress.not-blocked',
    observed: /^answered after \d+ ms, of the \d+ ms the original still ran: held for it/,
  },
  {
    flaw: 'rejects-keys',
    faults: ['new-key.executes'],
    rule: 'new-key.executes',
    observed:
      /^a call with a fresh key was refused: error -32602 idempotencyKey: not supported, where the same call without a key executes$/,
  },
  {
    // Nothing executes: the replay only differs, and the message says where, not "executed".
    flaw: 'replay-adds-meta',
    faults: ['replay.identical', 'errors.replayed'],
    rule: 'replay.identical',
    observed:
      /^the retry's answer differs from the original's at result\._meta, only in the second: \{"replayed":true\}$/,
  },
  {
    flaw: 'conflict-as-tool-error',
    faults: CONFLICTS,
    rule: 'conflict.other-arguments',
    observed:
      /^answered isError "Key reused with other arguments", a result where a JSON-RPC error belongs \(counter (\d+) → \d+, the call without a key alone\)$/,
  },
  {
    flaw: 'strips-point-zero',
    faults: ['equivalence.number-spelling'],
    rule: 'equivalence.number-spelling',
    observed:
      /^retry with \{"amount":1e0,"note":"café"\}: rejected it, error -32602 idempotency_key_conflict/,
  },
  {
    flaw: 'remembers-last-key',
    faults: ['retention.per-key'],
    rule: 'retention.per-key',
    observed:
      /^the first key, retried after a second key, got "charge 1\. New balance: \d+", yet something executed \(the counter moved 1 step more than the call without a key alone\).*its record was gone$/,
  },
  {
    flaw: 'keys-case-insensitive',
    faults: ['key.opaque'],
    rule: 'key.opaque',
    observed:
      /^the key in lower case, "key-[-0-9a-f]+", got "charge 1\. New balance: (\d+)", nothing executed \(counter \d+ → \1\): taken for "Key-[-0-9A-F]+", whose result it replayed$/,
  },
  {
    flaw: 'keys-trimmed',
    faults: ['key.opaque'],
    rule: 'key.opaque',
    observed:
      /^the key between spaces, " Key-[-0-9A-F]+ ", got "charge 1\. New balance: \d+", nothing executed/,
  },
  {
    flaw: 'replays-by-arguments',
    faults: ['replay.own-result'],
    rule: 'replay.own-result',
    observed:
      /^the first key's retry, after a second key with the same arguments, got the second key's "charge 1\. New balance: \d+", not its own "charge 1\. New balance: \d+"$/,
  },
];

describe('a server with one flaw fails the rule it breaks, exit status 1', () => {
  test.each(FLAWS)(
    '$flaw: fails $rule',
    async ({ flaw, faults: expected, rule, observed }) => {
      const run = await runChecker([...flawed(flaw), ...CALL]);
      expect(faults(run)).toEqual([...expected].sort());
      if (rule && observed) expect(run.checks.get(rule)?.observed).toMatch(observed);
      expect(run.code).toBe(1);
    },
    60_000,
  );
});

describe('a server that breaks the exchange ends the run with exit status 4, saying where', () => {
  test.each([
    { flaw: 'exits-on-second-key', during: 'new-key.executes', reason: /the server exited \(1\)$/ },
    // The duplicate of a call in progress: both are awaited, so the death is reported, not thrown.
    { flaw: 'exits-on-repeated-key', during: 'in-progress.not-executed', reason: /the server exited \(1\)$/ },
    {
      flaw: 'never-answers-retry',
      during: 'in-progress.not-executed',
      reason: /^tools\/call charge with key [-\w]+: no answer to request \d+ within 5000 ms$/,
    },
  ])(
    '$flaw: broken during $during',
    async ({ flaw, during, reason }) => {
      const run = await runChecker([...flawed(flaw), ...CALL]);
      expect(run.broken?.during).toBe(during);
      expect(run.broken?.reason).toMatch(reason);
      expect(run.checks.get(during)?.status).toBe('not checkable');
      expect(run.notRun).toContain('replay.not-executed');
      expect(run.unobserved).toContain('replay.not-executed');
      expect(faults(run)).toEqual([]);
      expect(run.stderr).toMatch(/^Nothing certain about deduplication: the exchange broke during /);
      expect(run.code).toBe(4);
    },
    60_000,
  );
});

describe('a correct server passes, exit status 0', () => {
  test('over stdio', async () => {
    const run = await runChecker([...flawed('correct'), ...CALL]);
    expect(faults(run)).toEqual([]);
    expect(withStatus(run, 'not checkable').sort()).toEqual([...NEVER_CHECKABLE].sort());
    expect(run.code).toBe(0);
  }, 60_000);

  test.each([
    { flaw: 'correct', name: 'over HTTP, answering in JSON' },
    // The answer is the message with the request's id and a result or an error, not the ping.
    { flaw: 'ping-same-id', name: 'over HTTP, each answer on an SSE stream after a ping reusing its id' },
    // Events are read as they arrive: the answer counts, not the end of the stream.
    { flaw: 'stream-left-open', name: 'over HTTP, each answer on an SSE stream left open after it' },
  ])(
    '$name',
    async ({ flaw }) => {
      const run = await checkHttpFixture(['flawed.ts', flaw, '--http'], [...THREE_TOKENS, ...CALL]);
      expect(faults(run)).toEqual([]);
      expect(run.checks.get('scope.per-caller')?.status).toBe('passed');
      expect(run.checks.get('authorization.at-replay')?.status).toBe('passed');
      expect(run.unobserved).toEqual([]);
      expect(run.code).toBe(0);
    },
    60_000,
  );

  test('keys shared by all callers over HTTP: the other caller is refused, scope.per-caller fails', async () => {
    const run = await checkHttpFixture(['flawed.ts', 'shared-keys', '--http'], [...THREE_TOKENS, ...CALL]);
    expect(faults(run)).toEqual(['scope.per-caller']);
    expect(run.checks.get('scope.per-caller')?.observed).toBe(
      "the other caller's first use of the key was refused: error -32600 key already used by another client, though its call with a fresh key executed",
    );
    expect(run.code).toBe(1);
  }, 60_000);
});
