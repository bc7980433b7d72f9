// --- Throughput with 1, 8 and 64 concurrent clients ---
//
// Each client calls in a loop, one call at a time, for a fixed phase; throughput is the calls
// all clients completed divided by the phase's wall time. Unkeyed and keyed-first phases
// alternate (rotating which goes first), so drift lands on both alike.

import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import { callTool } from '../idempotency/client.js';
import type { StoreName, TransportName } from './endpoints.js';
import { rotate } from './matrix.js';
import { elapsedUs, summarize } from './stats.js';
import { AMOUNT, TOOL, WrongAnswerError } from './variants.js';

export const CONCURRENCY_LEVELS = [1, 8, 64] as const;

export interface ConcurrencyPlan {
  rounds: number;
  phaseMs: number;
}

export interface ConcurrencyRow {
  transport: TransportName;
  store: StoreName;
  clients: number;
  variant: 'baseline' | 'first';
  calls: number;
  callsPerSecond: number;
  medianUs: number;
  p99Us: number;
  /** Keyed throughput over unkeyed throughput, same clients. */
  ratio: number;
}

export type Connect = () => Promise<{ client: Client; close(): Promise<void> }>;

export async function runConcurrency(
  transport: TransportName,
  store: StoreName,
  connect: Connect,
  plan: ConcurrencyPlan,
): Promise<ConcurrencyRow[]> {
  const rows: ConcurrencyRow[] = [];
  for (const clients of CONCURRENCY_LEVELS) {
    const connections = await Promise.all(Array.from({ length: clients }, () => connect()));
    try {
      const pool = connections.map((connection) => connection.client);
      await phase(pool, 'baseline', plan.phaseMs / 4); // warm-up, both paths
      await phase(pool, 'first', plan.phaseMs / 4);
      const totals: Record<'baseline' | 'first', Phase> = {
        baseline: { calls: 0, ms: 0, samplesUs: [] },
        first: { calls: 0, ms: 0, samplesUs: [] },
      };
      for (let round = 0; round < plan.rounds; round++) {
        for (const variant of rotate(['baseline', 'first'] as const, round)) {
          const result = await phase(pool, variant, plan.phaseMs);
          const total = totals[variant];
          total.calls += result.calls;
          total.ms += result.ms;
          total.samplesUs.push(...result.samplesUs);
        }
      }
      const throughput = (variant: 'baseline' | 'first') =>
        (totals[variant].calls * 1000) / totals[variant].ms;
      for (const variant of ['baseline', 'first'] as const) {
        const summary = summarize(totals[variant].samplesUs);
        rows.push({
          transport,
          store,
          clients,
          variant,
          calls: totals[variant].calls,
          callsPerSecond: throughput(variant),
          medianUs: summary.medianUs,
          p99Us: summary.p99Us,
          ratio: throughput(variant) / throughput('baseline'),
        });
      }
    } finally {
      await Promise.allSettled(connections.map((connection) => connection.close()));
    }
  }
  return rows;
}

interface Phase {
  calls: number;
  ms: number;
  samplesUs: number[];
}

async function phase(clients: Client[], variant: 'baseline' | 'first', ms: number): Promise<Phase> {
  const samplesUs: number[] = [];
  const started = performance.now();
  const deadline = started + ms;
  await Promise.all(
    clients.map(async (client) => {
      while (performance.now() < deadline) {
        const call =
          variant === 'first'
            ? { name: TOOL, arguments: { amount: AMOUNT }, idempotencyKey: randomUUID() }
            : { name: TOOL, arguments: { amount: AMOUNT } };
        const sent = performance.now();
        const result = await callTool(client, call);
        samplesUs.push(elapsedUs(sent));
        if (Reflect.get(Object(result.structuredContent), 'charged') !== AMOUNT) {
          throw new WrongAnswerError(
            `concurrency, ${variant}: expected a charge, got ${JSON.stringify(result)}`,
          );
        }
      }
    }),
  );
  return { calls: samplesUs.length, ms: performance.now() - started, samplesUs };
}
