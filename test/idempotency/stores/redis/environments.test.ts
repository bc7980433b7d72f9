// The Redis store in each environment it may meet, each a private `redis-server` (or a three-master
// cluster) this file starts: Redis that evicts, Redis that will not say how it evicts, Redis whose
// eviction policy changes while the store runs, and Redis that loses its data between a claim and
// its record (FLUSHALL, FLUSHDB on one master of a cluster, a restart without persistence). Every
// cell counts the executions of one keyed charge, called through the real guard from two server
// instances (each its own store and connection), and either executes it once or is refused at
// start with the line that names the setting and the fix.

import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/client';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { RedisIdempotencyStore, type RedisStoreOptions, redisKeysOf } from 'mcp-request-idempotency/redis';
import { afterEach, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, sleep, waitUntil } from '../../../../demo/processes/bounds.js';
import {
  REDIS_CLUSTER_SKIP_REASON,
  startRedisCluster,
  type TestRedisCluster,
} from '../../../../demo/processes/redis-cluster.js';
import { REDIS_SKIP_REASON, startRedis, type TestRedis } from '../../../../demo/processes/redis-server.js';
import type { Ledger } from '../../../../ledger.js';
import { connectInProcess, type InProcessConnection } from '../../../support/in-process.js';

const ROOT = join(import.meta.dirname, '..', '..', '..', '..');

const hasRedis = await startRedis().then(async (redis) => {
  await redis?.stop();
  return redis?.owned === true;
});
if (!hasRedis) console.warn(`${REDIS_SKIP_REASON} (these need a private redis-server)`);

/** The lease of the instances' guards: short, so "one lease" passes within a test. */
const LEASE_MS = 1_500;
/** How often a store re-reads the facts its safety rests on (the eviction policy), in these tests. */
const CHECK_MS = 100;
/** Each cell's Redis: small, so unrelated writes reach its bound within a second. */
const MAXMEMORY = '4mb';
const KEY_PREFIX = 'env:idem:';
/** The scope every call is made in (an HTTP principal would be one), so a test can name its keys. */
const SCOPE = 'principal:alice';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

async function redisWith(args: string[]): Promise<TestRedis> {
  const redis = await startRedis({ args });
  if (!redis) throw new Error('unreachable: skipped without redis-server');
  cleanups.push(() => redis.stop());
  return redis;
}

// --- The side effect, counted ---

/** A provider that takes no key: every execution of the charge is a charge. Can hold one open. */
class CountingLedger implements Ledger {
  executions = 0;
  private gate: Promise<void> | undefined;
  private open: (() => void) | undefined;

  /** The next charge waits, once it has counted, until `release`. */
  holdNext(): void {
    this.gate = new Promise((resolve) => {
      this.open = resolve;
    });
  }

  release(): void {
    this.open?.();
  }

  async charge(amount: number): Promise<number> {
    this.executions++;
    const gate = this.gate;
    this.gate = undefined;
    await gate;
    return amount * this.executions;
  }

  refund(): Promise<number> {
    return Promise.reject(new Error('no refunds here'));
  }

  async balance(): Promise<number> {
    return this.executions * 100;
  }

  async reset(): Promise<void> {}
}

type Answer = 'charged' | IdempotencyErrorType | 'other error';

interface Instance {
  connection: InProcessConnection;
  store: RedisIdempotencyStore;
  /** The stores' refusals the guard logged, each a line. */
  refusals(): string[];
}

/** A server instance on its own store: the guard, the demo's tools, the shared ledger. */
async function instance(store: RedisIdempotencyStore, ledger: Ledger): Promise<Instance> {
  const connection = await connectInProcess({ store, ledger, scope: SCOPE, leaseMs: LEASE_MS });
  cleanups.push(() => connection.close());
  return {
    connection,
    store,
    refusals: () =>
      connection.decisions.flatMap((d) =>
        d.decision === 'storeUnavailable' && d.message ? [d.message] : [],
      ),
  };
}

async function charge(client: Client, idempotencyKey: string): Promise<Answer> {
  try {
    await callTool(client, { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey });
    return 'charged';
  } catch (error) {
    return idempotencyErrorOf(error)?.type ?? 'other error';
  }
}

