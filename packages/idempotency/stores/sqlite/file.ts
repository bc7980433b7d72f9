// --- The SQLite file: its settings, its schema, write transactions, and its failures ---
//
// What every connection to the file runs with (WAL, the durability asked for, the size bound),
// the schema brought up to date at open, a write transaction that waits for the file's lock
// without holding the event loop, and SQLite's failures in the operator's words.
// Internal to the package: the SQLite store's own.

import { StoreUnavailableError } from '../contract.js';
import { type SqliteConnection, sqliteCodeOf, sqliteMessageOf } from './driver.js';
import { BusyError } from './in-process.js';
import { MIGRATIONS, SCHEMA_VERSION } from './sql.js';

/** The durability a commit is given: see store.ts's header for what each survives, and its cost. */
export type SqliteSynchronous = 'normal' | 'full';

/**
 * The first retry of a write that found the file locked comes after 1 ms (another claim holds the
 * lock for far less), then doubling to this: a tool's transaction holds it for longer, and a
 * waiter learns it is free at most this late.
 */
const MAX_BUSY_BACKOFF_MS = 16;

/**
 * How many pages the WAL may grow to before a commit copies them back into the file (SQLite's
 * default is 1,000: 4 MB). A checkpoint fsyncs the WAL and the file, even at synchronous=NORMAL,
 * so its cost is two fsyncs whatever it copies, and a page written by many commits is copied once:
 * at 1,000 pages a first execution (two commits of two pages each) pays for a checkpoint every 250
 * calls, at 10,000 every 2,500 (docs/cost.md). The WAL file then grows to about 40 MB, and is cut
 * back to JOURNAL_SIZE_LIMIT after each checkpoint.
 */
const WAL_CHECKPOINT_PAGES = 10_000;

/** What the WAL file is cut back to once checkpointed, so an idle server keeps no 40 MB file. */
const JOURNAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024;

/** The settings every connection to the file runs with. */
export function configure(
  db: SqliteConnection,
  settings: { synchronous: SqliteSynchronous; maxPages?: number },
) {
  // The store waits for a lock itself, never inside SQLite with the event loop held.
  db.exec('PRAGMA busy_timeout = 0');
  const mode = db.get('PRAGMA journal_mode = WAL')?.journal_mode;
  if (mode !== 'wal')
    throw new Error(
      `SQLite would not put it in WAL mode (it stayed ${String(mode)}): is it on a network share?`,
    );
  db.exec(`PRAGMA synchronous = ${settings.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
  db.exec(`PRAGMA wal_autocheckpoint = ${WAL_CHECKPOINT_PAGES}`);
  db.exec(`PRAGMA journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
  if (settings.maxPages !== undefined) db.exec(`PRAGMA max_page_count = ${settings.maxPages}`);
}

/**
 * Creates the schema in a file that has none, or brings an earlier one up to date, in one write
 * transaction (two processes opening a new file together create it once). A file whose
 * `sep3182_idem_` tables this store did not write, or a later version's, is refused, untouched.
 * The version row is written in any case: a file this process may not write fails here, at open.
 */
export function migrate(db: SqliteConnection): void {
  transact(db, () => {
    const tables = db
      .all("SELECT name FROM sqlite_schema WHERE name LIKE 'sep3182\\_idem\\_%' ESCAPE '\\'")
      .map((row) => String(row.name));
    let version = 0;
    if (tables.includes('sep3182_idem_schema')) {
      const row = db.get('SELECT version FROM sep3182_idem_schema');
      version = typeof row?.version === 'number' ? row.version : Number.NaN;
    } else if (tables.length > 0) {
      throw new Error(
        `it holds tables named ${tables.join(', ')} that this store did not create (no schema version)`,
      );
    }
    if (!(version >= 0 && version <= SCHEMA_VERSION))
      throw new Error(
        `it holds idempotency records of schema version ${version}; this store reads version ${SCHEMA_VERSION} (a newer package wrote it?)`,
      );
    for (const step of MIGRATIONS.slice(version)) db.exec(step);
    db.run('UPDATE sep3182_idem_schema SET version = ?', SCHEMA_VERSION);
  });
}

/** BEGIN IMMEDIATE (or `begin`), `work`, COMMIT; rolled back if anything throws. */
export function transact<T>(
  db: SqliteConnection,
  work: (db: SqliteConnection) => T,
  begin: 'BEGIN IMMEDIATE' | 'BEGIN' = 'BEGIN IMMEDIATE',
): T {
  db.run(begin);
  try {
    const result = work(db);
    db.run('COMMIT');
    return result;
  } catch (error) {
    rollBack(db);
    throw error;
  }
}

/** Rolls back whatever transaction is open, if one is (SQLite may have rolled it back itself). */
export function rollBack(db: SqliteConnection): void {
  try {
    db.run('ROLLBACK');
  } catch {
    // No transaction was open: an error such as SQLITE_FULL can end it by itself.
  }
}

/** Runs `attempt` until it does not fail with SQLITE_BUSY, sleeping between tries, until `deadline`. */
export async function untilNotBusy<T>(deadline: number, attempt: () => T): Promise<T> {
  for (let tries = 0; ; tries++) {
    try {
      return attempt();
    } catch (error) {
      const left = deadline - performance.now();
      if (sqliteCodeOf(error) !== 'SQLITE_BUSY' || left <= 0) throw error;
      const backoff = Math.min(2 ** tries, MAX_BUSY_BACKOFF_MS, left);
      await new Promise((resolve) => setTimeout(resolve, backoff));
    }
  }
}

/** SQLite's answers that say the file itself cannot be used now, whatever the statement. */
export const FILE_FAILURES = new Set([
  'SQLITE_BUSY',
  'SQLITE_CANTOPEN',
  'SQLITE_NOTADB',
  'SQLITE_CORRUPT',
  'SQLITE_READONLY',
  'SQLITE_PERM',
  'SQLITE_FULL',
  'SQLITE_IOERR',
]);

/**
 * The store's failure as the operator reads it: which file, what is wrong with it in SQLite's
 * words, and what to do. A StoreUnavailableError, which the guard fails closed on.
 */
export function unavailable(path: string, error: unknown): StoreUnavailableError {
  if (error instanceof StoreUnavailableError) return error;
  if (error instanceof BusyError)
    return new StoreUnavailableError(
      new Error(`${path} stayed locked by another write past the busy timeout (SQLITE_BUSY)`, {
        cause: error,
      }),
    );
  const code = sqliteCodeOf(error);
  const said = sqliteMessageOf(error);
  const what: Record<string, string> = {
    SQLITE_BUSY: `${path} stayed locked by another write past the busy timeout (${said})`,
    SQLITE_CANTOPEN: `cannot open ${path} (${said}): is its folder there, and may this process create files in it?`,
    SQLITE_NOTADB: `${path} is not a SQLite database (${said}): give the store a file of its own`,
    SQLITE_CORRUPT: `${path} is damaged (${said}): restore it from a backup, or move it aside to start with no records`,
    SQLITE_READONLY: `${path} is read-only (${said}): the store must write its records there`,
    SQLITE_PERM: `${path} may not be written (${said})`,
    SQLITE_FULL: `${path} is full (${said}): free disk space, or raise its size bound`,
    SQLITE_IOERR: `${path} could not be read or written (${said})`,
  };
  const message = (code && what[code]) ?? (said.startsWith(path) ? said : `${path}: ${said}`);
  return new StoreUnavailableError(new Error(message, { cause: error }));
}
