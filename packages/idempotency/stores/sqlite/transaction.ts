// --- What a tool writes through, and the server's own reads and writes, on the records' file ---
//
// A tool whose writes go to the same file (a balance, an order table) may ask for the call's
// transaction (`sqliteTransaction()`, through the guard's execution context): the store begins it
// (BEGIN IMMEDIATE, on a connection of its own), the tool writes through it, and `complete` records
// the response in it and commits: the side effect and its record are durable together, or neither
// is. A process killed at any point leaves neither (SQLite discards an uncommitted transaction),
// and its claim's holder is dead, so the retry takes the key over at once and executes once.
// The price is SQLite's: the transaction holds the file's one write lock from its BEGIN to its
// record, so every other claim of a free key, in every process, waits for it (duplicates do not:
// they only read). Ask for it just before writing, write, and return: a tool that calls a
// foreign system must not ask, since a transaction cannot undo that call (Brandur Leach: commit
// before any foreign call); it gets the provider's idempotency key instead (`providerKey`).
//
// Outside a keyed call, the server's writes to its own tables run in a write transaction of their
// own (the store's `transaction`), and its reads on one snapshot (`read`).

import { currentExecution } from '../../core/execution.js';
import type { SqliteConnection, SqlRow, SqlValue } from './driver.js';
import { sqliteCodeOf } from './driver.js';
import { FILE_FAILURES, rollBack, transact, unavailable, untilNotBusy } from './file.js';
import { BusyError, type ProcessWriteLock } from './in-process.js';

/** The statements a tool runs on the file: `run` answers how many rows changed. */
export interface SqliteStatements {
  run(sql: string, ...params: SqlValue[]): number;
  get(sql: string, ...params: SqlValue[]): SqlRow | undefined;
  all(sql: string, ...params: SqlValue[]): SqlRow[];
}

/**
 * A keyed call's transaction, for a tool that writes to the file the records are in: what it
 * writes commits with the call's record, or not at all. A statement of the tool's that fails
 * dooms the whole transaction, as in Postgres: every statement after it is refused, nothing the
 * tool wrote stands, and its answer is recorded on its own. (SQLite itself may have rolled the
 * transaction back, as it can on SQLITE_FULL, and would run a later statement on its own, in a
 * commit of its own: a charge with no record.) A statement that would end the transaction under
 * the record (COMMIT, ROLLBACK, END, BEGIN, however written) is refused before it runs.
 */
export class SqliteTransaction implements SqliteStatements {
  private ended = false;
  private doomed = false;

  /** @internal made by the store's `begin` */
  constructor(private readonly db: SqliteConnection) {}

  run(sql: string, ...params: SqlValue[]): number {
    return this.statement(sql, params, () => this.db.run(sql, ...params));
  }

  get(sql: string, ...params: SqlValue[]): SqlRow | undefined {
    return this.statement(sql, params, () => this.db.get(sql, ...params));
  }

  all(sql: string, ...params: SqlValue[]): SqlRow[] {
    return this.statement(sql, params, () => this.db.all(sql, ...params));
  }

  /** Whether a statement failed (nothing written stands); for the store. */
  get failed(): boolean {
    return this.doomed;
  }

  /** The store's: the record is written, or the transaction rolled back; no statement may follow. */
  end(): void {
    this.ended = true;
  }

  private statement<T>(sql: string, params: SqlValue[], run: () => T): T {
    if (this.ended) throw new Error("the idempotency record's transaction has ended: write before returning");
    if (this.doomed)
      throw new Error(
        "an earlier statement failed in the idempotency record's transaction: nothing it wrote stands, and no statement may follow",
      );
    let ends: boolean;
    try {
      ends = endsTransaction(this.db, sql, params);
    } catch (error) {
      // Not even a statement SQLite can compile: the tool's own error, and the transaction's end.
      this.doomed = true;
      throw error;
    }
    if (ends)
      throw new Error(
        "the idempotency store commits the record's transaction, with the record: not the tool",
      );
    try {
      return run();
    } catch (error) {
      this.doomed = true;
      throw error;
    } finally {
      // However it came to end (a statement SQLite rolled back for), it is over for the tool too.
      if (this.db.inTransaction === false) this.doomed = true;
    }
  }
}

/** The statement texts each connection has compiled and found not to end a transaction. */
const KEEPS_TRANSACTION = new WeakMap<SqliteConnection, Set<string>>();

/**
 * Whether `sql` would begin or end a transaction, as SQLite compiles it: its program (EXPLAIN)
 * holds an AutoCommit instruction (BEGIN, COMMIT, END, ROLLBACK; never SAVEPOINT, RELEASE or
 * ROLLBACK TO, which stay within it). SQLite's own reading, whatever comments or case the text
 * holds; compiled once per text and connection.
 */
function endsTransaction(db: SqliteConnection, sql: string, params: SqlValue[]): boolean {
  const known = KEEPS_TRANSACTION.get(db) ?? new Set<string>();
  if (known.has(sql)) return false;
  const program = db.all(`EXPLAIN ${sql}`, ...params);
  if (program.some((step) => step.opcode === 'AutoCommit')) return true;
  known.add(sql);
  KEEPS_TRANSACTION.set(db, known);
  return false;
}

