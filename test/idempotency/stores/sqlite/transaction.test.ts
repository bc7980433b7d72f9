// The transactions a SQLite store lends: one tool transaction open at a time per store, the next
// waiting its turn until the busy bound and then refused as the store being unavailable; a tool's
// savepoints stay inside the record's transaction, while a failed statement dooms it (nothing the
// tool wrote stands, no statement follows, and the record is left to be written on its own) and
// one that ended refuses every statement; and the server's own reads see one snapshot and refuse
// writes, its own mistakes reaching it as its own errors, the file's failures as the store's.
// Rows are compared with toEqual: node:sqlite (Node 22.13+) answers rows with no prototype.

import { describe, expect, it, onTestFinished } from 'vitest';
import { StoreUnavailableError } from '../../../../packages/idempotency/stores/contract.js';
import { SqliteConnection } from '../../../../packages/idempotency/stores/sqlite/driver.js';
import { configure, migrate, transact } from '../../../../packages/idempotency/stores/sqlite/file.js';
import { ProcessWriteLock } from '../../../../packages/idempotency/stores/sqlite/in-process.js';
import {
  readOwn,
  ToolTransactions,
  writeOwn,
} from '../../../../packages/idempotency/stores/sqlite/transaction.js';
import { tempFolder } from '../../../support/temp-folder.js';

const folder = tempFolder('sqlite-transaction');

/** A file of the store's schema with a table of the tool's, and what its store lends tool transactions. */
function storeFile(busyTimeoutMs = 30_000) {
  const path = folder.newFile();
  const open = () => {
    const db = SqliteConnection.open(path);
    configure(db, { synchronous: 'normal' });
    return db;
  };
  // The tool transactions' connection is theirs to close; the test's own are closed here.
  const connections: SqliteConnection[] = [];
  const connect = () => {
    const db = open();
    connections.push(db);
    return db;
  };
  const db = connect();
  migrate(db);
  db.exec('CREATE TABLE charges (key TEXT PRIMARY KEY, amount INTEGER NOT NULL)');
  const lock = new ProcessWriteLock();
  const tools = new ToolTransactions({ path, lock, busyTimeoutMs, connect: open, checkStillThere: () => {} });
  onTestFinished(() => {
    tools.close();
    for (const connection of connections) connection.close();
  });
  const charges = () => db.all('SELECT key, amount FROM charges ORDER BY key');
  return { path, db, lock, tools, charges, connect };
}

