// The reporter .ci/run reads for errors outside any test, run as .ci/run runs it: a real vitest
// over a file whose one test passes and leaves a rejection nobody handles.

import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect, test } from 'vitest';
import { ROOT } from '../../demo/processes/launch.js';
import { ERRORS_FILE, type OutsideError } from './errors-reporter.js';
import { tempFolder } from './temp-folder.js';

const folder = tempFolder('errors-reporter');

/** Runs vitest in the folder over one test file's source; its exit code and what the reporter wrote. */
async function vitestOver(source: string): Promise<{ code: number; errors: OutsideError[] }> {
  writeFileSync(join(folder.dir, 'one.test.ts'), source);
  const vitest = join(ROOT, 'node_modules', 'vitest', 'vitest.mjs');
  const reporter = join(ROOT, 'test', 'support', 'errors-reporter.ts');
  const args = [vitest, 'run', '--root', folder.dir, '--globals', '--reporter=dot', `--reporter=${reporter}`];
  const code = await promisify(execFile)(process.execPath, args, { cwd: folder.dir }).then(
    () => 0,
    (failure: { code?: number }) => failure.code ?? -1,
  );
  const errors = JSON.parse(readFileSync(join(folder.dir, ERRORS_FILE), 'utf8')) as OutsideError[];
  return { code, errors };
}

test('a rejection left behind by a passing test fails the run, and the reporter writes it down', async () => {
  const run = await vitestOver("test('passes', () => { void Promise.reject(new Error('left behind')); });\n");
  expect(run.code).toBe(1);
  expect(run.errors).toHaveLength(1);
  expect(run.errors[0]?.message).toBe('left behind');
  expect(run.errors[0]?.stack).toContain('one.test.ts');
  expect(run.errors[0]?.file).toBe(join(folder.dir, 'one.test.ts'));
});

test('a clean run writes an empty list', async () => {
  const run = await vitestOver("test('passes', () => { expect(1).toBe(1); });\n");
  expect(run).toEqual({ code: 0, errors: [] });
});
