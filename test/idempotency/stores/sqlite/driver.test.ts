// The SQLite store's one face over two bindings (node:sqlite on Node 22.13+, better-sqlite3 on Node
// 20): whichever this Node loads, a connection runs statements and answers rows and changes alike,
// says whether a transaction is open, and each failure reads as SQLite's primary result code
// (`SQLITE_BUSY`, never the extended `SQLITE_BUSY_SNAPSHOT`), which is what the store decides on.
// These run on the binding this Node has: the Node 24 line runs them on node:sqlite.
// Rows are compared with toEqual: node:sqlite (Node 22.13+) answers rows with no prototype.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  SqliteConnection,
  sqliteCodeOf,
  sqliteMessageOf,
} from '../../../../packages/idempotency/stores/sqlite/driver.js';
import { tempFolder } from '../../../support/temp-folder.js';

const { dir, newFile } = tempFolder('sqlite-driver');

/** A connection to `file`, closed as its test ends. */
function connect(file: string): SqliteConnection {
  const db = SqliteConnection.open(file);
  onTestFinished(() => db.close());
  return db;
}

/** The error `work` throws. */
function thrownBy(work: () => unknown): unknown {
  try {
    work();
  } catch (error) {
    return error;
  }
  throw new Error('it did not throw');
}

describe('a connection, on either binding', () => {
  it('keeps every value a parameter may be, byte for byte, and counts the rows a statement changed', () => {
    const db = connect(newFile());
    // No fsync per commit: what is kept is the subject here, not its durability.
    db.exec('PRAGMA synchronous = OFF');
    db.exec('CREATE TABLE t (k INTEGER PRIMARY KEY, text TEXT, big INTEGER, blob BLOB, absent TEXT)');
    const big = 2n ** 53n + 1n;
    fc.assert(
      fc.property(fc.string(), fc.uint8Array({ maxLength: 64 }), (text, blob) => {
        db.run('DELETE FROM t');
        expect(db.run('INSERT INTO t VALUES (1, ?, ?, ?, ?)', text, big, blob, null)).toBe(1);
        const row = db.get('SELECT text, CAST(big AS TEXT) AS big, hex(blob) AS blob, absent FROM t');
        expect(row).toEqual({
          text,
          big: big.toString(),
          blob: Buffer.from(blob).toString('hex').toUpperCase(),
          absent: null,
        });
      }),
      { numRuns: 100 },
    );
    db.run('INSERT INTO t (k) VALUES (2), (3)');
    expect(db.run('UPDATE t SET text = ?', 'x')).toBe(3);
    expect(db.all('SELECT k FROM t ORDER BY k')).toEqual([{ k: 1 }, { k: 2 }, { k: 3 }]);
    expect(db.get('SELECT k FROM t WHERE k = 9')).toBeUndefined();
  });

  it('says whether a transaction is open, as SQLite does, even after SQLite ended one itself', () => {
    const db = connect(newFile());
    db.exec('CREATE TABLE t (k INTEGER PRIMARY KEY)');
    // node:sqlite before Node 22.16 does not say: undefined, never a wrong answer.
    if (db.inTransaction === undefined) return;
    expect(db.inTransaction).toBe(false);
    db.run('BEGIN IMMEDIATE');
    expect(db.inTransaction).toBe(true);
    db.run('COMMIT');
    expect(db.inTransaction).toBe(false);
    // A statement that fails with ON CONFLICT ROLLBACK ends the transaction under its caller.
    db.run('BEGIN');
    db.run('INSERT INTO t VALUES (1)');
    expect(() => db.run('INSERT OR ROLLBACK INTO t VALUES (1)')).toThrow();
    expect(db.inTransaction).toBe(false);
  });

  it('shares the file with another connection: what one commits the other reads', () => {
    const file = newFile();
    const [a, b] = [connect(file), connect(file)];
    a.exec('CREATE TABLE t (v TEXT)');
    a.run('INSERT INTO t VALUES (?)', 'committed');
    expect(b.get('SELECT v FROM t')).toEqual({ v: 'committed' });
  });
});

