// Model-based tests of the guard: random programs of calls, slow charges, concurrent sends,
// time passing and resets, run against the real guard and a small reference model of the
// SEP's rules (test/support/guard-model.ts). After every step: every answer is the model's
// (a replay equals the original answer; a conflict or in-progress answer never executes),
// nothing executes that the model did not allow, each (scope, key) at most once per
// retention window, and the provider's balance is the sum of the executions the model
// allowed. At the end no call is left unanswered.
//
// SEP3182_LONG=1 runs ten times as many programs.

import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { migratePostgresStore, PostgresIdempotencyStore } from 'mcp-request-idempotency/postgres';
import {
  closeRedis,
  connectRedis,
  type RedisClient,
  RedisIdempotencyStore,
} from 'mcp-request-idempotency/redis';
import { SqliteIdempotencyStore } from 'mcp-request-idempotency/sqlite';
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES_STATEMENT_TIMEOUT_MS } from '../../demo/processes/bounds.js';
import { uniqueTablePrefix } from '../../demo/processes/postgres-server.js';
import { uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import { postgresForFile, redisForFile } from '../support/backends.js';
import {
  CALLERS,
  CONNECTED_STORE_TIMING,
  type ModelSettings,
  programs,
  type RealSystem,
  runProgram,
  startRealSystem,
  storeOfEach,
  tally,
} from '../support/guard-model.js';
import { ManualClock } from '../support/in-process.js';
import { longRunScaled } from '../support/long-runs.js';

const MEMORY_RUNS = longRunScaled(200);
const REDIS_RUNS = longRunScaled(25);
const POSTGRES_RUNS = longRunScaled(25);
const SQLITE_RUNS = longRunScaled(50);
const MAX_COMMANDS = 30;

/** Counted so the report can say how many programs and steps ran. */
const ran = { memoryPrograms: 0, sqlitePrograms: 0, redisPrograms: 0, postgresPrograms: 0 };

describe('the guard with the memory store agrees with the reference model', () => {
  const RETENTION_MS = 300_000;
  const LEASE_MS = 120_000;
  // Each side of the lease and retention edges, and past both.
  const advances = [1, LEASE_MS - 1, LEASE_MS, RETENTION_MS - 1, RETENTION_MS, 2 * RETENTION_MS];

  async function start(maxRecords: number, maxRecordsPerScope: number): Promise<RealSystem> {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ maxRecords, maxRecordsPerScope, now: clock.now });
    return startRealSystem({
      storeFor: () => store,
      retentionMs: RETENTION_MS,
      leaseMs: LEASE_MS,
      advance: async (ms) => clock.advance(ms),
      settleMs: 0,
      deadlineMs: 300,
      close: async () => {},
    });
  }

  it(
    `over ${MEMORY_RUNS} random programs of up to ${MAX_COMMANDS} steps: a roomy store, a full one, a quota per caller`,
    async () => {
      const before = { ...tally };
      await fc.assert(
        fc.asyncProperty(
          // A roomy store; a full one; one where each caller's quota binds first.
          fc.constantFrom([1_000, 1_000], [3, 1_000], [1_000, 1]),
          programs(advances, MAX_COMMANDS),
          async ([maxRecords, maxRecordsPerScope], commands) => {
            ran.memoryPrograms += 1;
            const settings: ModelSettings = {
              retentionMs: RETENTION_MS,
              leaseMs: LEASE_MS,
              maxRecords,
              maxRecordsPerScope,
              expiry: 'lazy',
            };
            await runProgram(settings, () => start(maxRecords, maxRecordsPerScope), commands);
          },
        ),
        { numRuns: MEMORY_RUNS },
      );
      report('memory store', before);
      expect(ran.memoryPrograms).toBeGreaterThanOrEqual(MEMORY_RUNS);
    },
    longRunScaled(60_000),
  );
});

