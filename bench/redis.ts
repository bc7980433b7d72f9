// --- How many Redis round trips does each decision take? Counted on the Redis side ---
//
// For each decision, N calls through a real stdio server process with `--store redis`. MONITOR
// shows every command a client sends, and, marked `[0 lua]`, every command a script runs inside
// Redis (no round trip of its own). Only lines naming one server's key prefix are counted, so
// other traffic on a shared Redis does not leak in; the ledger's INCRBY is the tool's, shown
// apart. Markers (a GET of a unique key, sent by the admin client and awaited on the monitor
// stream) bound each measured window exactly.

import { randomUUID } from 'node:crypto';
import { createClient, type RedisClientType } from '@redis/client';
import { MODERN_PROTOCOL_VERSION } from '../idempotency/client.js';
import type { TestRedis } from '../test/support/redis.js';
import {
  makeVariants,
  type RedisTarget,
  type ServerPair,
  serverPrefix,
  VARIANT_LABEL,
  VARIANT_NAMES,
  type VariantName,
} from './calls.js';
import { type Report, table, timed, yesNo } from './harness.js';

/** The round trips the guard may spend per decision. */
const TARGETS: Record<VariantName, number> = { baseline: 0, first: 2, replay: 1, conflict: 1, inProgress: 1 };

export async function measureRoundTrips(
  redis: TestRedis,
  target: RedisTarget,
  servers: ServerPair,
  calls: number,
): Promise<Report> {
  const monitor: RedisClientType = createClient({ url: redis.url });
  monitor.on('error', () => {});
  await monitor.connect();
  let lines: string[] = [];
  const waiting = new Map<string, () => void>();
  await monitor.monitor((line: string) => {
    const marker = [...waiting.keys()].find((m) => line.includes(m));
    if (marker === undefined) lines.push(line);
    else waiting.get(marker)?.();
  });
  const mark = async () => {
    const marker = `${target.prefix}marker:${randomUUID()}`;
    const seen = new Promise<void>((resolve) => waiting.set(marker, resolve));
    await redis.admin.get(marker);
    const timeout = new Promise((_, reject) => setTimeout(reject, 5_000, new Error('no marker on MONITOR')));
    await Promise.race([seen, timeout]);
    waiting.delete(marker);
  };
  const era = MODERN_PROTOCOL_VERSION;
  const [fast, slow] = await Promise.all([servers.fast.connect(era), servers.slow.connect(era)]);
  const variants = makeVariants(fast, slow, 'Redis round trips over stdio');
  const rows = [];
  try {
    for (const name of VARIANT_NAMES) {
      const variant = variants[name];
      const prefix = serverPrefix(target, 'stdio', name === 'inProgress' ? 'slow' : 'fast');
      await variant.prepare(calls);
      await mark();
      lines = [];
      for (let i = 0; i < calls; i++) variant.check(await timed(() => variant.call(i)));
      await mark();
      await variant.finish();
      // Per call, by command: sent by the guard (its `idem:` keys) or run inside its scripts, or the tool's.
      const count = (keys: string, inScript: boolean) => {
        const counts: Record<string, number> = {};
        for (const line of lines) {
          if (!line.includes(`${prefix}${keys}`) || / \[\d+ lua\] /.test(line) !== inScript) continue;
          const command = /"([A-Za-z]+)"/.exec(line)?.[1]?.toUpperCase() ?? '?';
          counts[command] = (counts[command] ?? 0) + 1 / calls;
        }
        return counts;
      };
      const [sent, inScripts, tool] = [count('idem:', false), count('idem:', true), count('ledger:', false)];
      const perCall = Object.values(sent).reduce((sum, n) => sum + n, 0);
      // Round trips are whole numbers; a hair over (a sum of fractions) is not a miss.
      rows.push({
        variant: name,
        calls,
        perCall,
        sent,
        inScripts,
        tool,
        target: TARGETS[name],
        met: perCall < TARGETS[name] + 1e-9,
      });
    }
  } finally {
    await Promise.allSettled(Object.values(variants).map((variant) => variant.settle()));
    monitor.destroy();
  }
  const list = (counts: Record<string, number>) =>
    Object.entries(counts)
      .map(([name, n]) => `${name} ${n.toFixed(2)}`)
      .join(', ') || '-';
  const keyed = rows.filter((row) => row.variant !== 'baseline');
  return {
    title: 'Redis round trips per decision',
    how: `${calls} calls per decision through a stdio server with --store redis, counted on the Redis side with MONITOR.`,
    table: table(
      'decision | round trips | target | sent by the guard | run inside scripts | tool (not counted)',
      rows.map((row) => [
        ...[VARIANT_LABEL[row.variant] ?? '', row.perCall.toFixed(2)],
        row.variant === 'baseline' ? '' : `≤ ${row.target} ${yesNo(row.met)}`,
        ...[list(row.sent), list(row.inScripts), list(row.tool)],
      ]),
    ),
    checks: keyed.map((row) => ({
      target: `Redis store, ${VARIANT_LABEL[row.variant]}: ≤ ${row.target} round trip${row.target === 1 ? '' : 's'}`,
      figure: row.perCall.toFixed(2),
      met: row.met,
    })),
    figures: rows,
  };
}