/**
 * The transaction of the running tool call's record, for a tool that writes to the file the SQLite
 * store keeps its records in: write through it, and the writes commit with the record, or neither.
 * Undefined outside a keyed call guarded with a SQLite store: write as usual then (`transaction`
 * of the store runs a write of its own). Ask just before writing: it holds the file's write lock.
 */
export async function sqliteTransaction(): Promise<SqliteTransaction | undefined> {
  const tx = await currentExecution()?.transaction();
  return tx instanceof SqliteTransaction ? tx : undefined;
}

// --- The keyed call's transaction, as the store keeps it ---

/** What a store lends its tool transactions: the file's name, its turn to write, and connections. */
export interface TransactionFile {
  readonly path: string;
  readonly lock: ProcessWriteLock;
  readonly busyTimeoutMs: number;
  /** A second connection to the file, set up as the first. */
  connect(): SqliteConnection;
  /** Throws once the file is no longer the one the store opened. */
  checkStillThere(): void;
}

/**
 * The tool transactions of one store: at most one open at a time (it holds the file's write lock,
 * and this process's), on a connection of its own, opened the first time one is asked for.
 */
export class ToolTransactions {
  private connection: SqliteConnection | undefined;
  /** The tool transaction open now, if any, and the claim (token) it serves. */
  private open: { token: string; tx: SqliteTransaction; db: SqliteConnection } | undefined;

  constructor(private readonly file: TransactionFile) {}

  /** Begins the claim's transaction, once; the tool writes through it. */
  async begin(token: string): Promise<SqliteTransaction> {
    if (this.open?.token === token) return this.open.tx;
    const { path, lock } = this.file;
    const deadline = performance.now() + this.file.busyTimeoutMs;
    try {
      this.file.checkStillThere();
      await lock.take(deadline);
    } catch (error) {
      throw unavailable(path, error);
    }
    try {
      this.connection ??= this.file.connect();
      const db = this.connection;
      await untilNotBusy(deadline, () => db.run('BEGIN IMMEDIATE'));
      const tx = new SqliteTransaction(db);
      this.open = { token, tx, db };
      return tx;
    } catch (error) {
      lock.give();
      throw unavailable(path, error);
    }
  }

  /** The connection of the claim's open transaction, if its tool began one. */
  connectionOf(token: string): SqliteConnection | undefined {
    return this.open?.token === token ? this.open.db : undefined;
  }

  /**
   * Ends the claim's transaction with its record: `record` runs in it, and both commit (or, when
   * `record` answers undefined, the claim having lost its key, neither). Answers undefined when
   * there is nothing to record in: the tool began no transaction, or a statement of its failed, in
   * which case nothing it wrote stands and the record is to be written on its own.
   */
  commitWith<T>(
    token: string,
    record: (db: SqliteConnection) => T | undefined,
  ): { recorded: T | undefined } | undefined {
    const open = this.open;
    if (open?.token !== token) return undefined;
    this.open = undefined;
    open.tx.end();
    const { db } = open;
    if (!open.tx.failed) {
      try {
        const recorded = record(db);
        db.run(recorded === undefined ? 'ROLLBACK' : 'COMMIT');
        return { recorded };
      } catch (error) {
        rollBack(db);
        throw unavailable(this.file.path, error);
      } finally {
        this.file.lock.give();
      }
    }
    // A statement of the tool's failed: nothing it wrote stands, and its answer (which says
    // so, or should) is recorded on its own.
    rollBack(db);
    this.file.lock.give();
    return undefined;
  }

  /** Rolls back the claim's transaction, if its tool began one: nothing it wrote stands. */
  rollback(token: string): void {
    const open = this.open;
    if (open?.token !== token) return;
    this.open = undefined;
    open.tx.end();
    rollBack(open.db);
    this.file.lock.give();
  }

  /** Rolls back whatever is open, and closes the connection. */
  close(): void {
    if (this.open) this.rollback(this.open.token);
    this.connection?.close();
  }
}

// --- The server's own tables, outside a keyed call ---

/**
 * `work` in a write transaction of its own (`write`: the store's, which waits its turn): a
 * failure of the file is the store's to say, a statement of the server's own is its own error.
 */
export async function writeOwn<T>(
  path: string,
  write: (work: (db: SqliteConnection) => T) => Promise<T>,
  work: (db: SqliteStatements) => T,
): Promise<T> {
  try {
    return await write(work);
  } catch (error) {
    const code = sqliteCodeOf(error);
    throw error instanceof BusyError || (code && FILE_FAILURES.has(code)) ? unavailable(path, error) : error;
  }
}

/** `work` on one snapshot of the file (a read transaction on `db`), any write refused. */
export function readOwn<T>(path: string, db: SqliteConnection, work: (db: SqliteStatements) => T): T {
  try {
    db.exec('PRAGMA query_only = ON');
    try {
      return transact(db, work, 'BEGIN');
    } finally {
      db.exec('PRAGMA query_only = OFF');
    }
  } catch (error) {
    // A read never fails on a read-only file: SQLITE_READONLY here is `work` writing, its own error.
    const code = sqliteCodeOf(error);
    throw code && code !== 'SQLITE_READONLY' && FILE_FAILURES.has(code) ? unavailable(path, error) : error;
  }
}
