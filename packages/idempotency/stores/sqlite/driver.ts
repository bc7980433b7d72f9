// --- Which SQLite binding opens the file, and one face for both ---
//
// Node has two ways to SQLite, and neither runs everywhere this package does (Node ≥ 20.19):
//   - `node:sqlite`, built into Node 22.13+ (unflagged; 22.5–22.12 behind --experimental-sqlite):
//     nothing to install, nothing to compile. Node 20 has none.
//   - `better-sqlite3` (12.x), a native addon compiled at install (with python3, make and a C++
//     compiler). Its binary is built for one Node ABI: one compiled under Node 20 does not load
//     under Node 24 ("was compiled against a different Node.js version").
// On the statements the store runs, the two cost the same (docs/cost.md): the file's locks and WAL
// writes (system calls) are the cost, not the binding. So the binding is chosen by what the
// runtime has, never by speed:
// `node:sqlite` wherever Node has it, and `better-sqlite3` only where it does not (Node 20),
// loaded only then. It is an optional peer dependency: a server on Node 22.13+ installs nothing
// for this store, a server on Node 20 installs `better-sqlite3@12` (13.x needs Node 22), and a
// server that uses another store installs nothing at all. One install serves both lines: Node 20
// loads the addon, Node 24 never touches it.
//
// Both bindings are synchronous and have the same shape (`new Database(path)`, `prepare(sql)`
// with `run`, `get` and `all`, `exec`, `close`), so the face below is thin: prepared statements
// cached by their text, and each binding's error turned into SQLite's own result code name
// (`SQLITE_BUSY`, `SQLITE_FULL`…), which is what the store decides on.
// Internal to the package, like ../support.ts.

import { createRequire } from 'node:module';

/** The binding a connection runs on. */
export type SqliteDriverName = 'node:sqlite' | 'better-sqlite3';

/** A value SQLite takes as a parameter: JavaScript's booleans and undefined are refused by both bindings. */
export type SqlValue = string | number | bigint | null | Uint8Array;

/** A row as a statement answers it: every column's value still to be checked. */
export type SqlRow = Record<string, unknown>;

/** What either binding's statement does (their common subset). */
interface RawStatement {
  run(...params: SqlValue[]): { changes: number | bigint };
  get(...params: SqlValue[]): unknown;
  all(...params: SqlValue[]): unknown[];
}

/** What either binding's database does (their common subset). */
interface RawDatabase {
  prepare(sql: string): RawStatement;
  exec(sql: string): void;
  close(): void;
  /** better-sqlite3: whether a transaction is open. */
  readonly inTransaction?: boolean;
  /** node:sqlite (Node 22.16 and 24): the same. */
  readonly isTransaction?: boolean;
}

type RawDatabaseConstructor = new (path: string) => RawDatabase;

/**
 * Both bindings' database classes have the shape above (checked by the tests on each Node line).
 * This is the one place that takes that on trust: what `require` and `getBuiltinModule` return
 * is typed as nothing in particular, and @types/node 20 does not know `node:sqlite`.
 */
function isDatabaseConstructor(value: unknown): value is RawDatabaseConstructor {
  return typeof value === 'function' && typeof Reflect.get(value, 'prototype')?.prepare === 'function';
}

/** The binding this process uses, loaded once. */
let loaded: { name: SqliteDriverName; Database: RawDatabaseConstructor } | undefined;

/** Loads the binding this runtime has (see the file header), or throws saying what to install. */
function driver(): { name: SqliteDriverName; Database: RawDatabaseConstructor } {
  if (loaded) return loaded;
  const builtin = process.getBuiltinModule('node:sqlite');
  const DatabaseSync = builtin && Reflect.get(builtin, 'DatabaseSync');
  if (isDatabaseConstructor(DatabaseSync)) {
    loaded = { name: 'node:sqlite', Database: DatabaseSync };
    return loaded;
  }
  let addon: unknown;
  try {
    addon = createRequire(import.meta.url)('better-sqlite3');
  } catch (error) {
    const missing = Reflect.get(Object(error), 'code') === 'MODULE_NOT_FOUND';
    throw new Error(
      missing
        ? `the SQLite store needs node:sqlite (Node 22.13 or later; this is Node ${process.versions.node}) or the better-sqlite3 package: npm install better-sqlite3@12 (in this package's repository: npm run sqlite:install)`
        : `better-sqlite3 is installed but does not load on Node ${process.versions.node} (${firstLine(error)}): run npm rebuild better-sqlite3`,
    );
  }
  if (!isDatabaseConstructor(addon)) throw new Error('better-sqlite3 did not export its Database class');
  loaded = { name: 'better-sqlite3', Database: addon };
  return loaded;
}

