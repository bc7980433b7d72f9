// A vitest reporter that writes down the errors vitest caught outside any test: an unhandled
// rejection in a test file, a worker that died or did not answer. Vitest fails the run for them,
// every test passed or not, but its JSON report has no field for them; .ci/run prints this file
// beside the counts, so a run that failed with every test passed says why at its end.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

/** Where it writes, relative to the directory vitest runs in, unless told otherwise. */
export const ERRORS_FILE = 'test-results/vitest-errors.json';

/** What .ci/run prints of one error: its name and message, where it was thrown, and in which file. */
export interface OutsideError {
  readonly name: string;
  readonly message: string;
  readonly stack: string;
  /** The test file running when it was thrown, and the test, as vitest marks the error. */
  readonly file?: string;
  readonly test?: string;
}

export function describeError(error: unknown): OutsideError {
  if (error instanceof Error || (typeof error === 'object' && error !== null && 'message' in error)) {
    const { name, message, stack, VITEST_TEST_PATH, VITEST_TEST_NAME } = error as Record<string, unknown>;
    return {
      name: typeof name === 'string' ? name : 'Error',
      message: String(message),
      stack: typeof stack === 'string' ? stack.split('\n').slice(1, 6).join('\n') : '',
      ...(typeof VITEST_TEST_PATH === 'string' && { file: VITEST_TEST_PATH }),
      ...(typeof VITEST_TEST_NAME === 'string' && { test: VITEST_TEST_NAME }),
    };
  }
  return { name: typeof error, message: String(error), stack: '' };
}

export default class ErrorsReporter implements Reporter {
  readonly #file: string;

  constructor(options: { file?: string } = {}) {
    this.#file = options.file ?? ERRORS_FILE;
  }

  onTestRunEnd(_modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    mkdirSync(dirname(this.#file), { recursive: true });
    writeFileSync(this.#file, `${JSON.stringify(unhandledErrors.map(describeError), null, 2)}\n`);
  }
}
