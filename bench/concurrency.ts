// --- Does the guard cost throughput with 1, 8 and 64 concurrent clients? ---
//
// Each client calls in a loop, one call at a time, for a fixed phase; throughput is the calls
// all clients completed over the phase's wall time. Unkeyed and keyed-first phases alternate
// (rotating which goes first), so drift lands on both alike. In process, every client has its
// own McpServer sharing one store and ledger; over HTTP, they are clients of one server process.
// (Stdio has no second client: one process serves one connection.)

import { randomUUID } from 'node:crypto';
import { callTool, MODERN_PROTOCOL_VERSION } from '../idempotency/client.js';
import { AMOUNT, type Endpoint, type ServerPair, TOOL, VARIANT_LABEL, WrongAnswerError } from './calls.js';
import { int, type Report, rotate, summarize, table, timed, us } from './harness.js';

const CLIENTS = [1, 8, 64];
type Kind = 'baseline' | 'first';

export async function measureConcurrency(
  pairs: ServerPair[],
  plan: { rounds: number; phaseMs: number },
): Promise<Report> {
  const rows = [];
  for (const { transport, store, fast: server } of pairs) {
    for (const clients of CLIENTS) {
      const pool = await Promise.all(
        Array.from({ length: clients }, () => server.connect(MODERN_PROTOCOL_VERSION)),
      );
      const totals = {
        baseline: { ms: 0, samples: [] as number[] },
        first: { ms: 0, samples: [] as number[] },
      };
      try {
        // Round -1 is a short warm-up of both paths, not counted.
        for (let round = -1; round < plan.rounds; round++) {
          for (const kind of rotate<Kind>(['baseline', 'first'], round + 1)) {
            const { ms, samples } = await phase(pool, kind, round < 0 ? plan.phaseMs / 4 : plan.phaseMs);
            if (round < 0) continue;
            totals[kind].ms += ms;
            totals[kind].samples.push(...samples);
          }
        }
      } finally {
        await Promise.allSettled(pool.map((endpoint) => endpoint.close()));
      }
      const throughput = (kind: Kind) => (totals[kind].samples.length * 1000) / totals[kind].ms;
      for (const kind of ['baseline', 'first'] as const) {
        const { samples, medianUs, p99Us } = summarize(totals[kind].samples);
        const callsPerSecond = throughput(kind);
        const ratio = callsPerSecond / throughput('baseline');
        rows.push({
          transport,
          store,
          clients,
          variant: kind,
          calls: samples,
          callsPerSecond,
          medianUs,
          p99Us,
          ratio,
        });
      }
    }
  }
  return {
    title: 'Throughput with concurrent clients',
    how: `${plan.rounds} alternating ${plan.phaseMs} ms phases per variant; ratio = keyed / unkeyed calls/s.`,
    table: table(
      'transport | store | clients | variant | calls/s | median µs | p99 µs | ratio',
      rows.map((row) => [
        ...[
          row.transport,
          row.store,
          String(row.clients),
          VARIANT_LABEL[row.variant] ?? '',
          int(row.callsPerSecond),
        ],
        ...[us(row.medianUs), us(row.p99Us), row.ratio.toFixed(3)],
      ]),
    ),
    checks: [],
    figures: rows,
  };
}

async function phase(pool: Endpoint[], kind: Kind, ms: number) {
  const samples: number[] = [];
  const started = performance.now();
  await Promise.all(
    pool.map(async ({ client }) => {
      while (performance.now() < started + ms) {
        const key = kind === 'first' ? { idempotencyKey: randomUUID() } : {};
        const outcome = await timed(
          () => callTool(client, { name: TOOL, arguments: { amount: AMOUNT }, ...key }),
          samples,
        );
        const answer = Object(
          outcome.ok ? Reflect.get(Object(outcome.result), 'structuredContent') : undefined,
        );
        if (Reflect.get(answer, 'charged') !== AMOUNT) {
          throw new WrongAnswerError(
            `concurrency, ${kind}: expected a charge, got ${JSON.stringify(outcome)}`,
          );
        }
      }
    }),
  );
  return { ms: performance.now() - started, samples };
}
