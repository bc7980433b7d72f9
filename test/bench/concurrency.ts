// --- Does the guard cost throughput with 1, 8 and 64 concurrent clients? ---
//
// Each client calls in a loop, one call at a time, for a fixed phase; throughput is the calls
// all clients completed over the phase's wall time. Unkeyed and keyed-first phases alternate
// (rotating which goes first), so drift lands on both alike. In process, every client has its
// own McpServer sharing one store and ledger; over HTTP, they are clients of one server process.
// (Stdio has no second client: one process serves one connection.)

import { randomUUID } from 'node:crypto';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { z } from 'zod';
import {
  AMOUNT,
  chargeOf,
  type Endpoint,
  type ServerPair,
  TOOL,
  VARIANT_LABEL,
  WrongAnswerError,
} from './calls.js';
import { int, type Outcome, type Report, rotate, summarize, table, timed, us } from './harness.js';

const CLIENTS = [1, 8, 64];
const KINDS = ['baseline', 'first'] as const;
type Kind = (typeof KINDS)[number];

export async function measureConcurrency(
  pairs: ServerPair[],
  plan: { rounds: number; phaseMs: number },
): Promise<Report> {
  const rows = [];
  for (const { transport, store, fast: server } of pairs) {
    for (const clients of CLIENTS) {
      const connect = () => server.connect(MODERN_PROTOCOL_VERSION);
      const pool = await Promise.all(Array.from({ length: clients }, connect));
      const ms = { baseline: 0, first: 0 };
      const samples: Record<Kind, number[]> = { baseline: [], first: [] };
      const failedClosed = { baseline: 0, first: 0 };
      try {
        // Round -1 is a short warm-up of both paths, not counted.
        for (let round = -1; round < plan.rounds; round++) {
          for (const kind of rotate(KINDS, round + 1)) {
            if (round < 0) await phase(pool, kind, plan.phaseMs / 4, [], failedClosed);
            else ms[kind] += await phase(pool, kind, plan.phaseMs, samples[kind], failedClosed);
          }
        }
      } finally {
        await Promise.allSettled(pool.map((endpoint) => endpoint.close()));
      }
      const rate = (kind: Kind) => (samples[kind].length * 1000) / ms[kind];
      for (const kind of KINDS) {
        const { samples: calls, ...latency } = summarize(samples[kind]);
        const throughput = { callsPerSecond: rate(kind), ratio: rate(kind) / rate('baseline') };
        const refused = failedClosed[kind];
        rows.push({ transport, store, clients, variant: kind, calls, refused, ...throughput, ...latency });
      }
    }
  }
  return {
    title: 'Throughput with concurrent clients',
    how:
      `${plan.rounds} alternating ${plan.phaseMs} ms phases per variant; ratio = keyed / unkeyed calls/s.\n` +
      'Failed: calls a store or the ledger could not answer within its bound (idempotency_store_unavailable, ' +
      "or the tool's error), not counted in calls/s; any at all means the machine was too busy for the figures to mean much.",
    table: table(
      'transport | store | clients | variant | calls/s | median µs | p99 µs | ratio | failed',
      rows.map((row) => [
        ...[row.transport, row.store, String(row.clients), VARIANT_LABEL[row.variant] ?? ''],
        ...[int(row.callsPerSecond), us(row.medianUs), us(row.p99Us), row.ratio.toFixed(3)],
        String(row.refused),
      ]),
    ),
    checks: [],
    figures: rows,
  };
}

/**
 * A right answer from a server with more calls than it can serve in time (64 clients on a busy
 * machine): the guard failing closed when the store is past its bound, or the tool's own error
 * when its ledger's connection is (the Postgres ledger shares the store's pool). Anything else
 * but a new charge is a wrong path.
 */
function failedForLoad(outcome: Outcome): boolean {
  if (!outcome.ok) return idempotencyErrorOf(outcome.error)?.type === IdempotencyErrorType.storeUnavailable;
  return ToolError.safeParse(outcome.result).success;
}

const ToolError = z.object({ isError: z.literal(true) });

/**
 * Every client calling in a loop until `ms` have passed; the phase's wall time. A call that
 * failed for load is counted in `failedClosed` and left out of `samples`.
 */
async function phase(
  pool: Endpoint[],
  kind: Kind,
  ms: number,
  samples: number[],
  failedClosed: Record<Kind, number>,
): Promise<number> {
  const started = performance.now();
  await Promise.all(
    pool.map(async ({ client }) => {
      while (performance.now() < started + ms) {
        const key = kind === 'first' ? { idempotencyKey: randomUUID() } : {};
        const call = { name: TOOL, arguments: { amount: AMOUNT }, ...key };
        const sample: number[] = [];
        const outcome = await timed(() => callTool(client, call), sample);
        if (failedForLoad(outcome)) {
          failedClosed[kind] += 1;
          continue;
        }
        samples.push(...sample);
        if (chargeOf(outcome)?.charged !== AMOUNT) {
          throw new WrongAnswerError(
            `concurrency, ${kind}: expected a charge, got ${JSON.stringify(outcome)}`,
          );
        }
      }
    }),
  );
  return performance.now() - started;
}
