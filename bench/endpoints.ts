// --- What the benchmark talks to: one client per server, per transport and store ---
//
// Every (transport, store) pair gets two servers: a fast one (an instant provider) for the
// baseline, first execution, replay and conflict, and a slow one whose charge takes
// SLOW_CHARGE_MS, so an original can be held in flight while its duplicates are answered
// "in progress". The two run the same code; only the provider's latency differs, and the
// in-progress path never reaches the provider.

import type { Client } from '@modelcontextprotocol/client';
import { DEFAULT_MAX_BYTES, DEFAULT_MAX_RECORDS, MemoryIdempotencyStore } from '../idempotency/index.js';
import { closeRedis, connectRedis, RedisIdempotencyStore } from '../idempotency/redis-store.js';
import { connectHttpClient, connectToServer, type HttpInstance, startHttpInstance } from '../launch.js';
import { MemoryLedger, RedisLedger } from '../ledger.js';
import { connectInProcess } from '../test/support/in-process.js';

/**
 * The benchmark is one caller standing for all of them, so its quota is the whole store's cap:
 * the quota is still counted on every claim, but never refuses one.
 */
export const ONE_CALLER_QUOTA = {
  maxRecordsPerScope: DEFAULT_MAX_RECORDS,
  maxBytesPerScope: DEFAULT_MAX_BYTES,
};
const ONE_CALLER_ARGS = [
  ...['--max-records-per-caller', String(ONE_CALLER_QUOTA.maxRecordsPerScope)],
  ...['--max-bytes-per-caller', String(ONE_CALLER_QUOTA.maxBytesPerScope)],
];

export type TransportName = 'in-process' | 'stdio' | 'http';
export type StoreName = 'memory' | 'redis';

export const TRANSPORTS: readonly TransportName[] = ['in-process', 'stdio', 'http'];
export const STORES: readonly StoreName[] = ['memory', 'redis'];

/**
 * How long the slow server's provider takes. It must outlast one batch of in-progress calls
 * (checked after every batch), and every original must finish before the run ends.
 */
export const SLOW_CHARGE_MS = 2_000;

export interface Endpoint {
  /** The client the benchmark calls through (`refresh` may replace it). */
  client: Client;
  /** Replaces `client` with a new one, between rounds; the old one is closed with the endpoint. */
  refresh?: () => Promise<void>;
  /**
   * Another client of the same server (same store, same ledger), for the concurrency rows.
   * Stdio has none: one process serves one client.
   */
  connectAnother?: () => Promise<{ client: Client; close(): Promise<void> }>;
  /** Drops whatever log lines or decision events the server has collected so far (memory stays flat). */
  forgetLogs(): void;
  close(): Promise<void>;
}

export interface EndpointPair {
  transport: TransportName;
  store: StoreName;
  fast: Endpoint;
  slow: Endpoint;
  close(): Promise<void>;
}

export interface RedisTarget {
  url: string;
  /** Unique to this run; every key the benchmark's servers write starts with it. */
  prefix: string;
}

/** The Redis key prefix (`--redis-prefix`) of one benchmark server. */
export function serverPrefix(redis: RedisTarget, transport: TransportName, speed: 'fast' | 'slow'): string {
  return `${redis.prefix}${transport}:${speed}:`;
}

export async function openPair(
  transport: TransportName,
  store: StoreName,
  redis: RedisTarget | undefined,
): Promise<EndpointPair> {
  if (store === 'redis' && !redis) throw new Error('no Redis to benchmark');
  const open = async (speed: 'fast' | 'slow'): Promise<Endpoint> => {
    const latencyMs = speed === 'slow' ? SLOW_CHARGE_MS : 0;
    // Each server its own prefix: the round-trip count tells their commands apart by it.
    const own =
      store === 'redis' && redis
        ? { url: redis.url, prefix: serverPrefix(redis, transport, speed) }
        : undefined;
    const args = [
      ...ONE_CALLER_ARGS,
      '--charge-latency-ms',
      String(latencyMs),
      ...(own ? ['--store', 'redis', '--redis-url', own.url, '--redis-prefix', own.prefix] : []),
    ];
    switch (transport) {
      case 'in-process':
        return openInProcess(latencyMs, own);
      case 'stdio': {
        const server = await connectToServer(args);
        return {
          client: server.client,
          forgetLogs: () => void server.stderrLines.splice(0),
          close: () => server.close(),
        };
      }
      case 'http': {
        const instance = await startHttpInstance(args);
        try {
          return await httpEndpoint(instance);
        } catch (error) {
          await instance.stop();
          throw error;
        }
      }
    }
  };
  const fast = await open('fast');
  let slow: Endpoint;
  try {
    slow = await open('slow');
  } catch (error) {
    await fast.close();
    throw error;
  }
  return {
    transport,
    store,
    fast,
    slow,
    close: async () => {
      await Promise.allSettled([fast.close(), slow.close()]);
    },
  };
}

/**
 * An HTTP server's endpoint. The SDK's HTTP client passes one AbortSignal to every fetch,
 * and undici leaves an abort listener on it per request until the request is collected:
 * over thousands of calls every call gets slower (and Node warns of a leak past 1,500). A
 * fresh client each round keeps that count, and its cost, as low as a real client's.
 */
async function httpEndpoint(instance: HttpInstance): Promise<Endpoint> {
  const retired: Client[] = [];
  const endpoint: Endpoint = {
    client: await connectHttpClient(instance.url),
    refresh: async () => {
      // Not closed yet: a slow original may still be waiting on the old client.
      retired.push(endpoint.client);
      endpoint.client = await connectHttpClient(instance.url);
    },
    connectAnother: async () => {
      const another = await connectHttpClient(instance.url);
      return { client: another, close: () => another.close() };
    },
    forgetLogs: () => void instance.stderrLines.splice(0),
    close: async () => {
      await Promise.allSettled([endpoint.client, ...retired].map((client) => client.close()));
      await instance.stop();
    },
  };
  return endpoint;
}

/** The real McpServer and guard, joined to an SDK client by the SDK's in-memory transport. */
async function openInProcess(latencyMs: number, redis: RedisTarget | undefined): Promise<Endpoint> {
  if (!redis) {
    const connection = await connectInProcess({
      store: new MemoryIdempotencyStore(ONE_CALLER_QUOTA),
      ledger: new MemoryLedger(latencyMs),
    });
    return {
      client: connection.client,
      forgetLogs: () => void connection.decisions.splice(0),
      close: () => connection.close(),
    };
  }
  // As server.ts does with --store redis: one connection shared by the store and the ledger.
  const redisClient = await connectRedis(redis.url);
  try {
    const connection = await connectInProcess({
      store: new RedisIdempotencyStore(redisClient, {
        keyPrefix: `${redis.prefix}idem:`,
        ...ONE_CALLER_QUOTA,
      }),
      ledger: new RedisLedger(redisClient, latencyMs, `${redis.prefix}ledger:balance`),
    });
    return {
      client: connection.client,
      forgetLogs: () => void connection.decisions.splice(0),
      close: async () => {
        await connection.close();
        await closeRedis(redisClient);
      },
    };
  } catch (error) {
    await closeRedis(redisClient);
    throw error;
  }
}
