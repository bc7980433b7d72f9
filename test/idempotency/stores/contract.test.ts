// The store contract (test/support/store-contract.ts) against every store the library ships: the
// memory store, a SQLite file, Redis, a three-master Redis Cluster and Postgres, each on a private
// server (or file) this file starts; and, on SQLite and Postgres, a tool's writes in its record's
// transaction (test/support/transactional-contract.ts). What each store's backend alone can get
// wrong is in that store's own test file.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RedisClientType } from '@redis/client';
import { type ClaimTicket, MemoryIdempotencyStore, type RecordId } from 'mcp-request-idempotency';
import { PostgresIdempotencyStore } from 'mcp-request-idempotency/postgres';
import { RedisIdempotencyStore, redisKeysOf } from 'mcp-request-idempotency/redis';
import { SqliteIdempotencyStore } from 'mcp-request-idempotency/sqlite';
import { afterAll, expect } from 'vitest';
import { POSTGRES_STATEMENT_TIMEOUT_MS } from '../../../demo/processes/bounds.js';
import {
  POSTGRES_SKIP_REASON,
  startPostgres,
  uniqueTablePrefix,
} from '../../../demo/processes/postgres-server.js';
import { REDIS_CLUSTER_SKIP_REASON, startRedisCluster } from '../../../demo/processes/redis-cluster.js';
import { REDIS_SKIP_REASON, startRedis, uniqueKeyPrefix } from '../../../demo/processes/redis-server.js';
import { describeStoreContract } from '../../support/store-contract.js';
import { FINGERPRINT, LEASE_MS, newId } from '../../support/store-fixtures.js';
import { describeTransactionalContract } from '../../support/transactional-contract.js';

const [redis, cluster, postgres] = await Promise.all([startRedis(), startRedisCluster(), startPostgres()]);
if (!redis) console.warn(REDIS_SKIP_REASON);
else if (!redis.owned) {
  console.warn(
    'The full and hang tests are left out on Redis: they fill Redis up and freeze it, so need a private redis-server, not REDIS_URL',
  );
}
if (!cluster) console.warn(REDIS_CLUSTER_SKIP_REASON);
if (!postgres) console.warn(POSTGRES_SKIP_REASON);
else if (!postgres.owned) {
  console.warn(
    'The hang test is left out on Postgres: it freezes Postgres, so needs a private cluster, not DATABASE_URL',
  );
}

const redisPrefix = uniqueKeyPrefix('contract');
const clusterPrefix = uniqueKeyPrefix('contract-cluster');
const tablePrefix = uniqueTablePrefix('contract');
const sqliteDir = mkdtempSync(join(tmpdir(), 'sep3182-sqlite-contract-'));

afterAll(async () => {
  await redis?.flush(redisPrefix);
  await postgres?.drop(tablePrefix);
  await Promise.all([redis?.stop(), cluster?.stop(), postgres?.stop()]);
  rmSync(sqliteDir, { recursive: true, force: true });
});

/** `count` stores, each opened on a connection of its own, as server instances open them. */
function each<S>(count: number, open: () => Promise<S>): Promise<S[]> {
  return Promise.all(Array.from({ length: count }, open));
}

// --- The memory store ---

describeStoreContract(
  'the memory store',
  async (count, quotas) => {
    // One process: every instance is the same store.
    const store = new MemoryIdempotencyStore(quotas);
    return Array.from({ length: count }, () => store);
  },
  {
    completesAfterLease: true,
    // Its record cap, reached as callers would reach it: keys of many callers, each under its quota.
    fill: async (store) => {
      const tickets: ClaimTicket[] = [];
      for (let n = 0; ; n++) {
        const claim = await store.claim(newId(`filler-${n % 100}`), FINGERPRINT, LEASE_MS);
        if (claim.state === 'full') break;
        if (claim.state !== 'claimed') throw new Error(`filling the store: ${claim.state}`);
        tickets.push(claim.ticket);
      }
      return async () => {
        for (const ticket of tickets) await store.release(ticket);
      };
    },
  },
);

// --- A SQLite file ---

const sqliteFile = join(sqliteDir, 'records.sqlite');

/** The file's size bound in the suite: room for every test's records, and a bound `fill` reaches in a second. */
const SQLITE_MAX_FILE_BYTES = 1024 * 1024;

