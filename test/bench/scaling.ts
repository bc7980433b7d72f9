// --- Does a first execution stay flat as stored records grow, from 1e3 to 1e6? ---
//
// In a process of its own (a million records must not slow what is measured after them):
//   node --max-old-space-size=4096 --import tsx test/bench/scaling.ts <rounds> <batch> <sizes…>
// Each size gets its own memory store, filled through the store's own claim and complete with
// the charge tool's response (each its own text, as real ones would be), and a server over the
// in-memory transport. The sizes are the variants of one interleaved group in this one process,
// so all of them see the same heap, and a size's ratio is its median over the fewest's.

import { randomUUID } from 'node:crypto';
import {
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_BYTES,
  DEFAULT_RETENTION_MS,
  LOCAL_SCOPE,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { connectInProcess } from '../support/in-process.js';
import { chargeResult, type Endpoint, makeVariants } from './calls.js';
import { answerIfMain, int, interleave, type Report, table, us, type Variant } from './harness.js';

/** "Flat": the median with the most records stored within 5% of the median with the fewest. */
const FLAT = 1.05;

async function main([rounds = 10, batch = 500, ...sizes]: number[]): Promise<Report> {
  const started = performance.now();
  const endpoints: Endpoint[] = [];
  const variants: Variant[] = [];
  try {
    for (const records of sizes) {
      // Room for the fill and every call measured after it: never full. One caller fills it.
      const maxRecords = records + 10 * rounds * batch + 100_000;
      const quota = { maxRecordsPerScope: maxRecords, maxBytesPerScope: DEFAULT_MAX_BYTES };
      const store = new MemoryIdempotencyStore({ maxRecords, ...quota });
      for (let i = 0; i < records; i++) {
        const id = { scope: LOCAL_SCOPE, idempotencyKey: randomUUID() };
        const claim = await store.claim(id, randomUUID(), DEFAULT_LEASE_MS);
        if (claim.state !== 'claimed') throw new Error(`filling the store: ${claim.state}`);
        const result = chargeResult(1_000_000 + i);
        await store.complete(claim.ticket, { result }, DEFAULT_RETENTION_MS);
      }
      if (store.size !== records) throw new Error(`filled ${store.size} records, not ${records}`);
      const { client, decisions, close } = await connectInProcess({ store });
      const endpoint = { client, refresh: async () => void decisions.splice(0), close };
      endpoints.push(endpoint);
      const { first } = makeVariants(endpoint, endpoint, `scaling, ${records} records`);
      variants.push({ ...first, name: String(records) });
    }
    const fillSeconds = (performance.now() - started) / 1000;
    const afterRound = async () => void (await Promise.all(endpoints.map((endpoint) => endpoint.refresh())));
    const group = { meta: {}, variants, batchCalls: batch, afterRound };
    const rows = (await interleave([group], { rounds, warmupRounds: 1 })).map(({ variant, ...row }) => ({
      storedRecords: Number(variant),
      ...row,
    }));
    const [least, most] = [rows[0], rows.at(-1)];
    if (!least || !most) throw new Error('no store sizes given');
    return {
      title: 'Scaling: keyed first execution with records already stored (in process, memory store)',
      how: `Stores filled through claim and complete (${fillSeconds.toFixed(1)} s); ${rounds} interleaved rounds of ${batch} calls.`,
      table: table(
        'records stored | median µs | p99 µs | ratio to fewest',
        rows.map((row) => [int(row.storedRecords), us(row.medianUs), us(row.p99Us), row.ratio.toFixed(3)]),
      ),
      checks: [
        {
          target: `first execution flat from ${least.storedRecords.toExponential(0)} to ${most.storedRecords.toExponential(0)} stored records (≤ ${FLAT} ×)`,
          figure: `${most.ratio.toFixed(3)} × (${least.medianUs.toFixed(1)} → ${most.medianUs.toFixed(1)} µs)`,
          met: most.ratio <= FLAT,
        },
      ],
      figures: { fillSeconds, rows },
    };
  } finally {
    await Promise.allSettled(endpoints.map((endpoint) => endpoint.close()));
  }
}

await answerIfMain(import.meta.url, main);
