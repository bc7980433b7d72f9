// Where a test is, kept true: every library source file has its test at its mirrored path, and the
// suite's map (docs/tests.md) names every test file, so a reader finds each where they look; the
// files vitest starts first are files the suite has.

import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { expect, test } from 'vitest';
import { ROOT } from '../../demo/processes/launch.js';
import { LONG_FILES } from '../../vitest.config.js';

/** Files under `dir` (relative to the repository's root) whose names end with `suffix`. */
function filesUnder(dir: string, suffix: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter(
      (file) =>
        file.endsWith(suffix) && !file.split('/').some((part) => part === 'node_modules' || part === 'dist'),
    )
    .map((file) => join(dir, file));
}

test("every library source file has its test at the mirrored path: packages/<p>/X.ts → test/<p's folder>/X.test.ts", () => {
  const packages = { 'packages/idempotency': 'test/idempotency', 'packages/checker': 'test/checker' };
  const missing = Object.entries(packages).flatMap(([source, tests]) =>
    filesUnder(source, '.ts')
      .filter((file) => !file.endsWith('.d.ts'))
      .map((file) => join(tests, relative(source, file)).replace(/\.ts$/, '.test.ts'))
      .filter((mirror) => !filesUnder(tests, '.test.ts').includes(mirror)),
  );
  expect(missing).toEqual([]);
});

test('docs/tests.md names every test file by its path under test/', () => {
  const map = readFileSync(join(ROOT, 'docs', 'tests.md'), 'utf8');
  const named = new Set([...map.matchAll(/`([^`\s]+\.test\.ts)`/g)].map(([, file]) => file));
  const unnamed = filesUnder('test', '.test.ts')
    .map((file) => relative('test', file))
    // The agent frameworks' own loops are named together, as `interop/test/agents-*.test.ts`.
    .filter(
      (file) => !(file.startsWith('interop/test/agents-') && named.has('interop/test/agents-*.test.ts')),
    )
    .filter((file) => !named.has(file));
  expect(unnamed).toEqual([]);
});

test('every file vitest is told to start first is a test file the suite has', () => {
  const tests = filesUnder('test', '.test.ts');
  expect(LONG_FILES.filter((file) => !tests.includes(file))).toEqual([]);
});