describe('the guard with the SQLite store, three instances on one file, agrees with the reference model', () => {
  // The store reads the time from a clock it is given, so "time passing" is exact, as for memory:
  // each side of the lease and retention edges, and past both.
  const RETENTION_MS = 300_000;
  const LEASE_MS = 120_000;
  const advances = [1, LEASE_MS - 1, LEASE_MS, RETENTION_MS - 1, RETENTION_MS, 2 * RETENTION_MS];
  const dir = mkdtempSync(join(tmpdir(), 'sep3182-sqlite-model-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // Steps of the wall clock alone (NTP, a VM resumed), each past the lease: a running call keeps
  // its key (its lease is on the monotonic clock), a completed record's retention shortens.
  const wallClockSteps = [LEASE_MS + 1_000, RETENTION_MS];

  async function start(maxRecordsPerScope: number): Promise<RealSystem> {
    const wall = new ManualClock();
    const monotonic = new ManualClock();
    const file = join(dir, `${randomUUID()}.sqlite`);
    // Each instance its own connection to the file, as each server process has.
    const stores = await Promise.all(
      CALLERS.map(() =>
        SqliteIdempotencyStore.open(file, { maxRecordsPerScope, now: wall.now, monotonic: monotonic.now }),
      ),
    );
    return startRealSystem({
      storeFor: storeOfEach(stores),
      retentionMs: RETENTION_MS,
      leaseMs: LEASE_MS,
      advance: async (ms) => {
        wall.advance(ms);
        monotonic.advance(ms);
      },
      stepWallClock: async (ms) => wall.advance(ms),
      ...CONNECTED_STORE_TIMING,
      close: async () => {
        await Promise.all(stores.map((store) => store.close()));
        rmSync(file, { force: true });
      },
    });
  }

  itAgreesWithTheModel(
    'SQLite store',
    'sqlitePrograms',
    SQLITE_RUNS,
    { RETENTION_MS, LEASE_MS, advances, wallClockSteps, leaseClock: 'monotonic' },
    start,
  );
});

const redis = await redisForFile();

/**
 * The times of a store that keeps its own clock (Redis, Postgres), where "time passing" moves every
 * record's lease and expiry back by the step: whole minutes, so the few real seconds a program
 * takes never decide an expiry.
 */
const SERVER_TIME = {
  RETENTION_MS: 600_000,
  LEASE_MS: 300_000,
  advances: [60_000, 300_000, 600_000],
};

/**
 * The property for a store three instances share: random programs, each instance on its own
 * connection to the store, with and without a quota of one record per caller.
 */
function itAgreesWithTheModel(
  label: string,
  counter: keyof typeof ran,
  numRuns: number,
  timing: {
    RETENTION_MS: number;
    LEASE_MS: number;
    advances: number[];
    wallClockSteps?: number[];
    leaseClock?: ModelSettings['leaseClock'];
  },
  start: (maxRecordsPerScope: number) => Promise<RealSystem>,
  connections = 'connection',
): void {
  it(
    `over ${numRuns} random programs of up to ${MAX_COMMANDS} steps, each instance on its own ${connections}, with and without a quota`,
    async () => {
      const before = { ...tally };
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(1_000, 1),
          programs(timing.advances, MAX_COMMANDS, timing.wallClockSteps),
          async (maxRecordsPerScope, commands) => {
            ran[counter] += 1;
            const settings: ModelSettings = {
              retentionMs: timing.RETENTION_MS,
              leaseMs: timing.LEASE_MS,
              maxRecordsPerScope,
              expiry: 'eager',
              leaseClock: timing.leaseClock ?? 'shared',
            };
            await runProgram(settings, () => start(maxRecordsPerScope), commands);
          },
        ),
        { numRuns },
      );
      report(label, before);
      expect(ran[counter]).toBeGreaterThanOrEqual(numRuns);
    },
    longRunScaled(60_000),
  );
}

/** Logs what one family of programs exercised (the counts docs/reliability.md quotes). */
function report(label: string, before: typeof tally): void {
  const during = Object.fromEntries(
    Object.entries(tally).map(([name, value]) => [name, value - (Reflect.get(before, name) ?? 0)]),
  );
  console.log(`model-based runs, ${label}: ${JSON.stringify(during)}`);
}

