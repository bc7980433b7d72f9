// --- Redis round trips per decision, counted on the Redis side ---
//
// For each decision, N calls through a real server process with `--store redis`, counted with
// MONITOR (see redis.ts): every command the server's client sends under the guard's key
// prefix is one round trip. Commands a script runs inside Redis are shown apart (no round
// trip of their own), and so is the ledger's INCRBY: the tool's work, not the guard's.

import { type EndpointPair, type RedisTarget, serverPrefix } from './endpoints.js';
import type { CommandMonitor, SeenCommand } from './redis.js';
import { makeVariants, settleCall, type VariantName } from './variants.js';

/** The targets: round trips the guard may spend per decision. */
export const ROUND_TRIP_TARGETS: Record<VariantName, number> = {
  baseline: 0,
  first: 2,
  replay: 1,
  conflict: 1,
  inProgress: 1,
};

export interface RoundTripRow {
  variant: VariantName;
  calls: number;
  /** The guard's round trips per call (commands sent under its `idem:` keys). */
  perCall: number;
  /** The same, by command. */
  byCommand: Record<string, number>;
  /** Commands run inside scripts, per call (no round trips). */
  inScripts: Record<string, number>;
  /** The tool's own round trips per call (the ledger's INCRBY), not the guard's. */
  tool: Record<string, number>;
  target: number;
  met: boolean;
}

export async function countRoundTrips(
  pair: EndpointPair,
  redis: RedisTarget,
  monitor: CommandMonitor,
  calls: number,
): Promise<RoundTripRow[]> {
  const variants = makeVariants(pair.fast, pair.slow, `round trips over ${pair.transport}`);
  const rows: RoundTripRow[] = [];
  try {
    for (const variant of variants) {
      const speed = variant.name === 'inProgress' ? 'slow' : 'fast';
      const prefix = serverPrefix(redis, pair.transport, speed);
      await variant.prepare(calls);
      const seen = await monitor.during(prefix, async () => {
        for (let i = 0; i < calls; i++) variant.check(await settleCall(() => variant.call(i)));
      });
      await variant.finish();
      const guard = seen.filter((command) => command.line.includes(`${prefix}idem:`));
      const tool = seen.filter((command) => command.line.includes(`${prefix}ledger:`));
      const byCommand = perCall(
        guard.filter((command) => !command.inScript),
        calls,
      );
      const total = Object.values(byCommand).reduce((sum, n) => sum + n, 0);
      const target = ROUND_TRIP_TARGETS[variant.name];
      rows.push({
        variant: variant.name,
        calls,
        perCall: total,
        byCommand,
        inScripts: perCall(
          guard.filter((command) => command.inScript),
          calls,
        ),
        tool: perCall(
          tool.filter((command) => !command.inScript),
          calls,
        ),
        target,
        met: total <= target,
      });
    }
  } finally {
    await Promise.allSettled(variants.map((variant) => variant.settle()));
  }
  return rows;
}

function perCall(commands: SeenCommand[], calls: number): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const command of commands) counts[command.name] = (counts[command.name] ?? 0) + 1;
  for (const name of Object.keys(counts)) counts[name] = (counts[name] ?? 0) / calls;
  return counts;
}
