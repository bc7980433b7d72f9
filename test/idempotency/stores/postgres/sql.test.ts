// The Postgres store's SQL, sent as the store sends it to a real Postgres: a table prefix is taken
// only when Postgres keeps it whole in every name; the schema, run again by each instance that
// starts, keeps every record; a holder is alive while a session holds its lock, and a claim written
// before this server started is judged by its lease alone; a settle of a claim that lost its key
// changes nothing, or raises in a tool's transaction; a session commits at least to this server's
// disk, whatever its role asked; and one walk of the reaper deletes every expired record and
// uncounts it, keeping every live one.

import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueTablePrefix } from '../../../../demo/processes/postgres-server.js';
import {
  CLAIM_LOST,
  checkedTablePrefix,
  migrationOf,
  SESSION_SETTINGS,
  statementsOf,
} from '../../../../packages/idempotency/stores/postgres/sql.js';
import { postgresForFile } from '../../../support/backends.js';

const postgres = await postgresForFile();
const prefix = uniqueTablePrefix('sql');
/** The longest prefix there may be. */
const longest = `t_${randomUUID().replaceAll('-', '')}`.padEnd(40, '_').slice(0, 40);

/** A session of its own, ended after the file. */
let session: pg.Client;
/** A liveness lock some session holds, as a running instance's sessions hold its own. */
const heldLock = '5000000000000000001';

function admin(): pg.Pool {
  if (!postgres) throw new Error('unreachable: these tests are skipped without Postgres');
  return postgres.admin;
}

beforeAll(async () => {
  if (!postgres) return;
  await admin().query(migrationOf(prefix));
  session = new pg.Client({ connectionString: postgres.url });
  await session.connect();
  await session.query('SELECT pg_advisory_lock_shared($1::bigint)', [heldLock]);
});

afterAll(async () => {
  await session?.end();
  await postgres?.drop(prefix);
  await postgres?.drop(longest);
});

describe('a table prefix', () => {
  it('is taken exactly when it is 1 to 40 lower case letters, digits and _, not starting with a digit', () => {
    const character = fc.constantFrom('a', 'z', '_', '0', '9', 'A', '-', ' ', '"', ';', 'é');
    fc.assert(
      fc.property(fc.string({ unit: character, maxLength: 45 }), (candidate) => {
        const plain = [...candidate].every((c) => /[a-z0-9_]/.test(c)) && !/[0-9]/.test(candidate[0] ?? '0');
        const fits = candidate.length >= 1 && candidate.length <= 40;
        if (plain && fits) expect(checkedTablePrefix(candidate)).toBe(candidate);
        else
          expect(() => checkedTablePrefix(candidate)).toThrow(
            new RangeError(
              `a Postgres table prefix must be lower case letters, digits and _ (at most 40): "${candidate}"`,
            ),
          );
      }),
    );
  });

  it.skipIf(!postgres)(
    'of the longest length makes a schema whose every name Postgres keeps whole',
    async () => {
      await admin().query(migrationOf(longest));
      const { rows } = await admin().query<{ name: string }>(
        `SELECT relname AS name FROM pg_class WHERE relname LIKE $1 || '%' AND relkind = 'r'
       UNION SELECT proname FROM pg_proc WHERE proname LIKE $1 || '%' ORDER BY 1`,
        [longest],
      );
      expect(rows.map((r) => r.name.slice(longest.length))).toStrictEqual([
        'claim',
        'count',
        'holder_alive',
        'prune',
        'reap',
        'records',
        'release',
        'settle',
        'usage',
      ]);
    },
  );
});

describe.skipIf(!postgres)('the schema, run by every instance that starts', () => {
  it('keeps every record and its usage when run again', async () => {
    const scope = randomUUID();
    await admin().query(
      `INSERT INTO ${prefix}records (scope, idempotency_key, state, fingerprint, response, bytes, expires_at)
         VALUES ($1, 'k', 'completed', 'fp', '{}', 2, now() + interval '1 hour')`,
      [scope],
    );
    await admin().query(`SELECT ${prefix}count($1, 1, 2)`, [scope]);
    await admin().query(migrationOf(prefix));
    const { rows } = await admin().query(
      `SELECT r.response, u.records, u.bytes FROM ${prefix}records r JOIN ${prefix}usage u USING (scope) WHERE scope = $1`,
      [scope],
    );
    expect(rows).toStrictEqual([{ response: '{}', records: '1', bytes: '2' }]);
  });
});

describe.skipIf(!postgres)("a claim's holder", () => {
  const aliveOf = async (lock: string | null, epoch: string) =>
    (await admin().query<{ alive: boolean }>(`SELECT ${prefix}holder_alive($1, ${epoch}) AS alive`, [lock]))
      .rows[0]?.alive;
  const thisServer = 'pg_postmaster_start_time()';

  it('is alive while some session holds its lock, and not once none does', async () => {
    expect(await aliveOf(heldLock, thisServer)).toBe(true);
    const released = '5000000000000000002';
    expect(await aliveOf(released, thisServer)).toBe(false);
  });

  it('is alive, whatever became of its lock, when the claim was written before this server started or names no lock', async () => {
    const released = '5000000000000000003';
    expect(await aliveOf(released, "pg_postmaster_start_time() - interval '1 second'")).toBe(true);
    expect(await aliveOf(null, thisServer)).toBe(true);
  });
});