/** A store on the suite's file, for reading its records behind the stores' backs. */
const sqliteAdmin = () => SqliteIdempotencyStore.open(sqliteFile);

describeStoreContract(
  'a SQLite file',
  (count, quotas) =>
    // Each instance its own connection to the one file, as each server process has.
    each(count, () =>
      SqliteIdempotencyStore.open(sqliteFile, { maxFileBytes: SQLITE_MAX_FILE_BYTES, ...quotas }),
    ),
  {
    completesAfterLease: false,
    expiryOf: async (id: RecordId) => {
      const admin = await sqliteAdmin();
      try {
        const row = await admin.transaction((db) =>
          db.get(
            'SELECT expires_at - ? AS left_ms FROM sep3182_idem_records WHERE scope = ? AND idempotency_key = ? AND expires_at > ?',
            Date.now(),
            id.scope,
            id.idempotencyKey,
            Date.now(),
          ),
        );
        return typeof row?.left_ms === 'number' ? row.left_ms : undefined;
      } finally {
        await admin.close();
      }
    },
    // Its size bound (`maxFileBytes`), reached as callers would reach it: keys of many callers,
    // until the file is at its bound. A page with room still takes a record there, so then keys
    // of the caller the suite claims for next (`newId`'s), until none has found room in a long
    // while: every page its next key could land on is full.
    fill: async (store) => {
      const tickets: ClaimTicket[] = [];
      const claim = async (scope: string) => {
        const answer = await store.claim(newId(scope), FINGERPRINT, LEASE_MS);
        if (answer.state === 'claimed') tickets.push(answer.ticket);
        else if (answer.state !== 'full') throw new Error(`filling the store: ${answer.state}`);
        return answer.state;
      };
      for (let n = 0; (await claim(`filler-${n % 100}`)) === 'claimed'; n++);
      for (let fullInARow = 0; fullInARow < 1_000; ) {
        fullInARow = (await claim(newId().scope)) === 'full' ? fullInARow + 1 : 0;
      }
      return async () => {
        for (const ticket of tickets) await store.release(ticket);
      };
    },
  },
);

// --- Redis, one server and a cluster ---

/** What is left of a Redis key's TTL, or undefined if there is no such key. */
async function ttlOf(admin: RedisClientType, key: string): Promise<number | undefined> {
  const ttl = await admin.pTTL(key);
  if (ttl === -2) return undefined;
  // A record without an expiry would live for ever: as far past any bound as can be.
  return ttl === -1 ? Number.POSITIVE_INFINITY : ttl;
}

/** Redis under `maxmemory` 1 byte refuses every write (noeviction, the default); 0 lifts the bound. */
async function maxmemory(admins: RedisClientType[], bytes: string): Promise<void> {
  await Promise.all(admins.map((admin) => admin.configSet('maxmemory', bytes)));
}

describeStoreContract(
  'Redis',
  redis &&
    ((count, quotas) =>
      each(count, () => RedisIdempotencyStore.connect(redis.url, { keyPrefix: redisPrefix, ...quotas }))),
  {
    completesAfterLease: false,
    expiryOf: async (id: RecordId) => {
      if (!redis) throw new Error('unreachable: skipped without Redis');
      return ttlOf(redis.admin, redisKeysOf(redisPrefix, id)[0]);
    },
    fill:
      redis?.owned === true
        ? async () => {
            await maxmemory([redis.admin], '1');
            return () => maxmemory([redis.admin], '0');
          }
        : undefined,
    hang:
      redis?.owned === true
        ? {
            open: (replyTimeoutMs) =>
              RedisIdempotencyStore.connect(redis.url, {
                keyPrefix: redisPrefix,
                commandTimeoutMs: replyTimeoutMs,
              }),
            freeze: () => {
              redis.freeze();
              return () => redis.thaw();
            },
          }
        : undefined,
  },
);

