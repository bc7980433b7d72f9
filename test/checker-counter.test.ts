// How the checker reads the number that counts executions, and what a user is told about it: the
// readings must all agree for a verdict, where they disagree the report says which said what, and
// `--counter` (a JSON pointer into structuredContent, or a pattern on the text) names the number
// when guessing is not enough. The server is `fixtures/checker/raw.ts --receipt`, correct: each
// result names its caller and shows the caller's balance beside a count of every execution; with
// `--others-charging` another user's charge moves that count beside every call.

import { describe, expect, test } from 'vitest';
import { FIXTURE_CALL, faults, runChecker, stdioServer } from './fixtures/checker/harness.js';

const CALL = [...FIXTURE_CALL, '--timeout-ms', '30000'];

const receipts = (...options: string[]) =>
  stdioServer('test/fixtures/checker/flawed.ts', 'correct', '--receipt', ...options);

/** The table's last line when nothing failed or warned. */
const CLEAN = /^0 failed \(MUST\), 0 warned \(SHOULD\), \d+ passed/m;

describe('where the numbers a result shows disagree about what ran', () => {
  test('the rule is not checkable, saying what each number said and to name one with --counter; exit 4', async () => {
    // A replay: the caller's balance moved one step (the probe's), the global count three of its
    // two-per-call steps (the other user's charge beside the retry and the probe, and the probe).
    const run = await runChecker([...receipts('--others-charging'), ...CALL]);
    expect(faults(run)).toEqual([]);
    expect(run.checks.get('replay.not-executed')).toMatchObject({
      status: 'not checkable',
      observed: expect.stringMatching(
        /^the counter's numbers disagree \(the number after "Balance:" says 1 execution, the number after "execution" says 1\.5 executions\): the counter went from (\d+)\/(\d+) \(the original\) to \d+\/\d+ \(then a call without a key, one execution\); if one of them counts only these calls, name it with --counter$/,
      ),
    });
    expect(run.unobserved).toContain('replay.not-executed');
    expect(run.stderr).toMatch(/^Nothing certain about deduplication: .*--counter names it/);
    expect(run.code).toBe(4);
  }, 90_000);
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
