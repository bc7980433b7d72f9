// --- Memory after a million distinct keyed calls, with the default cap ---
//
// Run by bench.ts in a process of its own, with --expose-gc:
//   node --expose-gc --import tsx bench/memory.ts <calls>
// The guard with the demo's defaults (memory store: 100,000 records, 300 s retention), called
// directly with raw tools/call params, in front of a dispatch that charges the ledger and answers
// exactly what the charge tool answers: a million calls through an SDK client and transport take
// minutes on a 2-core machine, too long for the run, and add nothing to what the store holds. The first
// 100,000 keys execute and are kept; every later one is refused with idempotency_store_full,
// so the store, and the heap, must stop growing at the cap. A record's cost is the heap it
// adds; the stored result's share is measured apart, by holding as many copies on their own.

import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import {
  createToolCallGuard,
  DEFAULT_MAX_RECORDS,
  IdempotencyErrorType,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
} from '../idempotency/index.js';
import { MemoryLedger } from '../ledger.js';
import { reportResult } from './child.js';
import { ONE_CALLER_QUOTA } from './endpoints.js';
import { AMOUNT, TOOL } from './variants.js';

const MemorySample = z.object({ heapUsedBytes: z.number(), rssBytes: z.number() });
export const MemoryResult = z.object({
  calls: z.number(),
  cap: z.number(),
  executed: z.number(),
  refusedStoreFull: z.number(),
  recordsStored: z.number(),
  seconds: z.number(),
  before: MemorySample,
  atCap: MemorySample,
  after: MemorySample,
  bytesPerRecord: z.number(),
  resultBytes: z.number(),
  recordOverheadBytes: z.number(),
});
export type MemoryResult = z.infer<typeof MemoryResult>;

function sample(): z.infer<typeof MemorySample> {
  const gc = globalThis.gc;
  if (!gc) throw new Error('run with --expose-gc');
  // Twice: the first pass can leave garbage that only a second one frees (weak references).
  gc();
  gc();
  const usage = process.memoryUsage();
  return { heapUsedBytes: usage.heapUsed, rssBytes: usage.rss };
}

async function main(calls: number): Promise<MemoryResult> {
  // One caller stands for all of them: its quota is the global cap, which is what is measured.
  const store = new MemoryIdempotencyStore(ONE_CALLER_QUOTA);
  const cap = store.maxRecords;
  if (cap !== DEFAULT_MAX_RECORDS) throw new Error('the memory figures are for the default cap');
  const guard = createToolCallGuard({ store });
  const ledger = new MemoryLedger();
  const charge = async () => {
    const balance = await ledger.charge(AMOUNT);
    return {
      content: [{ type: 'text', text: `Charged ${AMOUNT}. New balance: ${balance}` }],
      structuredContent: { charged: AMOUNT, balance },
    };
  };
  const toolsCall = (idempotencyKey?: string) =>
    guard(
      { name: TOOL, arguments: { amount: AMOUNT }, ...(idempotencyKey && { idempotencyKey }) },
      {},
      charge,
    );

  // Warm up without keys, so nothing is stored before the first measurement.
  for (let i = 0; i < 2_000; i++) await toolsCall();
  const before = sample();
  const started = performance.now();
  let executed = 0;
  let refusedStoreFull = 0;
  let made = 0;
  const callUntil = async (limit: number) => {
    for (; made < limit; made++) {
      try {
        const result = await toolsCall(randomUUID());
        const charged: unknown = Reflect.get(Object(result.structuredContent), 'charged');
        if (charged !== AMOUNT) throw new Error(`expected a charge, got ${JSON.stringify(result)}`);
        executed += 1;
      } catch (error) {
        if (idempotencyErrorOf(error)?.type !== IdempotencyErrorType.storeFull) throw error;
        refusedStoreFull += 1;
      }
      if (made > 0 && made % 250_000 === 0)
        process.stdout.write(`memory: ${made.toLocaleString('en')} calls\n`);
    }
  };
  // Up to the cap, a measurement, then the rest: the heap must not grow past the cap.
  await callUntil(Math.min(cap, calls));
  const atCap = sample();
  await callUntil(calls);
  const seconds = (performance.now() - started) / 1000;
  const after = sample();
  if (
    executed !== Math.min(cap, calls) ||
    refusedStoreFull !== Math.max(0, calls - cap) ||
    store.size !== executed
  ) {
    throw new Error(
      `expected ${Math.min(cap, calls)} executed and the rest refused; got ${executed} executed, ${refusedStoreFull} refused, ${store.size} stored`,
    );
  }
  const bytesPerRecord = (after.heapUsedBytes - before.heapUsedBytes) / executed;
  const resultBytes = storedResultBytes(executed);
  return {
    calls,
    cap,
    executed,
    refusedStoreFull,
    recordsStored: store.size,
    seconds,
    before,
    atCap,
    after,
    bytesPerRecord,
    resultBytes,
    recordOverheadBytes: bytesPerRecord - resultBytes,
  };
}

/**
 * The heap one stored result takes: `count` results shaped exactly as the charge tool
 * returns them, each with its own text.
 */
function storedResultBytes(count: number): number {
  const held: unknown[] = new Array(count);
  const before = sample().heapUsedBytes;
  for (let i = 0; i < count; i++) {
    const balance = 1_000_000 + i;
    held[i] = {
      content: [{ type: 'text', text: `Charged ${AMOUNT}. New balance: ${balance}` }],
      structuredContent: { charged: AMOUNT, balance },
    };
  }
  const after = sample().heapUsedBytes;
  // The holding array's own slots (8 bytes each) are not part of a result.
  const bytes = (after - before - 8 * count) / count;
  if (held.length !== count) throw new Error('unreachable');
  return bytes;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const calls = Number(process.argv[2] ?? 1_000_000);
  reportResult(await main(calls));
}