describeStoreContract(
  'a Redis Cluster',
  cluster &&
    ((count, quotas) =>
      each(count, () =>
        RedisIdempotencyStore.connectCluster(cluster.urls, { keyPrefix: clusterPrefix, ...quotas }),
      )),
  {
    completesAfterLease: false,
    expiryOf: async (id: RecordId) => {
      if (!cluster) throw new Error('unreachable: skipped without a cluster');
      const [record] = redisKeysOf(clusterPrefix, id);
      return ttlOf((await cluster.nodeOf(record)).admin, record);
    },
    fill: async () => {
      if (!cluster) throw new Error('unreachable: skipped without a cluster');
      const admins = cluster.nodes.map((node) => node.admin);
      await maxmemory(admins, '1');
      return () => maxmemory(admins, '0');
    },
  },
);

// --- Postgres ---

describeStoreContract(
  'Postgres',
  postgres &&
    ((count, quotas) =>
      each(count, () =>
        PostgresIdempotencyStore.connect(postgres.url, {
          tablePrefix,
          // A bound that leaves a busy machine room: the default's 1 s is a production setting.
          statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
          ...quotas,
        }),
      )),
  {
    completesAfterLease: false,
    expiryOf: async (id: RecordId) => {
      if (!postgres) throw new Error('unreachable: skipped without Postgres');
      const { rows } = await postgres.admin.query<{ left_ms: number }>(
        `SELECT (extract(epoch FROM expires_at - now()) * 1000)::float8 AS left_ms FROM ${tablePrefix}records
           WHERE scope = $1 AND idempotency_key = $2 AND expires_at > now()`,
        [id.scope, id.idempotencyKey],
      );
      return rows[0]?.left_ms;
    },
    // Its size bound is the disk, which the suite does not fill: no `fill`.
    afterConcurrentClaims: ([one, two]) => {
      // The claims really ran side by side: each pool opened more than one session.
      expect((one?.pool.totalCount ?? 0) + (two?.pool.totalCount ?? 0)).toBeGreaterThan(2);
    },
    hang:
      postgres?.owned === true
        ? {
            open: (replyTimeoutMs) =>
              PostgresIdempotencyStore.connect(postgres.url, {
                tablePrefix,
                statementTimeoutMs: replyTimeoutMs,
              }),
            freeze: () => {
              postgres.freeze();
              return () => postgres.thaw();
            },
          }
        : undefined,
  },
);

// --- A tool's writes in its record's transaction: SQLite and Postgres ---

/** Its own file: the contract above fills the suite's file to its bound. */
const writesFile = join(sqliteDir, 'writes.sqlite');
const sqliteWrites = await SqliteIdempotencyStore.open(writesFile);
await sqliteWrites.transaction((db) => db.run('CREATE TABLE effects (idempotency_key TEXT NOT NULL)'));
afterAll(() => sqliteWrites.close());

describeTransactionalContract<SqliteIdempotencyStore>('a SQLite file', {
  open: () => SqliteIdempotencyStore.open(writesFile),
  write: async (store, ticket) =>
    (await store.begin(ticket)).run('INSERT INTO effects VALUES (?)', ticket.idempotencyKey),
  failStatement: async (store, ticket) =>
    (await store.begin(ticket)).run('INSERT INTO effects VALUES (NULL)'),
  failure: /NOT NULL/,
  // Read as a server reads its own tables: the last commit, whoever holds the write lock.
  effectsOf: async (id) =>
    Number(
      await sqliteWrites.read(
        (db) => db.get('SELECT count(*) AS n FROM effects WHERE idempotency_key = ?', id.idempotencyKey)?.n,
      ),
    ),
});

const effectsTable = `${tablePrefix}effects`;
await postgres?.admin.query(`CREATE TABLE ${effectsTable} (idempotency_key text NOT NULL)`);

describeTransactionalContract<PostgresIdempotencyStore>(
  'Postgres',
  postgres && {
    open: () =>
      PostgresIdempotencyStore.connect(postgres.url, {
        tablePrefix,
        statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
      }),
    write: async (store, ticket) => {
      await (await store.begin(ticket)).query(`INSERT INTO ${effectsTable} (idempotency_key) VALUES ($1)`, [
        ticket.idempotencyKey,
      ]);
    },
    failStatement: async (store, ticket) => (await store.begin(ticket)).query('SELECT 1 / 0'),
    failure: /division by zero/,
    effectsOf: async (id) =>
      (
        await postgres.admin.query(`SELECT 1 FROM ${effectsTable} WHERE idempotency_key = $1`, [
          id.idempotencyKey,
        ])
      ).rows.length,
  },
);