/** The binding `openConnection` will use in this process, or why there is none. */
export function sqliteDriverName(): SqliteDriverName {
  return driver().name;
}

/**
 * One connection to a database file. Statements are prepared once per text and kept: the store
 * runs the same few over and over, and preparing costs more than running.
 */
export class SqliteConnection {
  private readonly statements = new Map<string, RawStatement>();

  private constructor(
    private readonly db: RawDatabase,
    readonly driver: SqliteDriverName,
  ) {}

  /** Opens (creating if need be) the file at `path`; throws the binding's error, as `sqliteCodeOf` reads it. */
  static open(path: string): SqliteConnection {
    const { name, Database } = driver();
    try {
      return new SqliteConnection(new Database(path), name);
    } catch (error) {
      // better-sqlite3 checks the folder itself, with an error of its own: SQLite's, either way.
      if (sqliteCodeOf(error) !== undefined) throw error;
      throw Object.assign(new Error(firstLine(error)), { code: 'SQLITE_CANTOPEN' });
    }
  }

  /** Runs SQL text of any number of statements, without parameters (a schema, a pragma). */
  exec(sql: string): void {
    this.db.exec(sql);
  }

  /** Runs one statement; answers how many rows it changed. */
  run(sql: string, ...params: SqlValue[]): number {
    return Number(this.prepared(sql).run(...params).changes);
  }

  /** The first row one statement answers, if any. */
  get(sql: string, ...params: SqlValue[]): SqlRow | undefined {
    const row = this.prepared(sql).get(...params);
    return isRow(row) ? row : undefined;
  }

  /** Every row one statement answers. */
  all(sql: string, ...params: SqlValue[]): SqlRow[] {
    return this.prepared(sql)
      .all(...params)
      .filter(isRow);
  }

  /**
   * Whether a transaction is open on this connection, as SQLite says (not in autocommit mode), or
   * undefined where the binding does not say (node:sqlite before Node 22.16).
   */
  get inTransaction(): boolean | undefined {
    return this.db.inTransaction ?? this.db.isTransaction;
  }

  close(): void {
    this.statements.clear();
    this.db.close();
  }

  private prepared(sql: string): RawStatement {
    let statement = this.statements.get(sql);
    if (!statement) {
      statement = this.db.prepare(sql);
      this.statements.set(sql, statement);
    }
    return statement;
  }
}

function isRow(value: unknown): value is SqlRow {
  return typeof value === 'object' && value !== null;
}

/** Primary result codes, by number (node:sqlite reports the number, better-sqlite3 the name). */
const RESULT_CODES: Record<number, string> = {
  1: 'SQLITE_ERROR',
  3: 'SQLITE_PERM',
  5: 'SQLITE_BUSY',
  6: 'SQLITE_LOCKED',
  7: 'SQLITE_NOMEM',
  8: 'SQLITE_READONLY',
  10: 'SQLITE_IOERR',
  11: 'SQLITE_CORRUPT',
  13: 'SQLITE_FULL',
  14: 'SQLITE_CANTOPEN',
  15: 'SQLITE_PROTOCOL',
  17: 'SQLITE_SCHEMA',
  18: 'SQLITE_TOOBIG',
  19: 'SQLITE_CONSTRAINT',
  21: 'SQLITE_MISUSE',
  26: 'SQLITE_NOTADB',
};

/**
 * SQLite's primary result code name of an error either binding threw (`SQLITE_BUSY`, never the
 * extended `SQLITE_BUSY_SNAPSHOT`), or undefined for an error that is not SQLite's.
 */
export function sqliteCodeOf(error: unknown): string | undefined {
  const errcode = Reflect.get(Object(error), 'errcode');
  // node:sqlite: the extended result code; its low byte is the primary one.
  if (typeof errcode === 'number') return RESULT_CODES[errcode & 0xff] ?? `SQLITE_${errcode & 0xff}`;
  const code = Reflect.get(Object(error), 'code');
  if (typeof code === 'string' && code.startsWith('SQLITE_')) return code.split('_', 2).join('_');
  return undefined;
}

/**
 * SQLite's own words for an error: the statement's message in either binding (`near "SELEC":
 * syntax error`), or node:sqlite's words for its code (`errstr`) where it has no message.
 */
export function sqliteMessageOf(error: unknown): string {
  const said = firstLine(error);
  const errstr = Reflect.get(Object(error), 'errstr');
  return said === '' && typeof errstr === 'string' ? errstr : said;
}

function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split('\n')[0] ?? '';
}