/** A store on its own connection, or the line it refused to start with. */
async function openStore(
  connect: () => Promise<RedisIdempotencyStore>,
): Promise<RedisIdempotencyStore | { refused: string }> {
  try {
    const store = await connect();
    cleanups.push(() => store.close());
    return store;
  } catch (error) {
    return { refused: error instanceof Error ? error.message : String(error) };
  }
}

const storeOptions = (more: RedisStoreOptions = {}) =>
  ({ keyPrefix: KEY_PREFIX, environmentCheckMs: CHECK_MS, ...more }) as RedisStoreOptions;

/** What a cell ends in: the store refused to start, or the charge executed this many times. */
type Outcome = { refused: string } | { executions: number };

// --- Eviction: records in a Redis that is full ---

/** Writes unrelated cache entries (each with a TTL, as caches write them) until `done`, Redis refuses one, or 16 MB. */
async function fillWithCache(
  redis: TestRedis,
  done: () => Promise<boolean>,
): Promise<'done' | 'refused' | 'bound'> {
  const value = 'x'.repeat(1024);
  for (let batch = 0; batch < 160; batch++) {
    try {
      await Promise.all(
        Array.from({ length: 100 }, (_, i) => redis.admin.set(`cache:${batch}:${i}`, value, { EX: 3600 })),
      );
    } catch (error) {
      if (String(error).includes('OOM')) return 'refused';
      throw error;
    }
    if (await done()) return 'done';
  }
  return 'bound';
}

/**
 * What a retry may get from a Redis that refused the cache's last write as full: its claim refused
 * as `full`, or, where Redis freed a little memory in between (a client's buffers), the stored
 * answer replayed. Never an execution: that is what the tests count.
 */
const FULL_REDIS_ANSWERS: Answer[] = [IdempotencyErrorType.storeFull, 'charged'];

/** True once no record of the store is left in Redis (its marker aside). */
async function recordsGone(redis: TestRedis): Promise<boolean> {
  const [record] = redisKeysOf(KEY_PREFIX, { scope: SCOPE, idempotencyKey: 'x' });
  const recordsOf = record.slice(0, record.indexOf('['));
  return (await redis.admin.keys(`${recordsOf.replace(/[*?[\]\\]/g, '\\$&')}[[]*`)).length === 0;
}

/**
 * One keyed charge executed through instance A, then unrelated cache writes until Redis is full,
 * then the retry through instance B; `between` runs after the charge (a `CONFIG SET`, say).
 */
async function chargeThenFill(
  redis: TestRedis,
  options: RedisStoreOptions = {},
  between: () => Promise<void> = async () => {},
): Promise<Outcome & { retry?: Answer; refusals?: string[]; filled?: string }> {
  const first = await openStore(() => RedisIdempotencyStore.connect(redis.url, storeOptions(options)));
  if ('refused' in first) return first;
  const second = await openStore(() => RedisIdempotencyStore.connect(redis.url, storeOptions(options)));
  if ('refused' in second) return second;
  const ledger = new CountingLedger();
  const [a, b] = [await instance(first, ledger), await instance(second, ledger)];
  const key = randomUUID();
  expect(await charge(a.connection.client, key)).toBe('charged');
  await between();
  const filled = await fillWithCache(redis, () => recordsGone(redis));
  const retry = await charge(b.connection.client, key);
  return { executions: ledger.executions, retry, refusals: b.refusals(), filled };
}

describe.skipIf(!hasRedis)(
  'Redis that evicts: the store refuses it at start, naming maxmemory-policy',
  () => {
    it('noeviction (the default): Redis refuses writes when full, the record stays, the charge executes once', async () => {
      const redis = await redisWith(['--maxmemory', MAXMEMORY, '--maxmemory-policy', 'noeviction']);
      const outcome = await chargeThenFill(redis);
      expect(outcome).toMatchObject({ executions: 1, filled: 'refused' });
      expect(FULL_REDIS_ANSWERS).toContain(outcome.retry);
      const keys = await redis.admin.keys('cache:*');
      for (let i = 0; i < keys.length; i += 1000) await redis.admin.unlink(keys.slice(i, i + 1000));
    });

    for (const policy of ['allkeys-lru', 'volatile-lru', 'allkeys-lfu', 'volatile-ttl', 'allkeys-random']) {
      it(`${policy}: refused at start (unrelated writes would evict a completed record, and its retry execute again)`, async () => {
        const redis = await redisWith(['--maxmemory', MAXMEMORY, '--maxmemory-policy', policy]);
        const outcome = await chargeThenFill(redis);
        expect(outcome).toStrictEqual({ refused: evictionRefusal(redis, policy) });
      });
    }

    it('maxmemory 0 with allkeys-lru: no bound, so nothing is ever evicted; runs, and executes once', async () => {
      const redis = await redisWith(['--maxmemory', '0', '--maxmemory-policy', 'allkeys-lru']);
      const outcome = await chargeThenFill(redis);
      // 16 MB of cache written (4 times 4mb), not one key evicted: Redis evicts only past a maxmemory it has.
      expect(outcome).toMatchObject({ executions: 1, filled: 'bound', retry: 'charged' });
      expect(await redis.admin.info('stats')).toContain('evicted_keys:0');
    });
  },
);

