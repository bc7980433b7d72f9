// The files `.ci/run` runs again on Node 24 (support/node-lines.ts) are files the suite has: a file
// renamed or moved off the list would otherwise drop out of the second line without a word.

import { existsSync } from 'node:fs';
import { expect, test } from 'vitest';
import { BOTH_LINES } from './node-lines.js';

test('every file listed for both Node lines is a test file the suite runs, with its reason', () => {
  const files = Object.entries(BOTH_LINES);
  expect(files.length).toBeGreaterThan(0);
  for (const [file, why] of files) {
    expect(file, file).toMatch(/^test\/.+\.test\.ts$/);
    expect(existsSync(file), `${file} is listed for both Node lines but is not there`).toBe(true);
    expect(why.length, file).toBeGreaterThan(10);
  }
});
