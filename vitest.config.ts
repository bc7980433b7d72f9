import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // The packages' names resolve to their sources, as tsconfig.json's paths say.
  resolve: { tsconfigPaths: true },
  test: {
    // The interop tests run the frameworks installed in test/interop/ (`npm test` installs them first).
    include: ['test/**/*.test.ts'],
    // Every end-to-end test spawns real server processes; give a slow CI machine room. A hook may
    // start two or three at once, each allowed START_TIMEOUT_MS (demo/processes/bounds.ts).
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The files wait on the processes they start more than they compute: with two at once, two
    // cores stood idle 30% of the suite; with three, 8%, and the suite took 888 s instead of
    // 1,025 s (vitest's default on two cores is one).
    maxWorkers: Math.max(3, availableParallelism() - 1),
    // The JSON report is what .ci/run counts, and the errors reporter what vitest caught outside any
    // test (the JSON has no field for those); the default reporter is for people.
    reporters: ['default', 'json', './test/support/errors-reporter.ts'],
    outputFile: { json: 'test-results/vitest.json' },
  },
});
