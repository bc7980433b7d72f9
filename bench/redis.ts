// --- How many Redis round trips does each decision take? Counted on the Redis side ---
//
// For each decision, N calls through a real stdio server process with `--store redis`, and the
// commands Redis received meanwhile naming that server's idempotency keys (test/support/redis.ts's
// `commandsDuring`, with MONITOR: a command a script runs inside Redis is no round trip of its own,
// the tool's ledger keys are not the guard's, and other traffic on a shared Redis does not leak in).

import { MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { commandsDuring, type TestRedis } from '../test/support/redis.js';
import { makeVariants, type RedisTarget, type ServerPair, serverPrefix, VARIANT_LABEL } from './calls.js';
import { type Report, table, timed, yesNo } from './harness.js';

/** The round trips the guard may spend per decision. */
const TARGETS = { first: 2, replay: 1, conflict: 1, inProgress: 1 } as const;

export async function measureRoundTrips(
  redis: TestRedis,
  keys: RedisTarget,
  servers: ServerPair,
  calls: number,
): Promise<Report> {
  const era = MODERN_PROTOCOL_VERSION;
  const [fast, slow] = await Promise.all([servers.fast.connect(era), servers.slow.connect(era)]);
  const variants = makeVariants(fast, slow, 'Redis round trips over stdio');
  const rows = [];
  try {
    for (const name of ['first', 'replay', 'conflict', 'inProgress'] as const) {
      const variant = variants[name];
      const prefix = serverPrefix(keys, 'stdio', name === 'inProgress' ? 'slow' : 'fast');
      await variant.prepare?.(calls);
      const { commands } = await commandsDuring([redis.admin], `${prefix}idem:`, async () => {
        for (let i = 0; i < calls; i++) variant.check(await timed(() => variant.call(i)));
      });
      await variant.finish?.();
      const sent: Record<string, number> = {};
      for (const command of commands) sent[command] = (sent[command] ?? 0) + 1 / calls;
      const perCall = commands.length / calls;
      rows.push({
        variant: name,
        calls,
        perCall,
        sent,
        target: TARGETS[name],
        met: perCall <= TARGETS[name],
      });
    }
  } finally {
    await Promise.allSettled(Object.values(variants).map((variant) => variant.settle?.()));
  }
  return {
    title: 'Redis round trips per decision',
    how: `${calls} calls per decision through a stdio server with --store redis, counted on the Redis side with MONITOR.`,
    table: table(
      'decision | round trips | target | sent by the guard, per call',
      rows.map((row) => [
        ...[VARIANT_LABEL[row.variant] ?? '', row.perCall.toFixed(2), `≤ ${row.target} ${yesNo(row.met)}`],
        Object.entries(row.sent)
          .map(([command, n]) => `${command} ${n.toFixed(2)}`)
          .join(', '),
      ]),
    ),
    checks: rows.map((row) => ({
      target: `Redis store, ${VARIANT_LABEL[row.variant]}: ≤ ${row.target} round trip${row.target === 1 ? '' : 's'}`,
      figure: row.perCall.toFixed(2),
      met: row.met,
    })),
    figures: rows,
  };
}
