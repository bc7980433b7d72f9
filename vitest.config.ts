import { availableParallelism } from 'node:os';
import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that took 25 s or more in a whole run's vitest report (test-results/vitest.json:
 * endTime − startTime), longest first. A list out of date costs minutes, never a test
 * (test/support/layout.test.ts holds that each is there).
 */
export const LONG_FILES: readonly string[] = [
  'test/e2e/provider-hop.test.ts',
  'test/e2e/postgres.test.ts',
  'test/conformance/sep-3182.test.ts',
  'test/docs/blocks.test.ts',
  'test/e2e/demo-tour.test.ts',
  'test/checker/explore.test.ts',
  'test/docs/quickstart.test.ts',
  'test/model/provider.test.ts',
  'test/checker/flaws.test.ts',
  'test/checker/check.test.ts',
  'test/e2e/package.test.ts',
  'test/interop/test/agents-mastra.test.ts',
  'test/e2e/stdio.test.ts',
  'test/e2e/http.test.ts',
  'test/e2e/scale-out.test.ts',
  'test/idempotency/stores/redis/cluster.test.ts',
  'test/e2e/faults.test.ts',
  'test/e2e/npm-scripts.test.ts',
  'test/model/guard.test.ts',
  'test/e2e/outcome-unknown.test.ts',
  'test/e2e/hostile.test.ts',
  'test/demo/hosting/cli.test.ts',
  'test/checker/correct-servers.test.ts',
  'test/e2e/independent-clients.test.ts',
  'test/idempotency/stores/redis/environments.test.ts',
  'test/idempotency/client/client.test.ts',
  'test/e2e/continuation.test.ts',
  'test/interop/test/agents-ai-sdk.test.ts',
  'test/conformance/suite.test.ts',
];

/**
 * The longest files first, then the rest in vitest's order, so the suite does not end on one long
 * file running alone while the other workers stand idle. Vitest orders by the durations it measured
 * last time, but a fresh clone (CI's) has none, and it falls back to the largest file first, which
 * is not the longest: CI's suites ended on the stdio and demo-tour files alone.
 */
class LongFilesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const inVitestsOrder = await super.sort(files);
    const rank = (file: TestSpecification): number => {
      const at = LONG_FILES.indexOf(relative(this.ctx.config.root, file.moduleId));
      return at === -1 ? LONG_FILES.length : at;
    };
    // Array.prototype.sort is stable: the files off the list keep vitest's order among themselves.
    return inVitestsOrder.sort((a, b) => rank(a) - rank(b));
  }
}

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
    sequence: { sequencer: LongFilesFirst },
    // The JSON report is what .ci/run counts, and the errors reporter what vitest caught outside any
    // test (the JSON has no field for those); the default reporter is for people.
    reporters: ['default', 'json', './test/support/errors-reporter.ts'],
    outputFile: { json: 'test-results/vitest.json' },
  },
});
