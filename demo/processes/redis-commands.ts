// --- Round trips, as Redis receives them ---

import { randomUUID } from 'node:crypto';
import type { RedisClientType } from '@redis/client';
import { waitUntil } from './bounds.js';

export interface SeenCommands<T> {
  /** The commands clients sent (names, upper case), every node's together. */
  commands: string[];
  /** The same, node by node, in the order the admin connections were given. */
  perNode: string[][];
  value: T;
}

/**
 * The commands Redis received from clients, naming `keyText`, while `action` ran: one per round
 * trip, on each node of `admins` (one Redis, or every master of a cluster). MONITOR rather than
 * INFO commandstats, which also counts the commands a Lua script runs inside its single round
 * trip, and every other client of a shared server.
 */
export async function commandsDuring<T>(
  admins: readonly RedisClientType[],
  keyText: string,
  action: () => Promise<T>,
): Promise<SeenCommands<T>> {
  const monitors: Array<{ admin: RedisClientType; monitor: RedisClientType; lines: string[] }> = [];
  // A keyless command as the marker: any node runs it (a key of another node's slot is refused).
  const marker = `sep3182-marker:${randomUUID()}`;
  let value: T;
  try {
    for (const admin of admins) {
      const monitor = admin.duplicate();
      monitor.on('error', () => {});
      const lines: string[] = [];
      monitors.push({ admin, monitor, lines });
      await monitor.connect();
      // e.g. 1700000000.123456 [0 127.0.0.1:46672] "EVAL" "…" "3" "sep3182-test:…"; `[0 lua]` inside a script
      await monitor.monitor((line) => lines.push(line));
    }
    value = await action();
    // MONITOR streams behind the commands; once a later marker shows, all of the action's have.
    for (const { admin, lines } of monitors) {
      await admin.echo(marker);
      await waitUntil(async () => lines.some((line) => line.includes(marker)));
    }
  } finally {
    for (const { monitor } of monitors) monitor.destroy();
  }
  const perNode = monitors.map(({ lines }) =>
    lines.flatMap((line) => {
      const [, source, command] = /^\S+ \[\d+ ([^\]]+)\] "([^"]+)"/.exec(line) ?? [];
      return source !== 'lua' && command && line.includes(keyText) && !line.includes(marker)
        ? [command.toUpperCase()]
        : [];
    }),
  );
  return { commands: perNode.flat(), perNode, value };
}
