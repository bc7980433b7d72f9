// The Postgres store against a real Postgres: what only Postgres can get wrong. The store contract
// every store keeps (claims, replays, leases, retention, continuations, quotas, failing closed
// while Postgres hangs) is test/idempotency/stores/contract.test.ts, with a tool's writes in its record's
// transaction; here, that transaction's retention and pool, expired records reaped off the claim
// path, each caller's usage row, the statements each decision costs, a claim whose process died
// freed at once, records kept across a restart of Postgres itself, and failing closed when
// Postgres is down.

import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { type ClaimTicket, type RecordId, StoreUnavailableError } from 'mcp-request-idempotency';
import {
  type PostgresConnectOptions,
  PostgresIdempotencyStore,
  type PostgresStoreOptions,
} from 'mcp-request-idempotency/postgres';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_STATEMENT_TIMEOUT_MS, waitUntil } from '../../../../demo/processes/bounds.js';
import { type TestPostgres, uniqueTablePrefix } from '../../../../demo/processes/postgres-server.js';
import { postgresForFile } from '../../../support/backends.js';
import { startHolder } from '../../../support/postgres-holders.js';
import {
  claimTicket,
  continuationTicket,
  ERROR,
  expectUnavailableWithin,
  FINGERPRINT,
  LEASE_MS,
  newId,
  OTHER_FINGERPRINT,
  RESULT,
  RETENTION_MS,
  replayOf,
  SHORT_MS,
} from '../../../support/store-fixtures.js';

const postgres = await postgresForFile(
  'Fail-closed, restart and round-trip tests skipped: they stop Postgres or read its log, so need a private cluster, not DATABASE_URL',
);
const needsOwnServer = !postgres?.owned;

const prefix = uniqueTablePrefix('store');
const records = `${prefix}records`;

function server(): TestPostgres {
  if (!postgres) throw new Error('unreachable: these tests are skipped without Postgres');
  return postgres;
}

const stores: PostgresIdempotencyStore[] = [];
const children: ChildProcess[] = [];

/** A store with its own pool and liveness connection, as each server instance has. */
async function openStore(
  options: PostgresStoreOptions & PostgresConnectOptions = {},
): Promise<PostgresIdempotencyStore> {
  // The bound on each reply is a test's subject only where the test sets it: elsewhere, one that
  // leaves a busy machine room (the default's 1 s is a production setting).
  const store = await PostgresIdempotencyStore.connect(server().url, {
    tablePrefix: prefix,
    statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
    ...options,
  });
  stores.push(store);
  return store;
}

afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

afterAll(async () => {
  await postgres?.drop(prefix);
});

/** The row behind a store's back, with what is left of its lease or retention in ms. */
async function rowOf(id: RecordId) {
  const { rows } = await server().admin.query<{ state: string; left_ms: number; holder_lock: string | null }>(
    `SELECT state, holder_lock::text, (extract(epoch FROM expires_at - now()) * 1000)::float8 AS left_ms
       FROM ${records} WHERE scope = $1 AND idempotency_key = $2 AND expires_at > now()`,
    [id.scope, id.idempotencyKey],
  );
  return rows[0];
}

describe.skipIf(!postgres)("a tool's writes in its record's transaction", () => {
  // What a tool writes through `begin`'s connection: one row per write, under its record's key.
  const effects = `${prefix}effects`;
  beforeAll(async () => {
    await server().admin.query(`CREATE TABLE ${effects} (idempotency_key text NOT NULL)`);
  });
  const effectsOf = async (id: RecordId) => {
    const { rows } = await server().admin.query(`SELECT 1 FROM ${effects} WHERE idempotency_key = $1`, [
      id.idempotencyKey,
    ]);
    return rows.length;
  };
  const write = async (store: PostgresIdempotencyStore, ticket: ClaimTicket) => {
    const tx = await store.begin(ticket);
    await tx.query(`INSERT INTO ${effects} (idempotency_key) VALUES ($1)`, [ticket.idempotencyKey]);
    return tx;
  };

  it('counts the retention from the answer, not from the transaction’s BEGIN, however long the tool ran', async () => {
    const store = await openStore();
    const id = newId();
    const ticket = await claimTicket(store, id);
    await write(store, ticket);
    // The tool runs longer than the retention: counted from BEGIN, the record would be born expired.
    const toolMs = 1_500;
    const retentionMs = 1_000;
    await new Promise((resolve) => setTimeout(resolve, toolMs));

    const answered = Date.now();
    expect(await store.complete(ticket, RESULT, retentionMs)).toBe(true);
    const { rows } = await server().admin.query(
      `SELECT extract(epoch FROM expires_at) * 1000 AS expires FROM ${records} WHERE idempotency_key = $1`,
      [id.idempotencyKey],
    );
    expect(Number(rows[0]?.expires)).toBeGreaterThanOrEqual(answered + retentionMs - 100);
    expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
    expect(await effectsOf(id)).toBe(1);
  });

  it('hands every connection back: as many transactions in a row as the pool has connections, and more', async () => {
    const store = await openStore({ maxConnections: 2 });
    for (let i = 0; i < 6; i++) {
      const id = newId();
      const ticket = await claimTicket(store, id);
      await write(store, ticket);
      expect(await store.complete(ticket, RESULT, RETENTION_MS)).toBe(true);
      expect(await effectsOf(id)).toBe(1);
    }
  });
});

