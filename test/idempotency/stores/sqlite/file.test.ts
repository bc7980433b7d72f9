// The SQLite store's file: a file of any schema this store wrote is brought to the current one
// with its records and the server's own tables kept, and one of a later schema is refused
// untouched; a file that cannot be put in WAL mode is refused at open; a write waits out another
// connection's lock until its bound, and no longer; and each of SQLite's failures reaches the
// operator as StoreUnavailableError naming the file and what to do.
// Rows are compared with toEqual: node:sqlite (Node 22.13+) answers rows with no prototype.

import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, onTestFinished } from 'vitest';
import { StoreUnavailableError } from '../../../../packages/idempotency/stores/contract.js';
import { SqliteConnection, sqliteCodeOf } from '../../../../packages/idempotency/stores/sqlite/driver.js';
import {
  configure,
  FILE_FAILURES,
  migrate,
  transact,
  unavailable,
  untilNotBusy,
} from '../../../../packages/idempotency/stores/sqlite/file.js';
import { BusyError } from '../../../../packages/idempotency/stores/sqlite/in-process.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../../../packages/idempotency/stores/sqlite/sql.js';
import { tempFolder } from '../../../support/temp-folder.js';

const folder = tempFolder('sqlite-file');
const { dir } = folder;

/** A new file in the test's folder, and `count` connections to it, each closed as its test ends. */
function newFile(count = 1): { path: string; dbs: SqliteConnection[] } {
  const path = folder.newFile();
  const dbs = Array.from({ length: count }, () => SqliteConnection.open(path));
  onTestFinished(() => {
    for (const db of dbs) db.close();
  });
  return { path, dbs };
}

const versionOf = (db: SqliteConnection) => db.get('SELECT version FROM sep3182_idem_schema')?.version;

/** A file as the store at schema `version` left it: its steps run, a record and a table of the server's own. */
function fileAtSchema(version: number): SqliteConnection {
  const [db] = newFile().dbs;
  if (!db) throw new Error('no connection');
  db.exec('PRAGMA synchronous = OFF');
  db.exec("CREATE TABLE ledger (entry TEXT); INSERT INTO ledger VALUES ('the server''s own')");
  for (const step of MIGRATIONS.slice(0, version)) db.exec(step);
  if (version > 0) {
    db.run('UPDATE sep3182_idem_schema SET version = ?', version);
    db.run(
      `INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, response, bytes, expires_at)
         VALUES ('alice', 'k1', 'completed', 'fp', '{"ok":true}', 11, 4102444800000)`,
    );
  }
  return db;
}

describe('the schema, at open', () => {
  it('brings a file of every schema this store wrote to the current one, its records and the server’s tables kept', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: SCHEMA_VERSION }), (version) => {
        const db = fileAtSchema(version);
        migrate(db);
        // Opening it again changes nothing.
        migrate(db);
        expect(versionOf(db)).toBe(SCHEMA_VERSION);
        expect(db.all('SELECT entry FROM ledger')).toEqual([{ entry: "the server's own" }]);
        expect(db.all('SELECT scope, idempotency_key, response FROM sep3182_idem_records')).toEqual(
          version > 0 ? [{ scope: 'alice', idempotency_key: 'k1', response: '{"ok":true}' }] : [],
        );
        // Every column of the current schema is there to write.
        db.run(
          `INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, expires_at, token,
             holder_pid, holder_started, holder_host, holder_lease_until, resumed_until)
             VALUES ('bob', 'k2', 'inProgress', 'fp', 1, 't', 1, '1', 'h', 1, NULL)`,
        );
      }),
      { numRuns: 20 },
    );
  });

  it('refuses a file of any later schema, and leaves it as it was', () => {
    fc.assert(
      fc.property(fc.integer({ min: SCHEMA_VERSION + 1, max: 1_000 }), (version) => {
        const db = fileAtSchema(SCHEMA_VERSION);
        db.run('UPDATE sep3182_idem_schema SET version = ?', version);
        expect(() => migrate(db)).toThrow(
          `it holds idempotency records of schema version ${version}; this store reads version ${SCHEMA_VERSION}`,
        );
        expect(versionOf(db)).toBe(version);
        expect(db.all('SELECT idempotency_key FROM sep3182_idem_records')).toEqual([
          { idempotency_key: 'k1' },
        ]);
        expect(db.inTransaction).not.toBe(true);
      }),
      { numRuns: 20 },
    );
  });
});