describe.skipIf(!postgres)('a settle of a claim that lost its key', () => {
  it('changes nothing, and raises CLAIM_LOST in a tool’s transaction', async () => {
    const sql = statementsOf(prefix);
    const [scope, key, token] = [randomUUID(), 'k', randomUUID()];
    const claimed = await admin().query(sql.claim, [
      scope,
      key,
      'fp',
      token,
      60_000,
      false,
      heldLock,
      10,
      1_000_000,
    ]);
    expect(claimed.rows).toStrictEqual([{ answer: 'claimed', fingerprint: null, response: null }]);
    const someoneElse = randomUUID();
    const settle = [scope, key, someoneElse, 'completed', '{"x":1}', 7, 60_000];
    expect((await admin().query(sql.settle, settle)).rows).toStrictEqual([{ settled: false }]);
    await expect(admin().query(sql.settleOrFail, settle)).rejects.toMatchObject({ code: CLAIM_LOST });
    const { rows } = await admin().query(`SELECT state, token FROM ${prefix}records WHERE scope = $1`, [
      scope,
    ]);
    expect(rows).toStrictEqual([{ state: 'inProgress', token }]);
    // Its own token settles it.
    const own = [scope, key, token, 'completed', '{"x":1}', 7, 60_000];
    expect((await admin().query(sql.settleOrFail, own)).rows).toStrictEqual([{ settled: true }]);
  });
});

describe.skipIf(!postgres)("a pool session's settings", () => {
  it('commit at least to this server’s disk, whatever the role or database asked, and bound each statement', async () => {
    const client = new pg.Client({ connectionString: postgres?.url });
    await client.connect();
    try {
      for (const asked of ['off', 'local', 'remote_write', 'on', 'remote_apply']) {
        await client.query(`SET synchronous_commit = ${asked}`);
        await client.query(SESSION_SETTINGS, ['1234']);
        const { rows } = await client.query(
          "SELECT current_setting('synchronous_commit') AS commit, current_setting('statement_timeout') AS timeout",
        );
        expect(rows[0], asked).toStrictEqual({
          commit: asked === 'remote_apply' ? 'remote_apply' : 'on',
          timeout: '1234ms',
        });
      }
    } finally {
      await client.end();
    }
  });
});

describe.skipIf(!postgres)('the reaper', () => {
  it('deletes every expired record in one walk of the table, uncounting each, and keeps the live ones', async () => {
    const sql = statementsOf(prefix);
    const records = fc.array(
      fc.record({ scope: fc.constantFrom('a', 'b', 'c'), expired: fc.boolean(), bytes: fc.nat(50) }),
      {
        maxLength: 400,
        size: 'max',
      },
    );
    await fc.assert(
      fc.asyncProperty(records, fc.integer({ min: 1, max: 4 }), async (rows, blocks) => {
        await admin().query(sql.clear);
        const run = randomUUID();
        for (const [i, row] of rows.entries()) {
          const scope = `${run}-${row.scope}`;
          await admin().query(
            `INSERT INTO ${prefix}records (scope, idempotency_key, state, fingerprint, bytes, expires_at)
               VALUES ($1, $2, 'completed', 'fp', $3, now() + ($4 || ' hours')::interval)`,
            [scope, `k${i}`, row.bytes, row.expired ? '-1' : '1'],
          );
          await admin().query(`SELECT ${prefix}count($1, 1, $2)`, [scope, row.bytes]);
        }
        let [reaped, next] = [0, 0];
        do {
          const { rows: answer } = await admin().query(sql.reap, [next, blocks]);
          reaped += Number(answer[0]?.reaped);
          next = Number(answer[0]?.next_block);
        } while (next !== 0);
        const live = rows.filter((r) => !r.expired);
        expect(reaped).toBe(rows.length - live.length);
        const usage = await admin().query(
          `SELECT scope, records::int, bytes::int FROM ${prefix}usage WHERE scope LIKE $1 ORDER BY scope`,
          [`${run}-%`],
        );
        const expected = ['a', 'b', 'c'].flatMap((s) => {
          const mine = live.filter((r) => r.scope === s);
          return mine.length === 0
            ? []
            : [
                {
                  scope: `${run}-${s}`,
                  records: mine.length,
                  bytes: mine.reduce((sum, r) => sum + r.bytes, 0),
                },
              ];
        });
        expect(usage.rows).toStrictEqual(expected);
      }),
      { numRuns: 8, endOnFailure: true },
    );
  });
});
