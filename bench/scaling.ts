// --- First-execution latency with 1e3, 1e5 and 1e6 records already stored ---
//
// Run by bench.ts in a process of its own (a million records must not slow the rows
// measured after them):
//   node --max-old-space-size=4096 --import tsx bench/scaling.ts <rounds> <batch> <sizes…>
// Each size gets its own memory store, filled through the store's own claim and complete
// with the charge tool's response (each with its own text, as real ones would be), then a
// server over the in-memory transport. The sizes are measured in interleaved rounds in this
// one process, so all of them see the same heap: what differs is only the store's size.

import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import {
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_BYTES,
  DEFAULT_RETENTION_MS,
  LOCAL_SCOPE,
  MemoryIdempotencyStore,
} from '../idempotency/index.js';
import { connectInProcess, type InProcessConnection } from '../test/support/in-process.js';
import { reportResult } from './child.js';
import type { Endpoint } from './endpoints.js';
import { rotate } from './matrix.js';
import { summarize } from './stats.js';
import { AMOUNT, makeVariants, settleCall, type Variant } from './variants.js';

export const ScalingRow = z.object({
  storedRecords: z.number(),
  variant: z.enum(['baseline', 'first']),
  samples: z.number(),
  medianUs: z.number(),
  p99Us: z.number(),
  callsPerSecond: z.number(),
  /** Median over the same variant's median with the fewest records stored. */
  ratioToSmallest: z.number(),
});
export const ScalingResult = z.object({ fillSeconds: z.number(), rows: z.array(ScalingRow) });
export type ScalingResult = z.infer<typeof ScalingResult>;

async function fill(store: MemoryIdempotencyStore, records: number): Promise<void> {
  for (let i = 0; i < records; i++) {
    const claim = await store.claim(
      { scope: LOCAL_SCOPE, idempotencyKey: randomUUID() },
      randomUUID(),
      DEFAULT_LEASE_MS,
    );
    if (claim.state !== 'claimed') throw new Error(`filling the store: ${claim.state}`);
    const balance = 1_000_000 + i;
    const result = {
      content: [{ type: 'text', text: `Charged ${AMOUNT}. New balance: ${balance}` }],
      structuredContent: { charged: AMOUNT, balance },
    };
    await store.complete(claim.ticket, { result }, DEFAULT_RETENTION_MS);
  }
}

async function main(rounds: number, batch: number, sizes: number[]): Promise<ScalingResult> {
  const started = performance.now();
  const connections: Array<{ records: number; connection: InProcessConnection; variants: Variant[] }> = [];
  try {
    for (const records of sizes) {
      // Room for the fill and every call measured after it: never `full`.
      const maxRecords = records + 10 * rounds * batch + 100_000;
      // One caller fills it: its quota is the global cap and budget.
      const store = new MemoryIdempotencyStore({
        maxRecords,
        maxRecordsPerScope: maxRecords,
        maxBytesPerScope: DEFAULT_MAX_BYTES,
      });
      await fill(store, records);
      if (store.size !== records) throw new Error(`filled ${store.size} records, not ${records}`);
      const connection = await connectInProcess({ store });
      const endpoint: Endpoint = {
        client: connection.client,
        forgetLogs: () => void connection.decisions.splice(0),
        close: () => connection.close(),
      };
      const variants = makeVariants(endpoint, endpoint, `scaling, ${records} records`).filter(
        (variant) => variant.name === 'baseline' || variant.name === 'first',
      );
      connections.push({ records, connection, variants });
      process.stdout.write(`scaling: ${records.toLocaleString('en')} records stored\n`);
    }
    const fillSeconds = (performance.now() - started) / 1000;
    const samples = new Map<Variant, number[]>();
    const run = async (variant: Variant, calls: number, keep: boolean) => {
      const kept = samples.get(variant) ?? [];
      samples.set(variant, kept);
      await variant.prepare(calls);
      for (let i = 0; i < calls; i++) {
        const sent = performance.now();
        const outcome = await settleCall(() => variant.call(i));
        const us = (performance.now() - sent) * 1000;
        variant.check(outcome);
        if (keep) kept.push(us);
      }
    };
    for (const { variants } of connections) for (const variant of variants) await run(variant, batch, false);
    for (let round = 0; round < rounds; round++) {
      for (const { connection, variants } of rotate(connections, round)) {
        for (const variant of rotate(variants, round)) await run(variant, batch, true);
        connection.decisions.splice(0);
      }
    }
    const rows: Array<z.infer<typeof ScalingRow>> = [];
    const smallest = new Map<string, number>();
    for (const { records, variants } of connections) {
      for (const variant of variants) {
        const summary = summarize(samples.get(variant) ?? []);
        if (!smallest.has(variant.name)) smallest.set(variant.name, summary.medianUs);
        rows.push({
          storedRecords: records,
          variant: variant.name === 'first' ? 'first' : 'baseline',
          samples: summary.samples,
          medianUs: summary.medianUs,
          p99Us: summary.p99Us,
          callsPerSecond: summary.callsPerSecond,
          ratioToSmallest: summary.medianUs / (smallest.get(variant.name) ?? Number.NaN),
        });
      }
    }
    return { fillSeconds, rows };
  } finally {
    await Promise.allSettled(connections.map(({ connection }) => connection.close()));
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [rounds = '10', batch = '500', ...sizes] = process.argv.slice(2);
  reportResult(await main(Number(rounds), Number(batch), sizes.map(Number)));
}
