// --- What does a keyed call cost over each transport, store and protocol era? ---
//
// One client per group, one call at a time, every group's five kinds of call interleaved in the
// same rounds (harness.ts); a ratio is a median over the unkeyed median of the same group. Stdio
// and HTTP are measured in both eras a server answers: 2026-07-28 (`server/discover`, an envelope
// on every request) and 2025-11-25 (initialize, then calls). One more group sends 100 KB
// arguments over stdio: the fingerprint's share of a real round trip.

import {
  LEGACY_PROTOCOL_VERSION as LEGACY,
  MODERN_PROTOCOL_VERSION as MODERN,
} from 'mcp-request-idempotency/client';
import type { Era } from '../../demo/processes/launch.js';
import {
  AMOUNT,
  jsonBytes,
  makeVariants,
  orderArgumentsOfSize,
  type ServerPair,
  SLOW_CHARGE_MS,
  type StoreName,
  type TransportName,
  VARIANT_LABEL,
} from './calls.js';
import { type Group, interleave, type Report, table, us, type Variant, yesNo } from './harness.js';

export interface TransportPlan {
  rounds: number;
  warmupRounds: number;
  /** Calls per variant per round. */
  batchCalls: Record<TransportName | '100 KB', number>;
}

type CallGroup = { transport: TransportName; store: StoreName; era: Era; arguments: string };

/** What is measured, in this order; the other questions call the same servers. */
export const SETUPS: ReadonlyArray<[TransportName, StoreName, Era]> = [
  ['in-process', 'memory', MODERN],
  ['stdio', 'memory', MODERN],
  ['stdio', 'memory', LEGACY],
  ['stdio', 'redis', MODERN],
  ['http', 'memory', MODERN],
  ['http', 'memory', LEGACY],
  ['http', 'redis', MODERN],
  ['http', 'redis', LEGACY],
  ['http', 'postgres', MODERN],
  ['http', 'postgres', LEGACY],
];

/**
 * Ratios to the unkeyed call of the same group. The memory store's, per transport; a network
 * store's first execution adds its two round trips, held to their count too (redis.ts, postgres.ts).
 */
const TARGETS: Record<TransportName, Record<string, number | undefined>> = {
  'in-process': { first: 1.1, replay: 1.0, conflict: 1.05, inProgress: 1.05 },
  stdio: { first: 1.1, replay: 1.02, conflict: 1.05, inProgress: 1.05 },
  http: { first: 1.05, replay: 1.0, conflict: 1.05, inProgress: 1.05 },
};
const FIRST_EXECUTION_TARGETS: Record<string, number> = { redis: 1.2, postgres: 1.25, '100 KB': 1.2 };

function targetOf(row: { transport: TransportName; store: StoreName; variant: string; arguments: string }) {
  if (!row.arguments.startsWith('{'))
    return row.variant === 'first' ? FIRST_EXECUTION_TARGETS['100 KB'] : undefined;
  if (row.store === 'memory') return TARGETS[row.transport][row.variant];
  return row.variant === 'first' && row.transport === 'http' ? FIRST_EXECUTION_TARGETS[row.store] : undefined;
}

export async function measureTransports(
  servers: (transport: TransportName, store: StoreName) => ServerPair | undefined,
  plan: TransportPlan,
  progress: (line: string) => void,
): Promise<Report> {
  const groups: Array<Group<CallGroup>> = [];
  const large = orderArgumentsOfSize(100 * 1_024);
  for (const [transport, store, era] of SETUPS) {
    const pair = servers(transport, store);
    if (!pair) continue; // no Redis or no Postgres: said in the report
    const [fast, slow] = await Promise.all([pair.fast.connect(era), pair.slow.connect(era)]);
    const where = `${transport}, ${store} store, ${era}`;
    const afterRound = async () => void (await Promise.all([fast.refresh(), slow.refresh()]));
    const group = (size: TransportName | '100 KB', meta: CallGroup, variants: Variant[]) =>
      groups.push({ meta, variants, batchCalls: plan.batchCalls[size], afterRound });
    const meta = { transport, store, era, arguments: `{"amount":${AMOUNT}}` };
    // Two groups, one per server: each ratio is to an unkeyed call on the server that answered it.
    const { baseline, first, replay, conflict, slowBaseline, inProgress } = makeVariants(fast, slow, where);
    group(transport, meta, [baseline, first, replay, conflict]);
    group(transport, meta, [slowBaseline, inProgress]);
    if (transport === 'stdio' && store === 'memory' && era === MODERN) {
      const { baseline, first } = makeVariants(fast, slow, `${where}, 100 KB`, large);
      group('100 KB', { ...meta, arguments: `100 KB (${jsonBytes(large)} B)` }, [baseline, first]);
    }
  }
  const rows = (await interleave(groups, plan, progress)).map((row) => ({
    ...row,
    target: targetOf(row),
  }));
  const counts = Object.entries(plan.batchCalls).map(([name, n]) => `${name} ${n}`);
  const noRedis = servers('stdio', 'redis') ? '' : '\nRedis skipped: install redis-server or set REDIS_URL.';
  const postgres = servers('http', 'postgres')
    ? '\nPostgres: a private test cluster (fsync off, so commits cost less than on a durable one; every statement\n' +
      'logged), else DATABASE_URL; its slow server charges in process (calls.ts says why).'
    : '\nPostgres skipped: install PostgreSQL server binaries (initdb, pg_ctl) or set DATABASE_URL.';
  return {
    title: 'Per-call latency of tools/call, by transport, store and protocol era',
    how:
      `${plan.rounds} interleaved rounds (after ${plan.warmupRounds} of warm-up) of ${counts.join(', ')} calls ` +
      'per variant; one client, one call at a time.\n' +
      'ratio = median / the unkeyed median of the same group.\n' +
      `In progress: the original runs on an identical server whose charge takes ${SLOW_CHARGE_MS} ms; the answer's ratio is\n` +
      'to an unkeyed call on that same server (get_balance, as its charges are slow), since a server process\n' +
      `that answers fewer calls answers each more slowly on a machine like this one (calls.ts).${noRedis}${postgres}`,
    table: table(
      'transport | store | era | arguments | variant | median µs | p99 µs | ratio | target',
      rows.map((row) => [
        ...[row.transport, row.store, row.era, row.arguments, VARIANT_LABEL[row.variant] ?? row.variant],
        ...[us(row.medianUs), us(row.p99Us), row.ratio.toFixed(3)],
        row.target === undefined ? '' : `≤ ${row.target.toFixed(2)} ${yesNo(row.ratio <= row.target)}`,
      ]),
    ),
    checks: rows.flatMap(({ target, ...row }) => {
      const size = row.arguments.startsWith('{') ? '' : `, ${row.arguments.split(' (')[0]}`;
      const what = `${row.transport}, ${row.store}, ${row.era}${size}, ${VARIANT_LABEL[row.variant]}`;
      const figure = `${row.ratio.toFixed(3)} × (${row.medianUs.toFixed(1)} µs)`;
      return target === undefined
        ? []
        : [{ target: `${what} ≤ ${target} × unkeyed`, figure, met: row.ratio <= target }];
    }),
    figures: rows,
  };
}
