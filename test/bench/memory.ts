// --- Is memory bounded by the caps? A million distinct keyed calls against the default cap ---
//
// In a process of its own:  node --expose-gc --import tsx test/bench/memory.ts <calls>
// The guard with the demo's defaults (100,000 records, 300 s retention), called with raw
// tools/call params in front of a dispatch that charges the ledger and answers what the charge
// tool answers (a million calls through an SDK client take minutes, and add nothing to what the
// store holds). The first 100,000 keys execute and are kept; every later one is refused with
// idempotency_store_full, so the heap must stop growing at the cap. A record's cost is the heap
// it adds; the stored result's share is measured apart, by holding as many copies on their own.

import { randomUUID } from 'node:crypto';
import {
  createToolCallGuard,
  DEFAULT_MAX_RECORDS,
  IdempotencyErrorType,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { MemoryLedger } from '../../ledger.js';
import { AMOUNT, chargeOf, chargeResult, ONE_CALLER_QUOTA, TOOL, WrongAnswerError } from './calls.js';
import { answerIfMain, int, mb, type Report, timed } from './harness.js';

/** "Bounded": the heap after every call within 5% of the heap when the store reached its cap. */
const BOUNDED = 1.05;

/** Heap used, in bytes, after a full collection. */
function heap(): number {
  if (!globalThis.gc) throw new Error('run with --expose-gc');
  // Twice: the first pass can leave garbage only a second one frees (weak references).
  globalThis.gc();
  globalThis.gc();
  return process.memoryUsage().heapUsed;
}

async function main([calls = 1_000_000]: number[]): Promise<Report> {
  const store = new MemoryIdempotencyStore(ONE_CALLER_QUOTA);
  const cap = store.maxRecords;
  if (cap !== DEFAULT_MAX_RECORDS) throw new Error('the memory figures are for the default cap');
  const guard = createToolCallGuard({ store });
  const ledger = new MemoryLedger();
  const call = (key?: string) =>
    guard({ name: TOOL, arguments: { amount: AMOUNT }, ...(key && { idempotencyKey: key }) }, {}, async () =>
      chargeResult(await ledger.charge(AMOUNT)),
    );
  // Warm up without keys, so nothing is stored before the first measurement.
  for (let i = 0; i < 2_000; i++) await call();
  const before = heap();
  const started = performance.now();
  let [made, executed, refused] = [0, 0, 0];
  const callUntil = async (limit: number) => {
    for (; made < limit; made++) {
      const outcome = await timed(() => call(randomUUID()));
      const full = !outcome.ok && idempotencyErrorOf(outcome.error)?.type === IdempotencyErrorType.storeFull;
      if (chargeOf(outcome)?.charged === AMOUNT) executed += 1;
      else if (full) refused += 1;
      else
        throw new WrongAnswerError(`memory: expected a charge or store full, got ${JSON.stringify(outcome)}`);
    }
  };
  await callUntil(Math.min(cap, calls));
  const atCap = heap();
  await callUntil(calls);
  const seconds = (performance.now() - started) / 1000;
  const after = heap();
  if (executed !== Math.min(cap, calls) || refused !== Math.max(0, calls - cap) || store.size !== executed) {
    throw new WrongAnswerError(
      `expected ${Math.min(cap, calls)} executed, then refusals; got ${executed}, ${refused}`,
    );
  }
  // The heap one stored result takes: as many results as records, each with its own text.
  const held: unknown[] = new Array(executed);
  const bare = heap();
  for (let i = 0; i < executed; i++) held[i] = chargeResult(1_000_000 + i);
  // The holding array's own slots (8 bytes each) are not part of a result.
  const resultBytes = (heap() - bare - 8 * executed) / held.length;
  const bytesPerRecord = (after - before) / executed;
  const growth = after / atCap;
  const heapUsed = { before, atCap, after };
  return {
    title: `Memory after ${int(calls)} distinct keyed calls (default cap ${int(cap)}, retention 300 s)`,
    how: 'The guard with the demo defaults in front of the charge, called directly; its own process, figures after global.gc().',
    table: [
      `executed ${int(executed)}, refused with idempotency_store_full ${int(refused)}, records stored ${int(store.size)} (${seconds.toFixed(1)} s)`,
      `heap used: ${mb(before)} before (warm, nothing stored), ${mb(atCap)} at the cap, ${mb(after)} after ${int(calls)} calls`,
      `per record: ${int(bytesPerRecord)} B of heap = stored result ${int(resultBytes)} B + the record itself ${int(bytesPerRecord - resultBytes)} B`,
    ].join('\n'),
    checks: [
      {
        target: `memory bounded by the cap at ${int(calls)} keys (heap ≤ ${BOUNDED} × at the cap)`,
        figure: `${int(store.size)} records; heap ${growth.toFixed(3)} × at the cap`,
        met: store.size === cap && growth <= BOUNDED,
      },
    ],
    figures: { calls, cap, executed, refused, seconds, heapUsed, bytesPerRecord, resultBytes },
  };
}

await answerIfMain(import.meta.url, main);
