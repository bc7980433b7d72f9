// --- The Redis the benchmark uses, and a way to count what is sent to it ---
//
// REDIS_URL if set (a shared server: the benchmark touches only keys under its own unique
// prefix, and deletes them at the end); otherwise a private redis-server on a free port,
// started and stopped here; otherwise the Redis rows say "skipped".

import { randomUUID } from 'node:crypto';
import { createClient, type RedisClientType } from '@redis/client';
import { startRedis } from '../test/support/redis.js';
import type { RedisTarget } from './endpoints.js';

export interface BenchRedis {
  target: RedisTarget;
  /** Where it came from, for the report. */
  source: string;
  admin: RedisClientType;
  close(): Promise<void>;
}

export type RedisOrSkip = { ok: true; redis: BenchRedis } | { ok: false; reason: string };

export async function openRedis(): Promise<RedisOrSkip> {
  const prefix = `sep3182-bench:${process.pid}-${randomUUID().slice(0, 8)}:`;
  const shared = process.env.REDIS_URL;
  if (shared) {
    const admin: RedisClientType = createClient({
      url: shared,
      socket: { connectTimeout: 2_000, reconnectStrategy: false },
    });
    admin.on('error', () => {});
    try {
      await admin.connect();
    } catch (error) {
      admin.destroy();
      return { ok: false, reason: `skipped: REDIS_URL (${shared}) did not answer: ${String(error)}` };
    }
    return {
      ok: true,
      redis: {
        target: { url: shared, prefix },
        source: 'REDIS_URL',
        admin,
        close: async () => {
          try {
            await deleteKeys(admin, prefix);
          } finally {
            admin.destroy();
          }
        },
      },
    };
  }
  const started = await startRedis();
  if (!started) return { ok: false, reason: 'skipped: no Redis (set REDIS_URL or install redis-server)' };
  return {
    ok: true,
    redis: {
      target: { url: started.url, prefix },
      source: 'private redis-server',
      admin: started.admin,
      close: () => started.stop(),
    },
  };
}

/** The server's version, for the report. */
export async function redisVersion(admin: RedisClientType): Promise<string> {
  const info = await admin.info('server');
  return /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
}

async function deleteKeys(admin: RedisClientType, prefix: string): Promise<void> {
  for await (const keys of admin.scanIterator({
    MATCH: `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`,
    COUNT: 1000,
  })) {
    if (keys.length > 0) await admin.unlink(keys);
  }
}

// --- Counting commands with MONITOR ---
//
// Round trips are counted on the Redis side, not inferred from the code: MONITOR shows every
// command a client sends, and, marked `[0 lua]`, every command a script runs inside Redis
// (those cost no round trip). Only lines naming one server's key prefix are counted, so other
// traffic on a shared Redis does not leak in. Markers (a GET of a unique key, sent by the
// admin client and awaited on the monitor stream) bound each measured window exactly.

export interface SeenCommand {
  /** The command's name, upper case (SET, EVAL, GET, INCRBY…). */
  name: string;
  /** Run inside a script (EVAL) rather than sent by a client: no round trip of its own. */
  inScript: boolean;
  /** The MONITOR line, which names the keys. */
  line: string;
}

export class CommandMonitor {
  private lines: string[] = [];
  private waiting = new Map<string, () => void>();

  private constructor(
    private readonly monitor: RedisClientType,
    private readonly admin: RedisClientType,
    private readonly markerPrefix: string,
  ) {}

  static async start(url: string, admin: RedisClientType, markerPrefix: string): Promise<CommandMonitor> {
    const client: RedisClientType = createClient({ url });
    client.on('error', () => {});
    await client.connect();
    const monitor = new CommandMonitor(client, admin, markerPrefix);
    await client.monitor((line: string) => monitor.onLine(line));
    return monitor;
  }

  /** Runs `work` between two markers; returns the commands in between that mention `keyPrefix`. */
  async during(keyPrefix: string, work: () => Promise<void>): Promise<SeenCommand[]> {
    await this.mark();
    this.lines = [];
    await work();
    await this.mark();
    return this.lines
      .filter((line) => line.includes(keyPrefix))
      .map((line) => ({
        name: /"([A-Za-z]+)"/.exec(line)?.[1]?.toUpperCase() ?? '?',
        inScript: / \[\d+ lua\] /.test(line),
        line,
      }));
  }

  stop(): void {
    this.monitor.destroy();
  }

  private onLine(line: string): void {
    for (const [marker, resolve] of this.waiting) {
      if (line.includes(marker)) {
        this.waiting.delete(marker);
        resolve();
        return;
      }
    }
    this.lines.push(line);
  }

  private async mark(): Promise<void> {
    const marker = `${this.markerPrefix}marker:${randomUUID()}`;
    const seen = new Promise<void>((resolve) => this.waiting.set(marker, resolve));
    await this.admin.get(marker);
    await withTimeout(seen, 5_000, 'the MONITOR stream did not show the marker');
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${message} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
