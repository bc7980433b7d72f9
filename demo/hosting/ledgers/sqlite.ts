// --- The balance as a table in the records' SQLite file ---
//
// The same idea on one machine: when the records live in a SQLite file, the ledger lives in that
// file too, and a keyed charge writes through its record's transaction
// (packages/idempotency/stores/sqlite/transaction.ts), so a process killed at any point leaves
// both the charge and its record, or neither. A charge without a key writes in a transaction of
// its own. A declined charge counts its decline the same way, so a keyed decline and its record
// are written together too.

import { setTimeout as sleep } from 'node:timers/promises';
import {
  type SqliteIdempotencyStore,
  type SqliteStatements,
  sqliteTransaction,
} from 'mcp-request-idempotency/sqlite';
import { type ChargeOptions, declineOverLimit, type Ledger, type RefundOptions } from '../../../ledger.js';

/** The demo ledger's tables in the records' file: its balance (one row), its entries, its count of declines (one row). */
export const SQLITE_LEDGER_SCHEMA = `
CREATE TABLE IF NOT EXISTS sep3182_ledger_balance (id INTEGER PRIMARY KEY CHECK (id = 1), balance INTEGER NOT NULL);
INSERT INTO sep3182_ledger_balance VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS sep3182_ledger_entries (
  seq INTEGER PRIMARY KEY, amount INTEGER NOT NULL, idempotency_key TEXT, at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sep3182_ledger_declines (id INTEGER PRIMARY KEY CHECK (id = 1), declines INTEGER NOT NULL);
INSERT INTO sep3182_ledger_declines VALUES (1, 0) ON CONFLICT DO NOTHING;`;

export class SqliteLedger implements Ledger {
  /**
   * @param store the records' store: its file, its write lock, and each keyed call's transaction
   * @param latencyMs how long a charge takes after its write and before it commits: the window a
   *   crash falls into in the demo, where the write is made and then undone
   */
  private constructor(
    private readonly store: SqliteIdempotencyStore,
    private readonly latencyMs: number,
  ) {}

  static async open(store: SqliteIdempotencyStore, latencyMs = 0): Promise<SqliteLedger> {
    await store.transaction((db) => {
      for (const statement of SQLITE_LEDGER_SCHEMA.split(';').filter((sql) => sql.trim())) db.run(statement);
    });
    return new SqliteLedger(store, latencyMs);
  }

  async charge(amount: number, { idempotencyKey }: ChargeOptions = {}): Promise<number> {
    await declineOverLimit(amount, () =>
      this.write((db) =>
        Number(
          db.get('UPDATE sep3182_ledger_declines SET declines = declines + 1 WHERE id = 1 RETURNING declines')
            ?.declines,
        ),
      ),
    );
    return this.move(amount, idempotencyKey);
  }

  refund(amount: number, { idempotencyKey }: RefundOptions = {}): Promise<number> {
    return this.move(-amount, idempotencyKey);
  }

  /** Moves the balance by `delta`, with its entry, and returns the new balance. */
  private move(delta: number, idempotencyKey: string | undefined): Promise<number> {
    return this.write((db) => {
      db.run(
        'INSERT INTO sep3182_ledger_entries (amount, idempotency_key, at) VALUES (?, ?, ?)',
        delta,
        idempotencyKey ?? null,
        Date.now(),
      );
      return Number(
        db.get(
          'UPDATE sep3182_ledger_balance SET balance = balance + ? WHERE id = 1 RETURNING balance',
          delta,
        )?.balance,
      );
    });
  }

  /** Runs `statements` in the call's transaction when the guard offers one, else in one of their own. */
  private async write<T>(statements: (db: SqliteStatements) => T): Promise<T> {
    const tx = await sqliteTransaction();
    const written = tx ? statements(tx) : await this.store.transaction(statements);
    if (this.latencyMs > 0) await sleep(this.latencyMs);
    return written;
  }

  async balance(): Promise<number> {
    const row = await this.store.read((db) =>
      db.get('SELECT balance FROM sep3182_ledger_balance WHERE id = 1'),
    );
    return Number(row?.balance ?? 0);
  }

  async reset(): Promise<void> {
    await this.store.transaction((db) => {
      db.run('UPDATE sep3182_ledger_balance SET balance = 0');
      db.run('DELETE FROM sep3182_ledger_entries');
      db.run('UPDATE sep3182_ledger_declines SET declines = 0');
    });
  }
}
