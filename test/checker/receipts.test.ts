// The checker against results that read the way real ones do (`fixtures/checker/raw.ts --receipt`):
// each names its caller ("Charged 1 usd to bob") and shows the caller's own balance beside a count
// of every execution. The checker must find its counter in them by label, whoever calls, and give
// a verdict on every rule its inputs allow; a server with a flaw still fails the rule it breaks.

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

/** The fixtures' call, with room for a server starting on a busy machine. */
const CALL = [...FIXTURE_CALL, '--timeout-ms', '30000', '--budget', '0'];

const receipts = (flaw: string) => stdioServer('test/fixtures/checker/flawed.ts', flaw, '--receipt');

describe('a correct server whose receipts name the caller, with a balance per caller beside a global count', () => {
  test('over HTTP with three tokens: a verdict on every rule its inputs allow, scope and conflicts included, exit 0', async () => {
    const run = await checkHttpFixture(
      ['flawed.ts', 'correct', '--http', '--receipt'],
      [...THREE_TOKENS, ...CALL],
    );
    expect(faults(run)).toEqual([]);
    // Not checkable only where no client can observe; not applicable only where the call has `{}`.
    expect(withStatus(run, 'not checkable').sort()).toEqual([...NEVER_CHECKABLE].sort());
    expect(withStatus(run, 'not applicable')).toEqual(['equivalence.absent-arguments']);
    // structuredContent first: the values a program reads, named by their pointers.
    expect(run.counter).toBe('structuredContent /balance and structuredContent /executions (steps 1, 1)');
    // The other caller's receipt names bob and shows bob's balance: his second charge, his 2.
    expect(run.checks.get('scope.per-caller')?.observed).toMatch(
      /^the other caller's call executed: "Charged 1 usd to bob\. Balance: 2 \(execution \d+\)"$/,
    );
    expect(run.checks.get('conflict.other-arguments')?.observed).toMatch(
      /^rejected: error -32602 idempotency_key_conflict; counter (\d+)\/(\d+) → \d+\/\d+, the call without a key alone; the original request still replays$/,
    );
    expect(run.checks.get('authorization.at-replay')?.status).toBe('passed');
    expect(run.unobserved).toEqual([]);
    expect(run.code).toBe(0);
  }, 90_000);

  test("over HTTP, one caller's record rendered as the other's receipt: the counter shows nothing ran, scope.per-caller fails, exit 1", async () => {
    const run = await checkHttpFixture(
      ['flawed.ts', 'renders-shared-record', '--http', '--receipt'],
      [...THREE_TOKENS, ...CALL],
    );
    expect(faults(run)).toEqual(['scope.per-caller']);
    // Bob's receipt, his name and his balance, yet neither number moved as one execution does:
    // his balance stayed at the 1 of his call with a fresh key, and the count went back to the
    // first caller's charge.
    const observed = run.checks.get('scope.per-caller')?.observed ?? '';
    const moved =
      /^the other caller's call with the key moved its counter by 0 executions: 1\/(\d+) → 1\/(\d+)$/;
    expect(observed).toMatch(moved);
    const [, before, after] = moved.exec(observed) ?? [];
    expect(Number(after)).toBeLessThan(Number(before));
    expect(run.code).toBe(1);
  }, 90_000);
});

describe('a server with a flaw fails the rule it breaks in receipt mode too, exit status 1', () => {
  test.each([
    {
      flaw: 'conflict-executes',
      faults: CONFLICTS,
      observed: {
        // The conflicting charge of 2 moved the balance three steps with the probe's, the count
        // two: both say something executed beside the probe; the verdict reads the nearer.
        'conflict.other-arguments':
          /^rejected it \(error -32602 idempotency_key_conflict\), yet something executed \(the counter moved 1 step more than the call without a key alone\): the counter went from \d+\/\d+ \(the original\) to \d+\/\d+ \(then a call without a key, one execution\)$/,
        // The refund that ran took the balance back where the probe then put it (0 steps), while
        // the count moved 2: neither says the probe's 1 alone, so something executed.
        'conflict.other-tool':
          /^rejected it \(error -32602 idempotency_key_conflict\), yet something executed \(the counter moved 1 step more/,
      },
    },
    {
      flaw: 'replay-executes',
      faults: [...REPLAYS, 'retention.per-key'],
      observed: {
        'replay.not-executed':
          /^the retry got "Charged 1 usd to the local user\. Balance: \d+ \(execution \d+\)", the stored answer, yet something executed/,
      },
    },
    {
      flaw: 'remembers-last-key',
      faults: ['retention.per-key'],
      observed: {
        'retention.per-key':
          /^the first key, retried after a second key, got "Charged 1 usd to the local user\..*its record was gone$/,
      },
    },
    {
      flaw: 'keys-case-insensitive',
      faults: ['key.opaque'],
      observed: {
        'key.opaque':
          /^the key in lower case, "key-[-0-9a-f]+", got "Charged 1 usd to the local user\. Balance: (\d+) \(execution (\d+)\)", nothing executed \(counter \1\/\2 → \1\/\2\)/,
      },
    },
    {
      flaw: 'replays-by-arguments',
      faults: ['replay.own-result'],
      observed: {
        'replay.own-result':
          /^the first key's retry, after a second key with the same arguments, got the second key's "Charged 1 usd/,
      },
    },
  ])(
    '$flaw: fails $faults',
    async ({ flaw, faults: expected, observed }) => {
      const run = await runChecker([...receipts(flaw), ...CALL]);
      expect(faults(run)).toEqual([...expected].sort());
      for (const [rule, pattern] of Object.entries(observed))
        expect(run.checks.get(rule)?.observed, rule).toMatch(pattern);
      expect(run.code).toBe(1);
    },
    90_000,
  );
});
