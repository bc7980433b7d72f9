// --- The balance as a table beside the idempotency records (Postgres) ---
//
// When the records live in Postgres, the ledger can too, and then a charge and its record commit
// in one transaction (packages/idempotency/stores/postgres/store.ts): a crash at any point leaves both or neither,
// with no help from any provider. Each charge writes its entry and the new balance in one
// statement, through the call's transaction when the guard offers one (a keyed call), else on
// its own (a call without a key). `entries` is the ledger's own log: every committed charge once.
// A declined charge writes no entry; it counts its decline in `declines` the same way, so a keyed
// decline and its record commit together too.

import { setTimeout as sleep } from 'node:timers/promises';
import { checkedTablePrefix, postgresTransaction } from 'mcp-request-idempotency/postgres';
import type pg from 'pg';
import { type ChargeOptions, declineOverLimit, type Ledger, type RefundOptions } from '../../../ledger.js';

/** The demo ledger's tables under `prefix`: its balance (one row), its entries, its count of declines (one row). */
export function postgresLedgerMigration(prefix: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${prefix}balance (id integer PRIMARY KEY CHECK (id = 1), balance bigint NOT NULL);
INSERT INTO ${prefix}balance VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS ${prefix}entries (
  seq bigserial PRIMARY KEY, amount bigint NOT NULL, idempotency_key text, at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ${prefix}declines (id integer PRIMARY KEY CHECK (id = 1), declines bigint NOT NULL);
INSERT INTO ${prefix}declines VALUES (1, 0) ON CONFLICT DO NOTHING;`;
}

export class PostgresLedger implements Ledger {
  /**
   * @param pool the store's pool (one database, one transaction for a charge and its record)
   * @param prefix of the ledger's tables; `open` creates them
   * @param latencyMs how long a charge takes after its write and before it commits: the window a
   *   crash falls into in the demo, where the write is made and then undone
   */
  private constructor(
    private readonly pool: pg.Pool,
    readonly prefix: string,
    private readonly latencyMs: number,
  ) {}

  static async open(pool: pg.Pool, prefix: string, latencyMs = 0): Promise<PostgresLedger> {
    checkedTablePrefix(prefix);
    // Instances that start together must not race to create the tables.
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query("SELECT pg_advisory_xact_lock(hashtext('sep3182 ledger migration'))");
      await client.query(postgresLedgerMigration(prefix));
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
    return new PostgresLedger(pool, prefix, latencyMs);
  }

  async charge(amount: number, { idempotencyKey }: ChargeOptions = {}): Promise<number> {
    await declineOverLimit(amount, async () => {
      const row = await this.write<{ declines: string }>(
        `UPDATE ${this.prefix}declines SET declines = declines + 1 WHERE id = 1 RETURNING declines`,
      );
      return Number(row?.declines);
    });
    return this.move(amount, idempotencyKey);
  }

  refund(amount: number, { idempotencyKey }: RefundOptions = {}): Promise<number> {
    return this.move(-amount, idempotencyKey);
  }

  /** Moves the balance by `delta`, with its entry, and returns the new balance. */
  private async move(delta: number, idempotencyKey: string | undefined): Promise<number> {
    const row = await this.write<{ balance: string }>(
      `WITH entry AS (INSERT INTO ${this.prefix}entries (amount, idempotency_key) VALUES ($1, $2))
       UPDATE ${this.prefix}balance SET balance = balance + $1 WHERE id = 1 RETURNING balance`,
      [delta, idempotencyKey ?? null],
    );
    return Number(row?.balance);
  }

  /** One statement through the call's transaction when the guard offers one (a keyed call), else on its own. */
  private async write<Row extends pg.QueryResultRow>(
    sql: string,
    params: unknown[] = [],
  ): Promise<Row | undefined> {
    const db = (await postgresTransaction()) ?? this.pool;
    const { rows } = await db.query<Row>(sql, params);
    if (this.latencyMs > 0) await sleep(this.latencyMs);
    return rows[0];
  }

  async balance(): Promise<number> {
    const { rows } = await this.pool.query<{ balance: string }>(
      `SELECT balance FROM ${this.prefix}balance WHERE id = 1`,
    );
    return Number(rows[0]?.balance ?? 0);
  }

  async reset(): Promise<void> {
    await this.pool.query(
      `UPDATE ${this.prefix}balance SET balance = 0; DELETE FROM ${this.prefix}entries;
       UPDATE ${this.prefix}declines SET declines = 0`,
    );
  }
}