/** Whether `promise` has settled by the time everything already due has run. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe("a tool's transaction", () => {
  it('is one at a time per store: the next claim’s waits for the first to commit with its record', async () => {
    const { tools, charges } = storeFile();
    const first = await tools.begin('claim-1');
    expect(await tools.begin('claim-1')).toBe(first);
    first.run('INSERT INTO charges VALUES (?, ?)', 'k1', 100);
    const second = tools.begin('claim-2');
    expect(await settled(second)).toBe(false);

    expect(tools.commitWith('claim-1', () => 'recorded')).toEqual({ recorded: 'recorded' });
    (await second).run('INSERT INTO charges VALUES (?, ?)', 'k2', 200);
    tools.rollback('claim-2');
    expect(charges()).toEqual([{ key: 'k1', amount: 100 }]);
  });

  it('is refused as the store being unavailable, naming the file, once its turn has not come within the busy bound', async () => {
    const { path, tools, lock } = storeFile(150);
    expect(lock.tryTake()).toBe(true);
    const refused = await tools.begin('claim').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StoreUnavailableError);
    expect(String(refused)).toMatch(
      `${path} stayed locked by another write past the busy timeout (SQLITE_BUSY)`,
    );
    // It took no turn with it: the lock, once given back, is free.
    lock.give();
    expect(lock.tryTake()).toBe(true);
  });

  it('waits for another connection’s write on the file, then begins', async () => {
    const { tools, connect } = storeFile();
    const other = connect();
    other.run('BEGIN IMMEDIATE');
    const begun = tools.begin('claim');
    expect(await settled(begun)).toBe(false);
    other.run('COMMIT');
    (await begun).run('INSERT INTO charges VALUES (?, ?)', 'k', 1);
    expect(tools.commitWith('claim', () => true)).toEqual({ recorded: true });
  });

  it('keeps a tool’s savepoints inside it: what the tool rolls back to is gone, the rest commits with the record', async () => {
    const { tools, charges } = storeFile();
    const tx = await tools.begin('claim');
    tx.run('INSERT INTO charges VALUES (?, ?)', 'kept', 1);
    tx.run('SAVEPOINT attempt');
    tx.run('INSERT INTO charges VALUES (?, ?)', 'undone', 2);
    tx.run('ROLLBACK TO attempt');
    tx.run('RELEASE attempt');
    expect(tools.commitWith('claim', () => true)).toEqual({ recorded: true });
    expect(charges()).toEqual([{ key: 'kept', amount: 1 }]);
  });

  it.each([
    ['a statement SQLite refuses', 'INSERT INTO charges VALUES (?, NULL)'],
    ['a statement SQLite cannot compile', 'INSERT INTO no_such_table VALUES (?)'],
  ])(
    'is doomed by %s: nothing the tool wrote stands, no statement follows, and no record is written in it',
    async (_, bad) => {
      const { tools, charges } = storeFile();
      const tx = await tools.begin('claim');
      tx.run('INSERT INTO charges VALUES (?, ?)', 'before', 1);
      expect(() => tx.run(bad, 'bad')).toThrow();
      expect(() => tx.run('INSERT INTO charges VALUES (?, ?)', 'after', 2)).toThrow(
        'an earlier statement failed in the idempotency record',
      );
      let recorded = false;
      expect(
        tools.commitWith('claim', () => {
          recorded = true;
          return true;
        }),
      ).toBeUndefined();
      expect(recorded).toBe(false);
      expect(charges()).toEqual([]);
      // The store's turn to write was given back.
      expect(await settled(tools.begin('next'))).toBe(true);
    },
  );

  it('refuses every statement once it has ended with its record', async () => {
    const { tools, charges } = storeFile();
    const tx = await tools.begin('claim');
    tools.commitWith('claim', () => true);
    expect(() => tx.run('INSERT INTO charges VALUES (?, ?)', 'late', 1)).toThrow(
      "the idempotency record's transaction has ended: write before returning",
    );
    expect(() => tx.get('SELECT 1')).toThrow('has ended');
    expect(charges()).toEqual([]);
  });
});

describe("the server's own reads and writes", () => {
  it('reads one snapshot, refusing a write with SQLite’s own error rather than as the store’s', () => {
    const { path, db, connect } = storeFile();
    db.run('INSERT INTO charges VALUES (?, ?)', 'k', 1);
    const other = connect();
    const seen = readOwn(path, db, (read) => {
      const before = read.all('SELECT key FROM charges');
      other.run('INSERT INTO charges VALUES (?, ?)', 'meanwhile', 2);
      return [before, read.all('SELECT key FROM charges')];
    });
    expect(seen).toEqual([[{ key: 'k' }], [{ key: 'k' }]]);
    const write = (() => {
      try {
        readOwn(path, db, (read) => read.run('DELETE FROM charges'));
      } catch (error) {
        return error;
      }
    })();
    expect(write).toBeInstanceOf(Error);
    expect(write).not.toBeInstanceOf(StoreUnavailableError);
    // The connection writes again afterwards, and nothing was deleted.
    expect(db.run('UPDATE charges SET amount = amount + 1')).toBe(2);
  });

  it('writes in a transaction of its own: a locked file is the store’s failure, a mistake of the server’s is its own', async () => {
    const { path, db, connect } = storeFile();
    const other = connect();
    other.exec('PRAGMA busy_timeout = 0');
    const write = (work: (conn: SqliteConnection) => number) =>
      Promise.resolve().then(() => transact(other, work));
    db.run('BEGIN IMMEDIATE');
    const locked = await writeOwn(path, write, (w) => w.run("INSERT INTO charges VALUES ('x', 1)")).catch(
      (e: unknown) => e,
    );
    expect(locked).toBeInstanceOf(StoreUnavailableError);
    expect(String(locked)).toMatch(`${path} stayed locked by another write`);
    db.run('ROLLBACK');

    const mistake = await writeOwn(path, write, (w) => w.run('INSERT INTO charges VALUES (1)')).catch(
      (e: unknown) => e,
    );
    expect(mistake).toBeInstanceOf(Error);
    expect(mistake).not.toBeInstanceOf(StoreUnavailableError);
    expect(await writeOwn(path, write, (w) => w.run("INSERT INTO charges VALUES ('x', 1)"))).toBe(1);
  });
});