describe.skipIf(!postgres)('retention: expired records are reaped, never by a claim', () => {
  const rowsOf = async (scope: string) => {
    const { rows } = await server().admin.query<{ idempotency_key: string }>(
      `SELECT idempotency_key FROM ${records} WHERE scope = $1`,
      [scope],
    );
    return rows.map((row) => row.idempotency_key);
  };
  const completeFor = async (store: PostgresIdempotencyStore, id: RecordId, retentionMs: number) =>
    store.complete(await claimTicket(store, id), RESULT, retentionMs);

  it('deletes expired records on its own, with no claim to come, and keeps the live ones', async () => {
    const store = await openStore({ reapIntervalMs: 50 });
    const scope = `reaped-${randomUUID()}`;
    for (let i = 0; i < 5; i++) await completeFor(store, newId(scope), 1);
    const kept = newId(scope);
    await completeFor(store, kept, RETENTION_MS);

    await waitUntil(async () => (await rowsOf(scope)).length === 1);

    expect(await rowsOf(scope)).toStrictEqual([kept.idempotencyKey]);
    expect((await store.claim(kept, FINGERPRINT, LEASE_MS)).state).toBe('completed');
  });

  it('leaves expired records to the reaper: a claim that writes deletes none', async () => {
    const store = await openStore({ reapIntervalMs: 3_600_000 });
    const scope = `unreaped-${randomUUID()}`;
    await completeFor(store, newId(scope), 1);
    await new Promise((resolve) => setTimeout(resolve, 20));

    await claimTicket(store, newId(scope));

    expect(await rowsOf(scope)).toHaveLength(2);
  });

  it('counts only live records against the quota while the reaper has not come by yet', async () => {
    const store = await openStore({ maxRecordsPerScope: 2, reapIntervalMs: 3_600_000 });
    const scope = `quota-unreaped-${randomUUID()}`;
    await completeFor(store, newId(scope), SHORT_MS);
    await completeFor(store, newId(scope), SHORT_MS);
    await new Promise((resolve) => setTimeout(resolve, 2 * SHORT_MS));

    expect((await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    expect((await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    expect(await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).toStrictEqual({ state: 'quotaExceeded' });
  });

  it("reaps from several instances at once, each expired record once, and each caller's usage with it", async () => {
    // A table of its own, so that what is reaped is this test's rows only.
    const own = uniqueTablePrefix('reap');
    const [one, two] = await Promise.all([openStore({ tablePrefix: own }), openStore({ tablePrefix: own })]);
    const scopes = ['a', 'b', 'c'].map((name) => `reap-race-${name}-${randomUUID()}`);
    const large = { result: { content: [{ type: 'text', text: 'x'.repeat(4_000) }] } };
    const ids = scopes.flatMap((scope) => Array.from({ length: 300 }, () => newId(scope)));
    for (const [i, id] of ids.entries()) {
      const store = i % 2 ? one : two;
      await store.complete(await claimTicket(store, id), i % 3 ? large : RESULT, i % 3 ? 1 : RETENTION_MS);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));

    try {
      const reaped = await Promise.all([one.reap(), two.reap(), one.reap()]);

      expect(reaped.reduce((sum, n) => sum + n, 0)).toBe(600);
      // What is left, and each caller's usage, side by side.
      const left = await server().admin.query(
        `SELECT r.scope, count(*)::int AS records, sum(r.bytes)::int AS bytes,
            min(u.records)::int AS counted_records, min(u.bytes)::int AS counted_bytes
           FROM ${own}records r JOIN ${own}usage u USING (scope) GROUP BY r.scope ORDER BY r.scope`,
      );
      const size = JSON.stringify(RESULT).length;
      expect(left.rows).toStrictEqual(
        [...scopes].sort().map((scope) => ({
          scope,
          records: 100,
          bytes: 100 * size,
          counted_records: 100,
          counted_bytes: 100 * size,
        })),
      );
    } finally {
      await Promise.all([one.close(), two.close()]);
      await server().drop(own);
    }
  });

  it('writes no index but the primary key, the one a lookup needs', async () => {
    const { rows } = await server().admin.query(`SELECT indexname FROM pg_indexes WHERE tablename = $1`, [
      records,
    ]);
    expect(rows).toStrictEqual([{ indexname: `${records}_pkey` }]);
  });
});

describe.skipIf(!postgres)("each caller's usage, kept beside its records", () => {
  // A claim reads its caller's quota from one row of `usage`, so that row must always say what the
  // caller's rows add up to, expired or not: here it is checked against the rows themselves.
  const expectUsageOfRows = async (scopes: string[]) => {
    const { admin } = server();
    const usage = await admin.query(
      `SELECT scope, records::text, bytes::text FROM ${prefix}usage WHERE scope = ANY ($1) ORDER BY scope`,
      [scopes],
    );
    const rows = await admin.query(
      `SELECT scope, count(*)::text AS records, sum(bytes)::text AS bytes FROM ${records}
         WHERE scope = ANY ($1) GROUP BY scope ORDER BY scope`,
      [scopes],
    );
    expect(usage.rows).toStrictEqual(rows.rows);
    return rows.rows.length;
  };

  it('matches the rows through records, continuations, releases, expiry and a dead holder’s keys taken over, from instances racing', async () => {
    const [one, two, doomed] = await Promise.all([openStore(), openStore(), openStore()]);
    const scopes = ['a', 'b', 'c'].map((name) => `usage-${name}-${randomUUID()}`);
    // Every way a key can end, six keys of each, all at once from two instances.
    const endings = [
      async (store: PostgresIdempotencyStore, id: RecordId) =>
        store.complete(await claimTicket(store, id), RESULT, RETENTION_MS),
      async (store: PostgresIdempotencyStore, id: RecordId) =>
        store.complete(await claimTicket(store, id), ERROR, SHORT_MS),
      async (store: PostgresIdempotencyStore, id: RecordId) => store.release(await claimTicket(store, id)),
      async (store: PostgresIdempotencyStore, id: RecordId) => {
        await store.awaitInput(await claimTicket(store, id), RESULT, RETENTION_MS);
        await store.complete(await continuationTicket(store, id), ERROR, RETENTION_MS);
      },
      async (store: PostgresIdempotencyStore, id: RecordId) => {
        await store.awaitInput(await claimTicket(store, id), RESULT, RETENTION_MS);
        await store.release(await continuationTicket(store, id));
      },
      async (store: PostgresIdempotencyStore, id: RecordId) => claimTicket(store, id, SHORT_MS),
    ];
    await Promise.all(
      scopes.flatMap((scope, s) =>
        Array.from({ length: 36 }, (_, i) =>
          endings[i % endings.length]?.(i % 2 === s % 2 ? one : two, newId(scope)),
        ),
      ),
    );
    expect(await expectUsageOfRows(scopes)).toBe(3);

    // A holder that dies with a fresh claim and with a continuation's, its record's size still counted.
    const [fresh, resumed] = [newId(scopes[0]), newId(scopes[0])];
    await claimTicket(doomed, fresh);
    await doomed.awaitInput(await claimTicket(doomed, resumed), RESULT, RETENTION_MS);
    await continuationTicket(doomed, resumed);
    await doomed.close();
    await expectUsageOfRows(scopes);

    // Past every short lease and retention: the dead holder's keys are taken over, each caller
    // claims again while two reapers race to delete what expired.
    await new Promise((resolve) => setTimeout(resolve, 2 * SHORT_MS));
    expect((await one.claim(fresh, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    expect((await two.claim(resumed, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    await expectUsageOfRows(scopes);
    await Promise.all([
      one.reap(),
      two.reap(),
      ...scopes.map((scope, s) => claimTicket(s % 2 ? one : two, newId(scope))),
    ]);
    await expectUsageOfRows(scopes);
    const { rows } = await server().admin.query(
      `SELECT count(*)::int AS expired FROM ${records} WHERE scope = ANY ($1) AND expires_at <= now()`,
      [scopes],
    );
    expect(rows).toStrictEqual([{ expired: 0 }]);
  });

  it('is counted from the rows already there when a table of an earlier version is migrated', async () => {
    const own = uniqueTablePrefix('earlier');
    try {
      const store = await openStore({ tablePrefix: own });
      const scope = `usage-earlier-${randomUUID()}`;
      await store.complete(await claimTicket(store, newId(scope)), RESULT, RETENTION_MS);
      await claimTicket(store, newId(scope));
      // An earlier version's schema: the records, and no usage beside them.
      await server().admin.query(`DROP TABLE ${own}usage`);

      await store.migrate();

      const { rows } = await server().admin.query(
        `SELECT records::int, bytes::int FROM ${own}usage WHERE scope = $1`,
        [scope],
      );
      expect(rows).toStrictEqual([{ records: 2, bytes: JSON.stringify(RESULT).length }]);
    } finally {
      await server().drop(own);
    }
  });

  it('holds no row for a caller with no records left', async () => {
    const store = await openStore();
    const scope = `usage-gone-${randomUUID()}`;
    await store.release(await claimTicket(store, newId(scope)));

    expect(await expectUsageOfRows([scope])).toBe(0);
  });
});

describe.skipIf(!postgres)('clear', () => {
  it("deletes this store's records and nothing in another prefix's table", async () => {
    const neighbourPrefix = uniqueTablePrefix('neighbour');
    const neighbour = await openStore({ tablePrefix: neighbourPrefix });
    try {
      const store = await openStore();
      const ids = [newId(), newId(), newId()];
      for (const id of ids) await claimTicket(store, id);
      const kept = newId();
      await neighbour.complete(await claimTicket(neighbour, kept), RESULT, RETENTION_MS);

      await store.clear();

      for (const id of ids) expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      expect((await neighbour.claim(kept, FINGERPRINT, LEASE_MS)).state).toBe('completed');
    } finally {
      await server().drop(neighbourPrefix);
    }
  });

  it('refuses a table prefix that is no plain SQL identifier', async () => {
    for (const tablePrefix of ['App_', 'x"; DROP TABLE y; --', '1abc', 'a'.repeat(41)]) {
      await expect(PostgresIdempotencyStore.connect(server().url, { tablePrefix })).rejects.toThrow(
        RangeError,
      );
    }
  });
});

describe.skipIf(!postgres)('options', () => {
  it('refuses a statement bound that is no positive whole number of ms', async () => {
    for (const bad of [0, -1, Number.NaN, 2.5]) {
      await expect(
        PostgresIdempotencyStore.connect(server().url, { tablePrefix: prefix, statementTimeoutMs: bad }),
      ).rejects.toThrow(new RangeError(`statementTimeoutMs must be a positive integer, got ${bad}`));
    }
  });
});

describe.skipIf(!postgres || needsOwnServer)(
  'round trips, as Postgres receives them (log_statement = all)',
  () => {
    it('costs one statement per claim and per complete: a first execution two, any other answer one', async () => {
      const applicationName = `rt-${randomUUID().slice(0, 8)}`;
      const store = await openStore({ applicationName });
      const id = newId();
      const during = <T>(action: () => Promise<T>) => server().statementsDuring(applicationName, action);
      const claim = (fingerprint = FINGERPRINT) => store.claim(id, fingerprint, LEASE_MS);

      const first = await during(() => claim());
      expect(first.value.state).toBe('claimed');
      expect(first.statements).toStrictEqual([expect.stringContaining(`${prefix}claim(`)]);
      if (first.value.state !== 'claimed') throw new Error('unreachable');
      const { ticket } = first.value;
      const inProgress = await during(() => claim());
      expect([inProgress.value.state, inProgress.statements.length]).toStrictEqual(['inProgress', 1]);
      const complete = await during(() => store.complete(ticket, RESULT, RETENTION_MS));
      expect(complete.statements).toStrictEqual([expect.stringContaining(`${prefix}settle(`)]);
      const replay = await during(() => claim());
      expect([replay.value.state, replay.statements.length]).toStrictEqual(['completed', 1]);
      const conflict = await during(() => claim(OTHER_FINGERPRINT));
      expect([conflict.value, conflict.statements.length]).toStrictEqual([replayOf(RESULT), 1]);
    });

    it('costs the same for a multi-round-trip call, and one statement per renew and release', async () => {
      const applicationName = `rt-${randomUUID().slice(0, 8)}`;
      const store = await openStore({ applicationName });
      const id = newId();
      const during = <T>(action: () => Promise<T>) => server().statementsDuring(applicationName, action);

      const opening = await during(() => store.claim(id, FINGERPRINT, LEASE_MS));
      if (opening.value.state !== 'claimed') throw new Error(opening.value.state);
      const openingTicket = opening.value.ticket;
      const renewed = await during(() => store.renew(openingTicket, LEASE_MS));
      const asked = await during(() => store.awaitInput(openingTicket, RESULT, RETENTION_MS));
      const resumed = await during(() => store.claim(id, FINGERPRINT, LEASE_MS, true));
      if (resumed.value.state !== 'claimed') throw new Error(resumed.value.state);
      const resumedTicket = resumed.value.ticket;
      const released = await during(() => store.release(resumedTicket));

      expect(
        [opening, renewed, asked, resumed, released].map(({ value, statements }) => [
          value,
          statements.length,
        ]),
      ).toStrictEqual([
        [opening.value, 1],
        [true, 1],
        [true, 1],
        [resumed.value, 1],
        [true, 1],
      ]);
    });
  },
);

describe.skipIf(!postgres)('a dead holder is seen at once', () => {
  /** A server process that claims `id` with `leaseMs` and runs on; resolves once it has claimed. */
  async function holder(id: RecordId, leaseMs: number) {
    const started = await startHolder(server().url, prefix, id, leaseMs);
    children.push(started.child);
    return started;
  }

  it('lets a claim take the key of a process killed mid-call within 1 s, though its lease had 120 s to run', async () => {
    const store = await openStore();
    const id = newId();
    const { child, lock } = await holder(id, LEASE_MS);
    expect(await rowOf(id)).toMatchObject({ state: 'inProgress', holder_lock: lock });
    expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toMatchObject({ state: 'inProgress' });

    const killed = performance.now();
    child.kill('SIGKILL');
    let claimedAfterMs = Number.POSITIVE_INFINITY;
    await waitUntil(
      async () => {
        const claim = await store.claim(id, FINGERPRINT, LEASE_MS);
        if (claim.state === 'claimed') claimedAfterMs = performance.now() - killed;
        return claim.state === 'claimed';
      },
      5_000,
      10,
    );

    console.log(
      `dead-holder takeover: claimed ${claimedAfterMs.toFixed(0)} ms after SIGKILL (lease 120 000 ms)`,
    );
    expect(claimedAfterMs).toBeLessThan(1_000);
  });

  it('still answers inProgress for a live holder whose short lease has not run out', async () => {
    const store = await openStore();
    const id = newId();
    await holder(id, 10_000);

    // Past the time a dead holder's key takes to come free, the live one's is still held.
    await new Promise((resolve) => setTimeout(resolve, 1_000));

    expect(await store.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'inProgress',
      fingerprint: 'fingerprint-of-the-holder',
    });
  });

  it('frees the claims of a store that closed (its sessions ended) for the next claim', async () => {
    const [leaving, staying] = await Promise.all([openStore(), openStore()]);
    const id = newId();
    await claimTicket(leaving, id);

    await leaving.close();

    await waitUntil(
      async () => (await staying.claim(id, FINGERPRINT, LEASE_MS)).state === 'claimed',
      1_000,
      10,
    );
  });

  it('keeps the claims of a live store while each of its liveness sessions ends in turn: the other holds its lock', async () => {
    const [holding, other] = await Promise.all([openStore(), openStore()]);
    const id = newId();
    await claimTicket(holding, id);
    const original = holding.livenessLock.pids;

    for (const ending of original) {
      // pg_terminate_backend returns once the signal is sent: waited for until the session is gone.
      await server().admin.query('SELECT pg_terminate_backend($1)', [ending]);
      await waitUntil(async () => {
        const { rows } = await server().admin.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [
          ending,
        ]);
        return rows.length === 0;
      });

      // At once, before the store has had time to reconnect the session that ended.
      expect(await other.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
        state: 'inProgress',
        fingerprint: FINGERPRINT,
      });
      await waitUntil(async () => {
        const pids = holding.livenessLock.pids;
        return pids.length === 2 && !pids.includes(ending);
      });
    }
  });

  it('migrates a table whose claims named their holder’s backend: that claim function goes, its running claims wait out their leases', async () => {
    const own = uniqueTablePrefix('backends');
    const { admin } = server();
    try {
      const store = await openStore({ tablePrefix: own });
      // The earlier version's schema: a claim stamped with a backend, and a claim function reading it.
      await admin.query(`ALTER TABLE ${own}records DROP COLUMN holder_lock, DROP COLUMN holder_epoch,
          ADD COLUMN holder_pid integer, ADD COLUMN holder_started timestamptz`);
      await admin.query(`CREATE FUNCTION ${own}claim(text, text, text, uuid, bigint, boolean, integer,
          timestamptz, bigint, bigint) RETURNS TABLE (answer text, fingerprint text, response text)
          LANGUAGE sql AS $$ SELECT 'claimed', NULL::text, NULL::text $$`);
      const id = newId();
      await admin.query(
        `INSERT INTO ${own}records (scope, idempotency_key, state, fingerprint, expires_at, token, holder_pid, holder_started)
         VALUES ($1, $2, 'inProgress', $3, now() + interval '1 minute', gen_random_uuid(), 1, now())`,
        [id.scope, id.idempotencyKey, FINGERPRINT],
      );

      await store.migrate();

      const columns = await admin.query(
        `SELECT attname FROM pg_attribute WHERE attrelid = '${own}records'::regclass
           AND attname LIKE 'holder%' AND NOT attisdropped ORDER BY attnum`,
      );
      expect(columns.rows).toStrictEqual([{ attname: 'holder_lock' }, { attname: 'holder_epoch' }]);
      const claims = await admin.query(`SELECT pronargs FROM pg_proc WHERE proname = '${own}claim'`);
      expect(claims.rows).toStrictEqual([{ pronargs: 9 }]);
      expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
        state: 'inProgress',
        fingerprint: FINGERPRINT,
      });
    } finally {
      await server().drop(own);
    }
  });

  it('writes no claim stamped with a liveness lock no session holds: it would look dead at once', async () => {
    const store = await openStore();
    const id = newId();
    const unheld = '4611686018427387904';

    await expect(
      server().admin.query(`SELECT * FROM ${prefix}claim($1, $2, $3, $4, $5, false, $6, 100, 1000000)`, [
        id.scope,
        id.idempotencyKey,
        FINGERPRINT,
        randomUUID(),
        LEASE_MS,
        unheld,
      ]),
    ).rejects.toMatchObject({ code: 'SEP01' });

    expect(await rowOf(id)).toBeUndefined();
    expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
  });

  it('answers a claim on its way while every liveness session ends either claimed, and held, or failed closed with nothing written', async () => {
    // Generous statement bound: the claim waits behind its scope's lock on purpose.
    const [holding, other] = await Promise.all([openStore({ statementTimeoutMs: 15_000 }), openStore()]);
    const id = newId(`on-its-way-${randomUUID()}`);
    const before = holding.livenessLock.pids;
    // The scope's lock, as every claim of the scope takes it: the claim below waits for it.
    const lock = await server().admin.connect();
    let claimed: Awaited<ReturnType<PostgresIdempotencyStore['claim']>> | StoreUnavailableError;
    try {
      await lock.query('SELECT pg_advisory_lock(hashtext($1), hashtext($2))', [prefix, id.scope]);
      const claiming = holding.claim(id, FINGERPRINT, LEASE_MS);
      await waitUntil(async () => {
        const { rows } = await server().admin.query(
          "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%claim(%'",
        );
        return rows.length > 0;
      });
      // Every liveness session ends while the claim waits; the claim goes on as they reconnect.
      await server().admin.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [before]);
      await lock.query('SELECT pg_advisory_unlock(hashtext($1), hashtext($2))', [prefix, id.scope]);
      claimed = await claiming.catch((error: unknown) => {
        if (error instanceof StoreUnavailableError) return error;
        throw error;
      });
    } finally {
      lock.release();
    }
    if (claimed instanceof StoreUnavailableError) {
      expect(await rowOf(id)).toBeUndefined();
    } else {
      expect(claimed.state).toBe('claimed');
      expect((await rowOf(id))?.holder_lock).toBe(holding.livenessLock.lock);
      // A terminated backend holds its locks until it has exited, so the claim may have been
      // written beside the ending sessions; until new ones hold the lock, every running claim of
      // the instance looks dead, the gap docs/scaling-out.md states. Held means held once they do.
      await waitUntil(async () => {
        const now = holding.livenessLock.pids;
        return now.length === 2 && now.every((pid) => !before.includes(pid));
      });
      expect(await other.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
        state: 'inProgress',
        fingerprint: FINGERPRINT,
      });
    }
  });

  it.skipIf(needsOwnServer)(
    'judges a claim written before Postgres restarted by its lease alone: its holder’s lock went with the old server',
    async () => {
      const [leaving, staying] = await Promise.all([openStore(), openStore()]);
      const id = newId();
      await claimTicket(leaving, id);

      await server().shutdown();
      await server().restart();
      // The holder is gone too now, and nothing on this server says whether it lived on after the restart.
      await leaving.close();

      // Until the store has reconnected (a claim of another key answers), then the one key once.
      await waitUntil(
        async () =>
          (await staying.claim(newId(), FINGERPRINT, LEASE_MS).catch(() => undefined)) !== undefined,
      );
      expect(await staying.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
        state: 'inProgress',
        fingerprint: FINGERPRINT,
      });
      expect((await rowOf(id))?.left_ms).toBeGreaterThan(LEASE_MS - 60_000);
    },
  );
});

describe.skipIf(!postgres)('kept across restarts', () => {
  it('replays a completed record after the store is closed and opened again', async () => {
    const id = newId();
    const first = await openStore();
    await first.complete(await claimTicket(first, id), RESULT, RETENTION_MS);
    await first.close();

    const reopened = await openStore();

    expect(await reopened.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
  });

  it.skipIf(needsOwnServer)(
    'replays a completed record after Postgres itself is shut down and started again',
    async () => {
      const id = newId();
      const store = await openStore();
      await store.complete(await claimTicket(store, id), RESULT, RETENTION_MS);
      await store.close();

      await server().shutdown();
      await server().restart();

      const reopened = await openStore();
      expect(await reopened.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
    },
  );
});

describe.skipIf(!postgres)(
  'fail closed: an unreachable Postgres never means executing without a record',
  () => {
    it.skipIf(needsOwnServer)(
      'rejects claim and complete with StoreUnavailableError within 2 s while Postgres is down, and recovers by itself',
      async () => {
        const store = await openStore();
        const ticket = await claimTicket(store, newId());
        await server().kill();
        try {
          await expectUnavailableWithin(2_000, () => store.claim(newId(), FINGERPRINT, LEASE_MS));
          await expectUnavailableWithin(2_000, () => store.complete(ticket, RESULT, RETENTION_MS));
          await expectUnavailableWithin(2_000, () => store.renew(ticket, LEASE_MS));
        } finally {
          await server().restart();
        }

        // The same instance, no reconnect call: the pool and the liveness connection heal by themselves.
        await waitUntil(
          async () =>
            (await store.claim(newId(), FINGERPRINT, LEASE_MS).catch(() => undefined)) !== undefined,
        );
        expect((await store.claim(newId(), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      },
    );

    it.skipIf(needsOwnServer)(
      'refuses to connect, within the connect timeout, to a Postgres that is down',
      async () => {
        await server().kill();
        try {
          await expectUnavailableWithin(2_000, () =>
            PostgresIdempotencyStore.connect(server().url, { tablePrefix: prefix, connectTimeoutMs: 500 }),
          );
        } finally {
          await server().restart();
        }
      },
    );

    it('treats a record holding something it cannot read as unavailable, never as free', async () => {
      const store = await openStore();
      const id = newId();
      await server().admin.query(
        `INSERT INTO ${records} (scope, idempotency_key, state, fingerprint, response, expires_at)
         VALUES ($1, $2, 'completed', $3, 'written by something else', now() + interval '1 hour')`,
        [id.scope, id.idempotencyKey, FINGERPRINT],
      );

      await expect(store.claim(id, FINGERPRINT, LEASE_MS)).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(await rowOf(id)).toMatchObject({ state: 'completed' });
    });
  },
);
