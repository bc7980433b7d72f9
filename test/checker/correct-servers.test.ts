// Four correct servers a checker that reads results too literally fails (`fixtures/checker/raw.ts`,
// each with one way of writing or serving its answers a real server has): each must exit 0, and
// the report must say what it read. A timestamp in the text beside the balance in
// structuredContent; a balance written with thousands separators, crossing 1,000 during the run;
// keys refused unless they are UUIDs; a stdio server that answers one request at a time.

import { describe, expect, test } from 'vitest';
import {
  type CheckerRun,
  FIXTURE_CALL,
  faults,
  runChecker,
  stdioServer,
} from '../fixtures/checker/harness.js';

const CALL = [...FIXTURE_CALL, '--timeout-ms', '30000'];

const correct = (option: string) => stdioServer('test/fixtures/checker/flawed.ts', 'correct', option);

/** The checker's run against the correct server with `option`: no failure, no warning, exit 0. */
async function passingRun(option: string): Promise<CheckerRun> {
  const run = await runChecker([...correct(option), ...CALL]);
  expect(faults(run)).toEqual([]);
  expect(run.code).toBe(0);
  return run;
}

describe('a correct server the checker must read as a person would passes, exit 0', () => {
  test('a timestamp in the text, the balance in structuredContent: the balance is the counter', async () => {
    const run = await passingRun('--timestamp');
    expect(run.counter).toBe('structuredContent /balance (step 1)');
    expect(run.unobserved).toEqual([]);
  }, 90_000);

  test('a balance written 1,000: read as one thousand, not as 1 and 0', async () => {
    const run = await passingRun('--thousands');
    expect(run.counter).toBe('the number after "balance:" in the result\'s text (step 1)');
    // The run crossed 1,000: a replay shows the grouped number, read whole.
    const observed = [...run.checks.values()].map((check) => check.observed).join('\n');
    expect(observed).toMatch(/New balance: 1,0\d\d/);
    expect(run.unobserved).toEqual([]);
  }, 90_000);

  test('keys refused unless they are UUIDs: key.opaque spells a UUID it takes', async () => {
    const run = await passingRun('--uuid-keys');
    expect(run.checks.get('key.opaque')).toMatchObject({
      status: 'passed',
      observed: expect.stringMatching(
        /^2 spellings of one key executed once each \("[-0-9A-F]{36}", in lower case, between spaces\).*; the server refused "Key-[-0-9A-F]{36}" \(error -32602 idempotency_key_invalid\), so the spellings are of one it takes$/,
      ),
    });
    expect(run.unobserved).toEqual([]);
  }, 90_000);

  test('one request at a time over stdio: its in-progress timing is not checkable, not failed', async () => {
    const run = await passingRun('--serial');
    for (const id of ['in-progress.not-blocked', 'in-progress.data'])
      expect(run.checks.get(id)).toMatchObject({
        status: 'not checkable',
        observed: expect.stringMatching(
          /^the server answers one request at a time: a tools\/list sent beside the duplicate waited \d+ ms as well/,
        ),
      });
    // Nothing ran twice: the duplicate, answered once the original was done, got its result.
    expect(run.checks.get('in-progress.not-executed')?.status).toBe('passed');
  }, 90_000);
});