describe('the settings every connection runs with', () => {
  it('refuses a database SQLite will not put in WAL mode, saying which mode it stayed in', () => {
    // An in-memory database has no WAL, as a file on some network shares has none.
    const db = SqliteConnection.open(':memory:');
    onTestFinished(() => db.close());
    expect(() => configure(db, { synchronous: 'normal' })).toThrow(
      'SQLite would not put it in WAL mode (it stayed memory): is it on a network share?',
    );
  });

  it('bounds the file by its pages: a write past the bound fails, read as the file being full', () => {
    const {
      path: file,
      dbs: [db],
    } = newFile();
    if (!db) throw new Error('no connection');
    configure(db, { synchronous: 'normal', maxPages: 8 });
    migrate(db);
    const error = (() => {
      try {
        transact(db, () =>
          db.run(
            'INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, response, expires_at) VALUES (?, ?, ?, ?, ?, ?)',
            's',
            'k',
            'completed',
            'fp',
            'x'.repeat(64 * 1024),
            1,
          ),
        );
      } catch (caught) {
        return caught;
      }
    })();
    expect(sqliteCodeOf(error)).toBe('SQLITE_FULL');
    const said = unavailable(file, error);
    expect(said).toBeInstanceOf(StoreUnavailableError);
    expect(said.message).toMatch(`${file} is full (`);
    expect(said.message).toMatch('): free disk space, or raise its size bound');
    // Nothing of the failed write stands, and the file takes a write that fits.
    expect(db.get('SELECT count(*) AS n FROM sep3182_idem_records')).toEqual({ n: 0 });
    transact(db, () =>
      db.run(
        "INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, expires_at) VALUES ('s', 'k', 'completed', 'fp', 1)",
      ),
    );
  });
});

describe("a write behind another connection's lock", () => {
  function twoConnections() {
    const [holder, waiter] = newFile(2).dbs;
    if (!holder || !waiter) throw new Error('no connection');
    for (const db of [holder, waiter]) configure(db, { synchronous: 'normal' });
    migrate(holder);
    holder.run('BEGIN IMMEDIATE');
    return { holder, waiter };
  }

  it('is tried again until the lock is free, then goes through', async () => {
    const { holder, waiter } = twoConnections();
    let tries = 0;
    const done = await untilNotBusy(performance.now() + 30_000, () => {
      tries += 1;
      // The holder commits once the waiter has found the file locked twice.
      if (tries === 3) holder.run('COMMIT');
      return transact(waiter, () => waiter.run("INSERT INTO sep3182_idem_usage VALUES ('s', 1, 0, 0)"));
    });
    expect(done).toBe(1);
    expect(tries).toBe(3);
  });

  it('fails with SQLITE_BUSY once its bound has passed, not before', async () => {
    const { waiter } = twoConnections();
    const started = performance.now();
    const failure = await untilNotBusy(started + 200, () => waiter.run('BEGIN IMMEDIATE')).catch((e) => e);
    expect(performance.now() - started).toBeGreaterThanOrEqual(199);
    expect(sqliteCodeOf(failure)).toBe('SQLITE_BUSY');
    expect(unavailable('records.sqlite', failure).message).toMatch(
      'records.sqlite stayed locked by another write past the busy timeout (',
    );
  });

  it('is not tried again when it fails for any other reason', async () => {
    const { waiter } = twoConnections();
    let tries = 0;
    const failure = await untilNotBusy(performance.now() + 30_000, () => {
      tries += 1;
      return waiter.run('INSERT INTO no_such_table VALUES (1)');
    }).catch((e) => e);
    expect(tries).toBe(1);
    expect(sqliteCodeOf(failure)).toBe('SQLITE_ERROR');
  });
});

describe("SQLite's failures, in the operator's words", () => {
  it('names the file, in SQLite’s words, for every failure of the file itself', () => {
    fc.assert(
      fc.property(fc.constantFrom(...FILE_FAILURES), fc.stringMatching(/^[a-z ]{1,20}$/), (code, said) => {
        const path = join(dir, 'records.sqlite');
        const error = unavailable(path, Object.assign(new Error(said), { code }));
        expect(error).toBeInstanceOf(StoreUnavailableError);
        expect(error.message).toMatch(/^idempotency store unavailable: /);
        expect(error.message).toMatch(path);
        expect(error.message).toMatch(`(${said})`);
      }),
    );
  });

  it('says the lock was waited for past its bound when the process’s own turn never came', () => {
    expect(unavailable('records.sqlite', new BusyError()).message).toBe(
      'idempotency store unavailable: records.sqlite stayed locked by another write past the busy timeout (SQLITE_BUSY)',
    );
  });

  it('names a folder that is not there, and asks whether the process may create files in it', () => {
    const path = join(dir, 'no-such-folder', 'records.sqlite');
    const error = (() => {
      try {
        SqliteConnection.open(path);
      } catch (caught) {
        return caught;
      }
    })();
    expect(unavailable(path, error).message).toMatch(
      new RegExp(
        `cannot open ${path} \\(.+\\): is its folder there, and may this process create files in it\\?$`,
      ),
    );
  });
});