/** The line a store refuses an evicting Redis with. */
function evictionRefusal(redis: TestRedis, policy: string, maxmemory = 4 * 1024 * 1024): string {
  return (
    `Redis at ${new URL(redis.url).host} may evict this store's records: maxmemory-policy is ${policy} ` +
    `with maxmemory ${maxmemory}, so a retry whose record was evicted would execute again; ` +
    'set maxmemory-policy noeviction (or maxmemory 0)'
  );
}

describe.skipIf(!hasRedis)('the demo server on a Redis that evicts', () => {
  it('refuses to start, on one line that names the setting and the fix', async () => {
    const redis = await redisWith(['--maxmemory', MAXMEMORY, '--maxmemory-policy', 'volatile-lru']);
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const argv = ['--import', 'tsx', join(ROOT, 'server.ts'), '--store', 'redis', '--redis-url', redis.url];
      execFile(process.execPath, argv, { cwd: ROOT, timeout: START_TIMEOUT_MS }, (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
      );
    });
    expect(run).toStrictEqual({
      code: 1,
      stdout: '',
      stderr: `server.ts: ${evictionRefusal(redis, 'volatile-lru')}\n`,
    });
  });
});

describe.skipIf(!hasRedis)('Redis that will not say how it evicts', () => {
  it('CONFIG renamed away (as managed services do): the store reads the policy from INFO, and refuses allkeys-lru', async () => {
    const redis = await redisWith([
      ...['--maxmemory', MAXMEMORY, '--maxmemory-policy', 'allkeys-lru'],
      ...['--rename-command', 'CONFIG', ''],
    ]);
    expect(await chargeThenFill(redis)).toStrictEqual({ refused: evictionRefusal(redis, 'allkeys-lru') });
  });

  it('CONFIG renamed away, noeviction: read from INFO, runs, and executes once', async () => {
    const redis = await redisWith([
      ...['--maxmemory', MAXMEMORY, '--maxmemory-policy', 'noeviction'],
      ...['--rename-command', 'CONFIG', ''],
    ]);
    const outcome = await chargeThenFill(redis);
    expect(outcome).toMatchObject({ executions: 1 });
    expect(FULL_REDIS_ANSWERS).toContain(outcome.retry);
  });

  it('INFO and CONFIG both refused: refused at start unless the policy is stated; stated, it runs and executes once', async () => {
    const redis = await redisWith([
      ...['--maxmemory', MAXMEMORY, '--maxmemory-policy', 'noeviction'],
      ...['--rename-command', 'CONFIG', '', '--rename-command', 'INFO', ''],
    ]);
    const refused = await openStore(() => RedisIdempotencyStore.connect(redis.url, storeOptions()));
    expect(refused).toStrictEqual({
      refused:
        `cannot read maxmemory-policy from Redis at ${new URL(redis.url).host} (INFO and CONFIG GET are refused), ` +
        "so cannot tell whether it evicts this store's records; set maxmemory-policy noeviction and state it " +
        "with the store option maxmemoryPolicy: 'noeviction', or let this user run INFO",
    });
    const stated = { maxmemoryPolicy: 'noeviction' } as RedisStoreOptions;
    const outcome = await chargeThenFill(redis, stated);
    expect(outcome).toMatchObject({ executions: 1 });
    expect(FULL_REDIS_ANSWERS).toContain(outcome.retry);
  });
});