describe.skipIf(!redis)(
  'the guard with the Redis store, three instances, agrees with the reference model',
  () => {
    // Redis keeps its own time; "time passing" shifts every record's TTL by the same amount.
    const { RETENTION_MS, LEASE_MS, advances } = SERVER_TIME;

    // The quota's index scores each record by its expiry: those move with the TTLs.
    const SHIFT_TTLS = `
local d = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok == 'zset' then
    local members = redis.call('ZRANGE', key, 0, -1)
    for _, member in ipairs(members) do redis.call('ZINCRBY', key, -d, member) end
  end
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 then
    if ttl <= d then redis.call('DEL', key) else redis.call('PEXPIRE', key, ttl - d) end
  end
end
return 0`;

    async function start(maxRecordsPerScope: number): Promise<RealSystem> {
      if (!redis) throw new Error('unreachable: skipped without Redis');
      const admin = redis.admin;
      const prefix = uniqueKeyPrefix('model');
      const clients: RedisClient[] = [];
      const stores: RedisIdempotencyStore[] = [];
      for (const _ of CALLERS) {
        const client = await connectRedis(redis.url);
        clients.push(client);
        stores.push(new RedisIdempotencyStore(client, { keyPrefix: prefix, maxRecordsPerScope }));
      }
      return startRealSystem({
        storeFor: storeOfEach(stores),
        retentionMs: RETENTION_MS,
        leaseMs: LEASE_MS,
        advance: async (ms) => {
          const keys = await admin.keys(`${prefix}*`);
          if (keys.length > 0) await admin.eval(SHIFT_TTLS, { keys, arguments: [String(ms)] });
        },
        ...CONNECTED_STORE_TIMING,
        close: async () => {
          await Promise.all(clients.map((client) => closeRedis(client)));
          await redis.flush(prefix);
        },
      });
    }

    itAgreesWithTheModel(
      'Redis store',
      'redisPrograms',
      REDIS_RUNS,
      { RETENTION_MS, LEASE_MS, advances },
      start,
    );
  },
);

const postgres = await postgresForFile();

describe.skipIf(!postgres)(
  'the guard with the Postgres store, three instances, agrees with the reference model',
  () => {
    // Postgres keeps its own time, so "time passing" moves every lease and expiry back by the same amount.
    const { RETENTION_MS, LEASE_MS, advances } = SERVER_TIME;
    const prefix = uniqueTablePrefix('model');

    async function start(maxRecordsPerScope: number): Promise<RealSystem> {
      if (!postgres) throw new Error('unreachable: skipped without Postgres');
      const admin = postgres.admin;
      await migratePostgresStore(admin, prefix);
      const stores: PostgresIdempotencyStore[] = [];
      for (const _ of CALLERS) {
        stores.push(
          await PostgresIdempotencyStore.connect(postgres.url, {
            tablePrefix: prefix,
            maxRecordsPerScope,
            migrate: false,
            statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
            // One connection per instance, as each Redis instance has: its statements reach
            // Postgres in the order the guard sent them. With more, a call sent "at once" behind
            // another may wait for a new connection while the first claims, runs and completes,
            // and then rightly replays it, which is not the interleaving the model means.
            maxConnections: 1,
          }),
        );
      }
      return startRealSystem({
        storeFor: storeOfEach(stores),
        retentionMs: RETENTION_MS,
        leaseMs: LEASE_MS,
        advance: async (ms) => {
          await admin.query(
            `UPDATE ${prefix}records SET expires_at = expires_at - $1 * interval '1 millisecond',
               resumed_until = resumed_until - $1 * interval '1 millisecond'`,
            [ms],
          );
        },
        ...CONNECTED_STORE_TIMING,
        close: async () => {
          // The store's own clear: the records, and the usage counted beside them.
          await stores[0]?.clear();
          await Promise.all(stores.map((store) => store.close()));
        },
      });
    }

    afterAll(async () => {
      await postgres?.drop(prefix);
    });

    itAgreesWithTheModel(
      'Postgres store',
      'postgresPrograms',
      POSTGRES_RUNS,
      { RETENTION_MS, LEASE_MS, advances },
      start,
      'connections',
    );
  },
);