describe("SQLite's failures, in its primary result codes", () => {
  it('names a broken constraint SQLITE_CONSTRAINT, whatever the extended code', () => {
    const db = connect(newFile());
    db.exec('CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL, CHECK (k > 0))');
    db.run('INSERT INTO t VALUES (1, ?)', 'a');
    for (const sql of [
      'INSERT INTO t VALUES (1, 1)',
      'INSERT INTO t VALUES (2, NULL)',
      'INSERT INTO t VALUES (-1, 1)',
    ])
      expect(sqliteCodeOf(thrownBy(() => db.run(sql))), sql).toBe('SQLITE_CONSTRAINT');
  });

  it('names a write behind another connection’s write lock SQLITE_BUSY, and an SQL mistake SQLITE_ERROR', () => {
    const file = newFile();
    const [a, b] = [connect(file), connect(file)];
    a.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 0; CREATE TABLE t (v)');
    b.exec('PRAGMA busy_timeout = 0');
    a.run('BEGIN IMMEDIATE');
    expect(sqliteCodeOf(thrownBy(() => b.run('BEGIN IMMEDIATE')))).toBe('SQLITE_BUSY');
    a.run('ROLLBACK');
    expect(() => b.run('BEGIN IMMEDIATE')).not.toThrow();
    b.run('ROLLBACK');
    const mistake = thrownBy(() => b.run('SELEC 1'));
    expect(sqliteCodeOf(mistake)).toBe('SQLITE_ERROR');
    // The statement's own words, on either binding: what the operator needs to find it.
    expect(sqliteMessageOf(mistake)).toBe('near "SELEC": syntax error');
  });

  it('names a file that is no database SQLITE_NOTADB, and a folder that is not there SQLITE_CANTOPEN', () => {
    const notes = newFile();
    writeFileSync(notes, 'my notes\n'.repeat(1_000));
    // A binding may open the file lazily: the first statement reads its header.
    const notADatabase = thrownBy(() => connect(notes).get('SELECT count(*) FROM sqlite_schema'));
    expect(sqliteCodeOf(notADatabase)).toBe('SQLITE_NOTADB');
    expect(sqliteMessageOf(notADatabase)).toBe('file is not a database');

    const nowhere = join(dir, 'no-such-folder', 'records.sqlite');
    const cannotOpen = thrownBy(() => connect(nowhere));
    expect(sqliteCodeOf(cannotOpen)).toBe('SQLITE_CANTOPEN');
    expect(sqliteMessageOf(cannotOpen)).not.toBe('');
  });

  it('reads an extended code as the primary one in its low byte, from either binding’s error', () => {
    const primaries = [
      'SQLITE_BUSY',
      'SQLITE_READONLY',
      'SQLITE_IOERR',
      'SQLITE_CORRUPT',
      'SQLITE_CONSTRAINT',
    ];
    const numbers: Record<string, number> = {
      SQLITE_BUSY: 5,
      SQLITE_READONLY: 8,
      SQLITE_IOERR: 10,
      SQLITE_CORRUPT: 11,
      SQLITE_CONSTRAINT: 19,
    };
    fc.assert(
      fc.property(
        fc.constantFrom(...primaries),
        fc.nat(0xff),
        fc.stringMatching(/^[A-Z]{0,12}$/),
        (name, extended, suffix) => {
          // node:sqlite's error carries the extended number, better-sqlite3's the extended name.
          const number = (numbers[name] ?? 0) | (extended << 8);
          expect(sqliteCodeOf(Object.assign(new Error('x'), { errcode: number }))).toBe(name);
          const code = suffix === '' ? name : `${name}_${suffix}`;
          expect(sqliteCodeOf(Object.assign(new Error('x'), { code }))).toBe(name);
        },
      ),
    );
  });

  it('answers no code for an error that is not SQLite’s', () => {
    for (const error of [
      new Error('ENOENT'),
      Object.assign(new Error('x'), { code: 'ENOENT' }),
      'text',
      null,
      undefined,
    ])
      expect(sqliteCodeOf(error)).toBeUndefined();
  });
});