describe.skipIf(!hasRedis)('an eviction policy changed while the store runs', () => {
  it('CONFIG SET maxmemory-policy allkeys-lru: new calls fail closed within the check, naming the setting; executes once', async () => {
    const redis = await redisWith(['--maxmemory', MAXMEMORY, '--maxmemory-policy', 'noeviction']);
    const outcome = await chargeThenFill(redis, {}, async () => {
      await redis.admin.configSet('maxmemory-policy', 'allkeys-lru');
      await sleep(5 * CHECK_MS);
    });
    expect(outcome).toMatchObject({ executions: 1, retry: IdempotencyErrorType.storeUnavailable });
    expect(outcome.refusals).toStrictEqual([
      `StoreUnavailableError: idempotency store unavailable: ${evictionRefusal(redis, 'allkeys-lru')}`,
    ]);

    // Set back: the store serves again, by itself.
    await redis.admin.configSet('maxmemory-policy', 'noeviction');
    await redis.admin.flushAll();
    const store = await RedisIdempotencyStore.connect(redis.url, storeOptions());
    cleanups.push(() => store.close());
    await waitUntil(
      async () =>
        (await store.claim({ scope: SCOPE, idempotencyKey: randomUUID() }, 'f', LEASE_MS)).state ===
        'claimed',
    );
  });

  it('maxmemory 0 with allkeys-lru, then CONFIG SET maxmemory: new calls fail closed within the check; executes once', async () => {
    const redis = await redisWith(['--maxmemory', '0', '--maxmemory-policy', 'allkeys-lru']);
    const outcome = await chargeThenFill(redis, {}, async () => {
      await redis.admin.configSet('maxmemory', MAXMEMORY);
      await sleep(5 * CHECK_MS);
    });
    expect(outcome).toMatchObject({ executions: 1, retry: IdempotencyErrorType.storeUnavailable });
    expect(outcome.refusals).toStrictEqual([
      `StoreUnavailableError: idempotency store unavailable: ${evictionRefusal(redis, 'allkeys-lru')}`,
    ]);
  });
});

// --- Data that vanished between a claim and its record ---

/**
 * Instance A's charge is under way (held open) when `disaster` strikes; instance B retries the same
 * key every 100 ms for two leases while A still runs, then A finishes and B retries once more.
 */
async function disasterMidCharge(
  open: () => Promise<RedisIdempotencyStore>,
  disaster: () => Promise<void>,
): Promise<{ executions: number; whileRunning: Answer[]; after: Answer; refusals: string[] }> {
  const ledger = new CountingLedger();
  const [storeA, storeB] = [await open(), await open()];
  cleanups.push(
    () => storeA.close(),
    () => storeB.close(),
  );
  const [a, b] = [await instance(storeA, ledger), await instance(storeB, ledger)];
  const key = randomUUID();
  ledger.holdNext();
  const original = charge(a.connection.client, key);
  await waitUntil(async () => ledger.executions === 1, 5_000, 5);

  await disaster();

  const whileRunning: Answer[] = [];
  const until = performance.now() + 2 * LEASE_MS;
  while (performance.now() < until) {
    whileRunning.push(await charge(b.connection.client, key));
    await sleep(100);
  }
  ledger.release();
  expect(await original).toBe('charged');
  const after = await charge(b.connection.client, key);
  return { executions: ledger.executions, whileRunning, after, refusals: b.refusals() };
}

