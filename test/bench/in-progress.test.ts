// The benchmark's in-progress figure on a busy machine: an original meant to outlast a batch of
// duplicates can end first, and then a duplicate is answered the original's stored response.
// That is a right answer from another path, so the benchmark neither counts it nor stops on it:
// it holds a new original and makes the call again. Here the original takes 300 ms, and the
// duplicates go on for three times as long.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS } from '../../demo/processes/bounds.js';
import { connectToServer, type ServerConnection } from '../../demo/processes/launch.js';
import { type Endpoint, makeVariants } from './calls.js';
import { checkedCall } from './harness.js';

const SHORT_CHARGE_MS = 300;

let fast: ServerConnection;
let slow: ServerConnection;

beforeAll(async () => {
  [fast, slow] = await Promise.all([
    connectToServer(),
    connectToServer(['--charge-latency-ms', String(SHORT_CHARGE_MS)]),
  ]);
}, START_TIMEOUT_MS * 2);

afterAll(async () => {
  await Promise.allSettled([fast?.close(), slow?.close()]);
});

const endpoint = (server: ServerConnection): Endpoint => ({
  client: server.client,
  refresh: async () => {},
  close: () => server.close(),
});

describe('the benchmark, when an original ends before the duplicates beside it', () => {
  it(
    'counts only in-progress answers, holding a new original each time one ends',
    async () => {
      const { inProgress } = makeVariants(endpoint(fast), endpoint(slow), 'stdio, short charge');
      await inProgress.prepare?.(0);
      let counted = 0;
      const started = performance.now();
      while (performance.now() - started < 3 * SHORT_CHARGE_MS) {
        await checkedCall(inProgress, counted);
        counted += 1;
      }
      await inProgress.settle?.();

      const decisions = (await slow.decisions()).map((d) => String(d.decision));
      const executed = decisions.filter((d) => d === 'executed').length;
      const replayed = decisions.filter((d) => d === 'replayed').length;
      // At least three originals ran one after another, each executed once; every counted call
      // was answered in progress, and any replay was made again rather than counted.
      expect(executed).toBeGreaterThanOrEqual(3);
      expect(decisions.filter((d) => d === 'inProgress').length).toBeGreaterThanOrEqual(counted);
      expect(decisions.length).toBe(executed + replayed + decisions.filter((d) => d === 'inProgress').length);
    },
    START_TIMEOUT_MS,
  );
});
