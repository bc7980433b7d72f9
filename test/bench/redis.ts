// --- How many Redis round trips does each decision take? Counted on the Redis side ---
//
// For each decision, N calls through a real stdio server process with `--store redis`, and the
// commands Redis received meanwhile naming that server's idempotency keys (test/support/redis.ts's
// `commandsDuring`, with MONITOR: a command a script runs inside Redis is no round trip of its own,
// the tool's ledger keys are not the guard's, and other traffic on a shared Redis does not leak in).

import { commandsDuring } from '../../demo/processes/redis-commands.js';
import type { TestRedis } from '../../demo/processes/redis-server.js';
import {
  countPerDecision,
  perCall,
  type RedisTarget,
  ROUND_TRIP_TARGETS,
  type ServerPair,
  serverPrefix,
  VARIANT_LABEL,
} from './calls.js';
import { type Report, table, yesNo } from './harness.js';

export async function measureRoundTrips(
  redis: TestRedis,
  keys: RedisTarget,
  servers: ServerPair,
  calls: number,
): Promise<Report> {
  const counted = await countPerDecision(servers, calls, async (name, run) => {
    const prefix = serverPrefix(keys, servers.transport, name === 'inProgress' ? 'slow' : 'fast');
    return (await commandsDuring([redis.admin], `${prefix}idem:`, run)).commands;
  });
  const rows = counted.map(({ variant, counted: commands }) => {
    const target = ROUND_TRIP_TARGETS[variant];
    const roundTrips = commands.length / calls;
    return { variant, calls, roundTrips, sent: perCall(commands, calls), target, met: roundTrips <= target };
  });
  return {
    title: 'Redis round trips per decision',
    how: `${calls} calls per decision through a stdio server with --store redis, counted on the Redis side with MONITOR.`,
    table: table(
      'decision | round trips | target | sent by the guard, per call',
      rows.map((row) => [
        ...[VARIANT_LABEL[row.variant] ?? '', row.roundTrips.toFixed(2), `≤ ${row.target} ${yesNo(row.met)}`],
        row.sent,
      ]),
    ),
    checks: rows.map((row) => ({
      target: `Redis store, ${VARIANT_LABEL[row.variant]}: ≤ ${row.target} round trip${row.target === 1 ? '' : 's'}`,
      figure: row.roundTrips.toFixed(2),
      met: row.met,
    })),
    figures: rows,
  };
}