describe.skipIf(!hasRedis)('Redis that loses its data while a call runs', () => {
  for (const [name, disaster] of [
    ['FLUSHALL', (redis: TestRedis) => redis.admin.flushAll().then(() => {})],
    ['FLUSHDB', (redis: TestRedis) => redis.admin.flushDb().then(() => {})],
    [
      'a restart without persistence',
      async (redis: TestRedis) => {
        await redis.kill();
        await redis.restart();
      },
    ],
  ] as const) {
    it(`${name} between the claim and the record: the retry elsewhere fails closed, then waits on the running call, which records; executes once`, async () => {
      const redis = await redisWith([]);
      const outcome = await disasterMidCharge(
        () => RedisIdempotencyStore.connect(redis.url, storeOptions()),
        () => disaster(redis),
      );
      expect(outcome).toMatchObject({ executions: 1 });
      // Never executed while the first ran: refused ("nothing ran, retry"), or in progress once
      // the running call's renewal held its key again.
      expect(outcome.whileRunning.filter((answer) => answer === 'charged')).toStrictEqual([]);
      expect(outcome.whileRunning[0]).toBe(IdempotencyErrorType.storeUnavailable);
      expect(outcome.whileRunning.at(-1)).toBe(IdempotencyErrorType.inProgress);
      // The running call recorded its answer into the emptied Redis: the retry replays it.
      expect(outcome.after).toBe('charged');
      // The loss is known (the marker re-armed as lost), and told by name to a claim that met it.
      // After a restart B may be offline until A's renewal has held the key again: then its
      // retries meet that claim, in progress, and never the loss itself.
      expect(await redis.admin.get(`${KEY_PREFIX}alive`)).toMatch(/\|\d+$/);
      if (name !== 'a restart without persistence') {
        expect(outcome.refusals).toContainEqual(expect.stringMatching(vanishedRefusal));
      }
    });
  }

  it('FLUSHALL while nothing runs: new keys are refused for one lease, then served; a store started after it is not fooled', async () => {
    const redis = await redisWith([]);
    const store = await RedisIdempotencyStore.connect(redis.url, storeOptions());
    cleanups.push(() => store.close());
    const id = () => ({ scope: SCOPE, idempotencyKey: randomUUID() });
    expect((await store.claim(id(), 'f', LEASE_MS)).state).toBe('claimed');
    await redis.admin.flushAll();
    const lost = performance.now();
    await expect(store.claim(id(), 'f', LEASE_MS)).rejects.toThrow(vanishedRefusal);
    // A store that starts now finds the data already known lost: it fails closed as well.
    const late = await RedisIdempotencyStore.connect(redis.url, storeOptions());
    cleanups.push(() => late.close());
    await expect(late.claim(id(), 'f', LEASE_MS)).rejects.toThrow(vanishedRefusal);
    await waitUntil(
      async () => (await store.claim(id(), 'f', LEASE_MS).catch(() => undefined)) !== undefined,
    );
    expect(performance.now() - lost).toBeGreaterThanOrEqual(LEASE_MS - 100);
    expect((await late.claim(id(), 'f', LEASE_MS)).state).toBe('claimed');
  });
});

/** The line a claim is refused with while the store's data is known lost. */
const vanishedRefusal =
  /Redis lost this store's records \(a restart without persistence, FLUSHALL\/FLUSHDB, a failover\) at .+Z: a call may still run on another instance, so new keys fail closed until .+Z \(one lease\); run Redis with persistence \(appendonly yes, appendfsync always\) and replicas acknowledging writes/;

// --- A Redis Cluster: every hash slot knows for itself ---

describe.skipIf(!hasRedis)('a Redis Cluster', () => {
  let cluster: TestRedisCluster | undefined;

  it('refuses a cluster with one master that evicts, naming that master', async () => {
    cluster = await startRedisCluster();
    if (!cluster) return console.warn(REDIS_CLUSTER_SKIP_REASON);
    cleanups.push(async () => {
      await cluster?.stop();
      cluster = undefined;
    });
    const [, evicting] = cluster.nodes;
    if (!evicting) throw new Error('unreachable');
    await evicting.admin.configSet({ maxmemory: '100mb', 'maxmemory-policy': 'volatile-lru' });
    const urls = cluster.urls;
    expect(await openStore(() => RedisIdempotencyStore.connectCluster(urls, storeOptions()))).toStrictEqual({
      refused: evictionRefusal(evicting, 'volatile-lru', 100 * 1024 * 1024),
    });

    // FLUSHALL on the master of the caller's slot, between the claim and the record.
    await evicting.admin.configSet({ maxmemory: '0', 'maxmemory-policy': 'noeviction' });
    const master = await cluster.nodeOf(redisKeysOf(KEY_PREFIX, { scope: SCOPE, idempotencyKey: 'k' })[0]);
    const outcome = await disasterMidCharge(
      () => RedisIdempotencyStore.connectCluster(urls, storeOptions()),
      () => master.admin.flushAll().then(() => {}),
    );
    expect(outcome).toMatchObject({ executions: 1 });
    expect(outcome.whileRunning.filter((answer) => answer === 'charged')).toStrictEqual([]);
    expect(outcome.whileRunning[0]).toBe(IdempotencyErrorType.storeUnavailable);
    expect(outcome.after).toBe('charged');
    expect(outcome.refusals).toContainEqual(expect.stringMatching(vanishedRefusal));
  }, 60_000);
});
