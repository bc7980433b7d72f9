// How the checker reads the number that counts executions, and what a user is told about it: the
// readings that count must all agree for a verdict (a number moving by fractions of its step, a
// clock or other users' traffic, counts nothing), where they disagree the report says which said what, and
// `--counter` (a JSON pointer into structuredContent, or a pattern on the text) names the number
// when guessing is not enough. The server is `fixtures/checker/raw.ts --receipt`, correct: each
// result names its caller and shows the caller's balance beside a count of every execution; with
// `--others-charging` another user's charge moves that count beside every call.

import { describe, expect, test } from 'vitest';
import {
  type Counter,
  counterOf,
  describeCounter,
  executionsBetween,
  noCount,
  reading,
  type Shown,
} from '../../packages/checker/effect.js';
import { FIXTURE_CALL, faults, runChecker, stdioServer } from '../fixtures/checker/harness.js';

// The rules' own checks: the explorer reads the same counter (test/checker/explore.test.ts).
const CALL = [...FIXTURE_CALL, '--timeout-ms', '30000', '--budget', '0'];

const receipts = (...options: string[]) =>
  stdioServer('test/fixtures/checker/flawed.ts', 'correct', '--receipt', ...options);

/** The table's last line when nothing failed or warned. */
const CLEAN = /^0 failed \(MUST\), 0 warned \(SHOULD\), \d+ passed/m;

describe("where another user's traffic moves one of the numbers", () => {
  test('the count that moves by fractions of its step is set aside, the balance gives every verdict; exit 0', async () => {
    // A replay: the caller's balance moved one step (the probe's), the global count three of its
    // two-per-call steps (the other user's charge beside the retry and the probe, and the probe):
    // 1.5 executions, which no count of executions reads.
    const run = await runChecker([...receipts('--others-charging'), ...CALL]);
    expect(faults(run)).toEqual([]);
    expect(run.counter).toBe('structuredContent /balance and structuredContent /executions (steps 1, 2)');
    expect(run.checks.get('replay.not-executed')).toMatchObject({
      status: 'passed',
      observed: expect.stringMatching(/, the call without a key alone$/),
    });
    expect(run.unobserved).toEqual([]);
    expect(run.code).toBe(0);
  }, 90_000);
});

/** A result as the effect reader sees it: its text, and its structuredContent if any. */
const shown = (text: string, structuredContent?: Record<string, unknown>): Shown => ({
  kind: 'success',
  value: { content: [{ type: 'text', text }], ...(structuredContent && { structuredContent }) },
});

/** The counter read off two results, where a test goes on to use it: none is a failure. */
function counterFound(first: Shown, second: Shown): Counter {
  const counter = counterOf(first, second);
  if (!counter) throw new Error('no counter');
  return counter;
}

