// --- Where the demo server keeps its records and its balance ---
//
// The idempotency store and the ledger a charge mutates, opened from the command line's choice:
// memory, a SQLite file, Redis (or a Redis Cluster), Postgres, or a payment provider over HTTP. A
// store that does not answer at start-up is one line for the operator: where, why, and what to do.
// Each backend's client (pg, the Redis client, better-sqlite3) loads only when it is chosen: a
// server on the memory store reads none of them.

import {
  type IdempotencyStore,
  MemoryIdempotencyStore,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { type Ledger, MemoryLedger } from '../../ledger.js';
import { messageOf, type ServerConfig } from './cli.js';
import { ProviderLedger } from './ledgers/provider.js';
import { log } from './log.js';

export interface Backends {
  store: IdempotencyStore;
  ledger: Ledger;
  close(): Promise<void>;
}

/**
 * The dedup store and the ledger: both in this process, or both shared in a SQLite file, in Redis
 * or in Postgres (or the ledger in this process, whatever the store); or the ledger is a payment
 * provider over HTTP, which every instance shares by itself.
 */
export async function openBackends(config: ServerConfig): Promise<Backends> {
  return openStoreAndLedger(config).catch((error: unknown) => {
    // A store that refuses its backend says why in one line of its own: the setting and the fix.
    const refused = ['RedisEnvironmentError', 'PostgresEnvironmentError'];
    if (error instanceof Error && refused.includes(error.name)) throw new Error(error.message);
    throw new Error(unreachableStore(config, error));
  });
}

async function openStoreAndLedger(config: ServerConfig): Promise<Backends> {
  const provider =
    config.providerUrl &&
    new ProviderLedger(config.providerUrl, {
      sendKeys: config.providerKeys === 'derived',
      timeoutMs: config.providerTimeoutMs,
      keyRetentionMs: config.providerKeyRetentionMs,
      onRetry: (retry) => log({ time: new Date().toISOString(), event: 'provider', retry: true, ...retry }),
    });
  const inProcess = config.ledger === 'memory' ? new MemoryLedger(config.chargeLatencyMs) : undefined;
  if (config.store === 'memory') {
    return {
      store: new MemoryIdempotencyStore({
        maxRecords: config.maxRecords,
        maxRecordsPerScope: config.maxRecordsPerCaller,
        maxBytesPerScope: config.maxBytesPerCaller,
      }),
      ledger: provider ?? new MemoryLedger(config.chargeLatencyMs),
      close: async () => {},
    };
  }
  if (config.store === 'sqlite') {
    const [{ SqliteIdempotencyStore }, { SqliteLedger }] = await Promise.all([
      import('mcp-request-idempotency/sqlite'),
      import('./ledgers/sqlite.js'),
    ]);
    const store = await SqliteIdempotencyStore.open(config.sqlitePath ?? '', {
      synchronous: config.sqliteSynchronous,
      maxRecordsPerScope: config.maxRecordsPerCaller,
      maxBytesPerScope: config.maxBytesPerCaller,
    });
    try {
      return {
        store,
        ledger: provider ?? inProcess ?? (await SqliteLedger.open(store, config.chargeLatencyMs)),
        close: () => store.close(),
      };
    } catch (error) {
      await store.close();
      throw error;
    }
  }
  if (config.store === 'postgres') {
    const [{ PostgresIdempotencyStore }, { PostgresLedger }] = await Promise.all([
      import('mcp-request-idempotency/postgres'),
      import('./ledgers/postgres.js'),
    ]);
    const store = await PostgresIdempotencyStore.connect(config.postgresUrl ?? '', {
      tablePrefix: `${config.postgresPrefix}idem_`,
      maxRecordsPerScope: config.maxRecordsPerCaller,
      maxBytesPerScope: config.maxBytesPerCaller,
      onError: (error) => log({ event: 'postgres', error: String(error) }),
    });
    return {
      store,
      ledger:
        provider ??
        inProcess ??
        (await PostgresLedger.open(store.pool, `${config.postgresPrefix}ledger_`, config.chargeLatencyMs)),
      close: () => store.close(),
    };
  }
  const [{ closeRedis, connectRedis, connectRedisCluster, RedisIdempotencyStore }, { RedisLedger }] =
    await Promise.all([import('mcp-request-idempotency/redis'), import('./ledgers/redis.js')]);
  // Until connected, each failed attempt is the same error: the start-up failure names the
  // first, once, rather than the log repeating it for every retry.
  let connecting = true;
  let firstError: unknown;
  const onError = (error: unknown) => {
    if (!connecting) log({ event: 'redis', error: String(error) });
    else firstError ??= error;
  };
  const client = await (config.redisCluster
    ? connectRedisCluster(config.redisCluster, { onError })
    : connectRedis(config.redisUrl, { onError })
  ).catch((error: unknown) => {
    throw firstError ?? error;
  });
  connecting = false;
  const store = new RedisIdempotencyStore(client, {
    keyPrefix: `${config.redisPrefix}idem:`,
    maxRecordsPerScope: config.maxRecordsPerCaller,
    maxBytesPerScope: config.maxBytesPerCaller,
  });
  // Refuses to start on a Redis it cannot be safe on (one that evicts), as `connect` does.
  await store.ready().catch(async (error: unknown) => {
    await store.close();
    await closeRedis(client);
    throw error;
  });
  return {
    store,
    ledger:
      provider ??
      inProcess ??
      new RedisLedger(client, config.chargeLatencyMs, `${config.redisPrefix}ledger:balance`),
    close: async () => {
      await store.close();
      await closeRedis(client);
    },
  };
}

/** What an operator reads when the store does not answer at start-up: where, why, and what to do. */
function unreachableStore(config: ServerConfig, error: unknown): string {
  // The store's own wrapper says only "unavailable"; its cause says why.
  const why = error instanceof StoreUnavailableError && error.cause !== undefined ? error.cause : error;
  // A file has no server to start: the store's message names the file, what is wrong, what to do.
  if (config.store === 'sqlite') return `${messageOf(why)} (--sqlite-path)`;
  const [store, where, flag] =
    config.store === 'postgres'
      ? ['Postgres', withoutPassword(config.postgresUrl ?? ''), '--postgres-url']
      : config.redisCluster
        ? ['the Redis Cluster', config.redisCluster.map(withoutPassword).join(','), '--redis-cluster']
        : ['Redis', withoutPassword(config.redisUrl), '--redis-url'];
  return `cannot reach ${store} at ${where} (${messageOf(why)}): start it, or give ${flag} of one that runs`;
}

function withoutPassword(raw: string): string {
  const url = new URL(raw);
  if (url.password) url.password = '***';
  return url.href;
}
