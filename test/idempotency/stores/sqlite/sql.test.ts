// The SQLite store's statements, run on a real file against a model of their rules: a statement
// that settles a claim changes the row only while it holds that exact live claim (live by the wall
// clock or by its machine's monotonic clock); a caller's prune deletes exactly its expired records,
// never the key being claimed, nor the claim of a holder on this machine whose monotonic lease
// still runs; and the sweep, SWEEP_ROWS records at a time, deletes every expired record of the file
// in one round and keeps every live one.
// Rows are compared with toEqual: node:sqlite (Node 22.13+) answers rows with no prototype.

import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, onTestFinished } from 'vitest';
import { SqliteConnection } from '../../../../packages/idempotency/stores/sqlite/driver.js';
import { MIGRATIONS, SQL, SWEEP_ROWS } from '../../../../packages/idempotency/stores/sqlite/sql.js';
import { tempFolder } from '../../../support/temp-folder.js';

const { dir } = tempFolder('sqlite-sql');

/** A file of the current schema, for one test; no fsync per commit, since durability is not the subject. */
function schemaFile(name: string): SqliteConnection {
  const db = SqliteConnection.open(join(dir, `${name}.sqlite`));
  onTestFinished(() => db.close());
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF');
  for (const step of MIGRATIONS) db.exec(step);
  return db;
}

type State = 'inProgress' | 'awaitingInput' | 'completed';

interface Row {
  key: string;
  state: State;
  token: string | null;
  expiresAt: number;
  host: string | null;
  /** The lease on the holder's monotonic clock. */
  leaseUntil: number | null;
}

function insert(db: SqliteConnection, scope: string, row: Row): void {
  db.run(
    `INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, response, bytes, expires_at, token,
       holder_pid, holder_started, holder_host, holder_lease_until, resumed_until)
       VALUES (?, ?, ?, 'fp', '{}', 2, ?, ?, 1, '1', ?, ?, 50)`,
    scope,
    row.key,
    row.state,
    row.expiresAt,
    row.token,
    row.host,
    row.leaseUntil,
  );
}

const time = fc.integer({ min: 0, max: 6 });
const row = (key: string): fc.Arbitrary<Row> =>
  fc.record({
    key: fc.constant(key),
    state: fc.constantFrom<State>('inProgress', 'awaitingInput', 'completed'),
    token: fc.constantFrom('mine', 'another', null),
    expiresAt: time,
    host: fc.constantFrom('this-machine', 'another-machine', null),
    leaseUntil: fc.option(time),
  });
/** When a statement runs: the wall clock, and this machine's monotonic one (null where it has none). */
const clocks = fc.record({ now: time, monotonic: fc.option(time) });

/** Whether `a` is past `b`, as SQL compares them: never when either is missing. */
const past = (a: number | null, b: number | null) => a !== null && b !== null && a > b;

describe("a claim's statements change its record only while they hold that exact live claim", () => {
  // ? scope, key, token, now, monotonic after each statement's own parameters.
  const statements: Array<[string, string, (string | number | null)[]]> = [
    ['mine', SQL.mine, []],
    ['settle', SQL.settle, ['completed', '{"r":1}', 7, 100]],
    ['markFull', SQL.markFull, [100]],
    ['release', SQL.release, []],
    ['putBack', SQL.putBack, []],
    ['renew', SQL.renew, [100, 1, '1', 'this-machine', 100]],
  ];

  it.each(statements)('%s', (name, sql, params) => {
    const db = schemaFile(`mine-${name}`);
    fc.assert(
      fc.property(row('k'), clocks, (held, { now, monotonic }) => {
        db.run('DELETE FROM sep3182_idem_records');
        insert(db, 's', held);
        const live =
          held.state === 'inProgress' &&
          held.token === 'mine' &&
          (held.expiresAt > now || past(held.leaseUntil, monotonic));
        const args = [...params, 's', 'k', 'mine', now, monotonic];
        const changed = name === 'mine' ? db.all(sql, ...args).length : db.run(sql, ...args);
        expect(changed).toBe(live ? 1 : 0);
      }),
      { numRuns: 300 },
    );
  });
});

/** Whether a record is gone at `now`: expired, but for the claim of a live lease on this machine's monotonic clock. */
const expiredRow = (row: Row, now: number, monotonic: number | null) =>
  row.expiresAt <= now &&
  !(row.state === 'inProgress' && row.host === 'this-machine' && past(row.leaseUntil, monotonic));

describe("a caller's prune", () => {
  it("deletes exactly its expired records: never the key it claims, another caller's, or a live monotonic lease", () => {
    const db = schemaFile('prune');
    const keys = ['k0', 'k1', 'k2', 'k3', 'k4', 'k5'];
    fc.assert(
      fc.property(
        fc.tuple(...keys.map(row)),
        fc.tuple(...keys.map(row)),
        clocks,
        (mine, theirs, { now, monotonic }) => {
          db.run('DELETE FROM sep3182_idem_records');
          for (const r of mine) insert(db, 'alice', r);
          for (const r of theirs) insert(db, 'bob', r);
          db.run(SQL.pruneScope, 'alice', 'k0', now, 'this-machine', monotonic);
          const kept = db.all(
            'SELECT scope, idempotency_key AS key FROM sep3182_idem_records ORDER BY scope, key',
          );
          expect(kept).toEqual([
            ...mine
              .filter((r) => r.key === 'k0' || !expiredRow(r, now, monotonic))
              .map((r) => ({ scope: 'alice', key: r.key })),
            ...theirs.map((r) => ({ scope: 'bob', key: r.key })),
          ]);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('the sweep', () => {
  it(`deletes every expired record of the file in one round, ${SWEEP_ROWS} records at a time, and keeps every live one`, () => {
    const db = schemaFile('sweep');
    const record = fc.record({ scope: fc.constantFrom('a', 'b', 'c'), row: row('') });
    fc.assert(
      fc.property(
        fc.array(record, { maxLength: 3 * SWEEP_ROWS, size: 'max' }),
        clocks,
        (records, { now, monotonic }) => {
          db.run('DELETE FROM sep3182_idem_records');
          db.run('BEGIN');
          for (const [i, { scope, row }] of records.entries()) insert(db, scope, { ...row, key: `k${i}` });
          db.run('COMMIT');
          // As the store sweeps: the expired of the next SWEEP_ROWS records, then on from the last.
          let cursor: [string, string] = ['', ''];
          let sweeps = 0;
          do {
            sweeps += 1;
            const expired = db.all(SQL.sweep, ...cursor, now, 'this-machine', monotonic);
            expect(expired.length).toBeLessThanOrEqual(SWEEP_ROWS);
            const last = db.get(SQL.sweptTo, ...cursor);
            cursor = last ? [String(last.scope), String(last.idempotency_key)] : ['', ''];
            for (const gone of expired)
              db.run(
                SQL.sweepOne,
                String(gone.scope),
                String(gone.idempotency_key),
                now,
                'this-machine',
                monotonic,
              );
          } while (cursor[0] !== '');
          expect(sweeps).toBeLessThanOrEqual(Math.floor(records.length / SWEEP_ROWS) + 1);
          const left = db.all('SELECT idempotency_key AS key FROM sep3182_idem_records');
          const live = records.flatMap(({ row }, i) => (expiredRow(row, now, monotonic) ? [] : [`k${i}`]));
          expect(left.map((r) => String(r.key)).sort()).toEqual(live.sort());
        },
      ),
      // Not shrunk: a failing file of hundreds of records would be rewritten thousands of times.
      { numRuns: 25, endOnFailure: true },
    );
  });
});