describe('reading the effect the way a person would', () => {
  test('structuredContent first: a timestamp in the text is not read while the balance is there', () => {
    const counter = counterOf(
      shown('charge 1 at 2026-07-28T10:00:00.120Z', { balance: 1 }),
      shown('charge 1 at 2026-07-28T10:00:00.275Z', { balance: 2 }),
    );
    expect(counter && describeCounter(counter)).toBe('structuredContent /balance (step 1)');
  });

  test('a balance written with its thousands grouped reads as one number, across 1,000', () => {
    const [a, b] = [shown('charge 1. New balance: 998'), shown('charge 1. New balance: 999')];
    const counter = counterFound(a, b);
    expect(executionsBetween(counter, b, shown('charge 1. New balance: 1,000'))).toBe(1);
    expect(executionsBetween(counter, b, shown('charge 1. New balance: 1,002'))).toBe(3);
    expect(reading(counter, shown('charge 1. New balance: 12,345.5'))).toBe('12345.5');
  });

  test('a number that moves by a fraction of its step is set aside while another counts whole', () => {
    const counter = counterFound(shown('Balance: 1 (execution 2)'), shown('Balance: 2 (execution 4)'));
    // The balance says one execution, the count 1.5 of its steps: the balance is the verdict.
    expect(
      executionsBetween(counter, shown('Balance: 2 (execution 4)'), shown('Balance: 3 (execution 7)')),
    ).toBe(1);
  });

  test('a number that goes back while another counts on is set aside; one that goes back alone is a count', () => {
    const counter = counterFound(shown('Balance: 1 (execution 1)'), shown('Balance: 2 (execution 2)'));
    expect(
      executionsBetween(counter, shown('Balance: 2 (execution 9)'), shown('Balance: 3 (execution 3)')),
    ).toBe(1);
    const balance = counterFound(shown('Balance: 1'), shown('Balance: 2'));
    // A refund that ran took the balance back: still a count, and it says something else ran.
    expect(executionsBetween(balance, shown('Balance: 5'), shown('Balance: 4'))).toBe(-1);
  });

  test('where no number moves by whole steps, no count is guessed: the account names --counter', () => {
    const [a, b] = [shown('charge 1 at 10:00:00.120'), shown('charge 1 at 10:00:00.275')];
    const counter = counterFound(a, b);
    const later = shown('charge 1 at 10:00:00.302');
    expect(executionsBetween(counter, b, later)).toBeUndefined();
    expect(noCount(counter, b, later, 'the retry, then the probe')).toMatch(
      /^no number moved by a whole number of its steps \(.*\): the retry, then the probe; a number that moves by fractions, or backwards, counts something else; name the one that counts executions with --counter$/,
    );
  });

  test('where whole readings disagree, no count is guessed either, and the account says which said what', () => {
    const counter = counterFound(shown('Balance: 1 (execution 1)'), shown('Balance: 2 (execution 2)'));
    expect(
      noCount(counter, shown('Balance: 2 (execution 2)'), shown('Balance: 3 (execution 4)'), 'the account'),
    ).toBe(
      'the counter\'s numbers disagree (the number after "Balance:" says 1 execution, the number after "execution" says 2 executions): the account; if one of them counts only these calls, name it with --counter',
    );
  });
});

describe('--counter names the number, and the report says which it read', () => {
  test.each([
    {
      counter: '/balance',
      reads: 'counter: structuredContent /balance, as --counter names it (step 1)',
    },
    {
      counter: 'Balance: (\\d+)',
      reads:
        'counter: the number --counter "Balance: (\\d+)" matches in the result\'s text ("Balance: 2", step 1)',
    },
  ])(
    '--counter $counter: every verdict given, none failed, exit 0',
    async ({ counter, reads }) => {
      const run = await runChecker([...receipts('--others-charging'), ...CALL, '--counter', counter], false);
      expect(run.stdout.split('\n')).toContain(reads);
      expect(run.stdout).toMatch(CLEAN);
      expect(run.stdout).not.toMatch(/not checkable: the counter/);
      expect(run.code).toBe(0);
    },
    90_000,
  );
});

describe('a --counter that reads no number moving at each execution is refused, exit 2, saying what is there', () => {
  test.each([
    {
      counter: '/balanse',
      error:
        '--counter /balanse: nothing at /balanse in structuredContent (its numbers: /balance, /executions)',
    },
    {
      counter: '/account',
      error:
        '--counter /account: /account in structuredContent is "the local user", not a number (its numbers: /balance, /executions)',
    },
    {
      counter: 'Total: (\\d+)',
      error:
        '--counter "Total: (\\d+)": it matches nothing in the result\'s text, "Charged 1 usd to the local user. Balance: 1 (execution 1)"',
    },
    {
      counter: 'execution \\d+',
      error:
        '--counter "execution \\d+": it matches "execution 1", not a number: the number goes in the pattern\'s first group, such as (\\d+)',
    },
    {
      // The amount charged: a number, but the same at every execution.
      counter: 'Charged (\\d+)',
      error:
        '--counter "Charged (\\d+)" reads 1 in both calls without a key: a number that does not move at each execution counts nothing',
    },
  ])(
    '--counter $counter',
    async ({ counter, error }) => {
      const run = await runChecker([...receipts(), ...CALL, '--counter', counter], false);
      expect(run.stderr).toBe(`error: ${error}\n`);
      expect(run.stdout).toBe('');
      expect(run.code).toBe(2);
    },
    60_000,
  );
});
