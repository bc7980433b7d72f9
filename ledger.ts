// --- The payment provider: the external system a charge mutates ---
//
// Five of them, behind one interface. The two in this process's reach (`MemoryLedger`, and
// `RedisLedger` for several instances) are the provider that takes no keys: they commit every
// call they are given, like a provider called by a tool that forgot to pass a key along.
// `PostgresLedger` and `SqliteLedger` keep the balance beside the idempotency records, so a
// charge commits with its record.
// `ProviderLedger` is a payment API over HTTP (`provider.ts`, or any provider that follows
// docs/provider-wire.md) that takes an `Idempotency-Key`, and the client a payment SDK would
// give a tool: it sends the key it is handed on every one of its own retries.
// Latency is configurable so the demo can hold a charge open long enough for a duplicate to
// arrive, or for the client to give up waiting.

import { currentExecution, DEFAULT_PROVIDER_KEY_RETENTION_MS } from 'mcp-request-idempotency';
import { checkedTablePrefix, postgresTransaction } from 'mcp-request-idempotency/postgres';
import type { RedisClient } from 'mcp-request-idempotency/redis';
import {
  type SqliteIdempotencyStore,
  type SqliteStatements,
  sqliteTransaction,
} from 'mcp-request-idempotency/sqlite';
import type pg from 'pg';

/** What a tool passes along with a charge: the provider's own key, if the provider takes one. */
export interface ChargeOptions {
  idempotencyKey?: string;
}

export interface RefundOptions extends ChargeOptions {
  /** The order the refund pays back (a provider may require it). */
  orderId?: string;
}

export interface Ledger {
  /** Commits `amount` (minor units) and returns the new balance. */
  charge(amount: number, options?: ChargeOptions): Promise<number>;
  /** Pays `amount` back (the balance goes down by it) and returns the new balance. */
  refund(amount: number, options?: RefundOptions): Promise<number>;
  balance(): Promise<number>;
  reset(): Promise<void>;
  /**
   * How long the provider behind the ledger keeps an idempotency key and replays its answer;
   * absent for a ledger that takes no key. The guard keeps its records at least this long.
   */
  readonly providerKeyRetentionMs?: number;
}

export class MemoryLedger implements Ledger {
  private total = 0;

  /** @param latencyMs how long the provider takes before a charge commits */
  constructor(private readonly latencyMs = 0) {}

  async charge(amount: number): Promise<number> {
    if (this.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.latencyMs));
    this.total += amount;
    return this.total;
  }

  refund(amount: number): Promise<number> {
    return this.charge(-amount);
  }

  async balance(): Promise<number> {
    return this.total;
  }

  async reset(): Promise<void> {
    this.total = 0;
  }
}

// --- The same provider, shared by every server instance ---
//
// When the dedup store is Redis, the demo runs several instances, and a charge must land in
// one balance whichever instance ran it, or a double charge could hide in two ledgers.
// INCRBY is atomic, so concurrent charges from any number of instances all add up. Every
// command names the one key, so on a Redis Cluster it goes to whichever master holds it.

/** Where the balance lives unless told otherwise. */
export const DEFAULT_LEDGER_KEY = 'sep3182:ledger:balance';

export class RedisLedger implements Ledger {
  /**
   * @param client a connected client, owned (and closed) by the caller
   * @param latencyMs how long the provider takes before a charge commits
   * @param key where the balance lives
   */
  constructor(
    private readonly client: RedisClient,
    private readonly latencyMs = 0,
    readonly key = DEFAULT_LEDGER_KEY,
  ) {}

  async charge(amount: number): Promise<number> {
    if (this.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.latencyMs));
    return this.client.incrBy(this.key, amount);
  }

  refund(amount: number): Promise<number> {
    return this.charge(-amount);
  }

  async balance(): Promise<number> {
    const balance = await this.client.get(this.key);
    return balance === null ? 0 : Number(balance);
  }

  async reset(): Promise<void> {
    await this.client.del(this.key);
  }
}

// --- A payment API over HTTP, with the provider's own idempotency key ---
//
// What a payment SDK does for the tool (stripe-node is the model): one key per operation, sent
// as `Idempotency-Key` on the first attempt and on every retry of it, so a retry after a reset
// socket or a 502 that came after the provider committed is replayed by the provider, not
// committed again. Retried, with the same key: connection failures, timeouts, 502/503/504, and
// 409 (the IETF draft: the same key is still being processed; the only answer a client may
// retry unchanged). Not retried: any other 4xx (the request itself is wrong; a 422 means a key
// met other parameters, a bug in the caller's key derivation), and a 500 or an unreadable 200
// (the provider answered, badly; trying again at once would not make it answer better).
//
// When the attempts run out on failures that leave open whether the provider committed, the
// tool's outcome is unknown: the guard is told (`markOutcomeUnknown`) and records nothing, so the
// client's retry executes again with the same key. A hand-written loop, not a retry library:
// the loop is twenty lines, and which answers may be retried under the same key is the lesson.

/** A provider's answer to one operation (docs/provider-wire.md). */
interface ProviderReceipt {
  id: string;
  amount: number;
  balance: number;
}

export interface ProviderLedgerOptions {
  /** Attempts per operation, the first included. Four spans about 1.5 s of backoff at the defaults. */
  attempts?: number;
  /** The first backoff, doubled each retry (full jitter: a random wait up to it). */
  baseDelayMs?: number;
  /** The longest backoff, and the cap on a provider's `Retry-After`. */
  maxDelayMs?: number;
  /** How long one attempt may take: a payment API answers in well under a second, or is in trouble. */
  timeoutMs?: number;
  /** Send no `Idempotency-Key` at all: the demo's provider that takes no keys, for contrast. */
  sendKeys?: boolean;
  /** Told of every attempt that failed and will be retried, for the operator's log. */
  onRetry?: (event: ProviderRetry) => void;
  /** How long the provider keeps a key (default 24 h, as the demo's provider and Stripe do). */
  keyRetentionMs?: number;
}

/** One failed attempt, about to be retried with the same key. */
export interface ProviderRetry {
  path: string;
  attempt: number;
  failure: string;
  idempotencyKey?: string;
  delayMs: number;
}

export const DEFAULT_PROVIDER_ATTEMPTS = 4;
export const DEFAULT_PROVIDER_BASE_DELAY_MS = 100;
export const DEFAULT_PROVIDER_MAX_DELAY_MS = 2_000;
export const DEFAULT_PROVIDER_TIMEOUT_MS = 10_000;

/** A provider's answer that settles the operation: it did not commit, and retrying will not help. */
export class ProviderRefusal extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(`The payment provider refused the request (${status} ${type}): ${message}`);
    this.name = 'ProviderRefusal';
  }
}

/** The provider could not be heard from: whether it committed is unknown. */
export class ProviderUnavailable extends Error {
  constructor(
    readonly attempts: number,
    readonly last: string,
  ) {
    super(
      `The payment provider did not answer after ${attempts} attempt(s) (last: ${last}); ` +
        'whether it committed is unknown. Retry the call with the same idempotencyKey.',
    );
    this.name = 'ProviderUnavailable';
  }
}

export class ProviderLedger implements Ledger {
  private readonly attempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly timeoutMs: number;
  private readonly sendKeys: boolean;
  private readonly onRetry: (event: ProviderRetry) => void;
  readonly providerKeyRetentionMs: number | undefined;

  /** @param url the provider's base URL, e.g. http://127.0.0.1:4242 or https://gateway.example/pay/v1 */
  constructor(
    readonly url: URL,
    options: ProviderLedgerOptions = {},
  ) {
    this.attempts = options.attempts ?? DEFAULT_PROVIDER_ATTEMPTS;
    this.baseDelayMs = options.baseDelayMs ?? DEFAULT_PROVIDER_BASE_DELAY_MS;
    this.maxDelayMs = options.maxDelayMs ?? DEFAULT_PROVIDER_MAX_DELAY_MS;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_PROVIDER_TIMEOUT_MS;
    this.sendKeys = options.sendKeys ?? true;
    this.onRetry = options.onRetry ?? (() => {});
    this.providerKeyRetentionMs = this.sendKeys
      ? (options.keyRetentionMs ?? DEFAULT_PROVIDER_KEY_RETENTION_MS)
      : undefined;
  }

  async charge(amount: number, { idempotencyKey }: ChargeOptions = {}): Promise<number> {
    return (await this.post('/charges', { amount }, idempotencyKey)).balance;
  }

  async refund(amount: number, { orderId, idempotencyKey }: RefundOptions = {}): Promise<number> {
    return (await this.post('/refunds', { orderId: orderId ?? 'unnamed', amount }, idempotencyKey)).balance;
  }

  async balance(): Promise<number> {
    const answer = await fetch(this.endpoint('/balance'), {
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    return numberField(await answer.json(), 'balance');
  }

  async reset(): Promise<void> {
    await fetch(this.endpoint('/reset'), { method: 'POST', signal: AbortSignal.timeout(this.timeoutMs) });
  }

  /**
   * `path` under the base URL, its own path kept: `new URL('/charges', base)` would send a
   * provider reached at `https://gateway.example/pay/v1` its charges at `/charges`.
   */
  private endpoint(path: string): URL {
    const base = this.url.pathname.endsWith('/') ? this.url : new URL(`${this.url.pathname}/`, this.url);
    return new URL(`.${path}`, base);
  }

  /** One operation: the same body and the same key on every attempt. */
  private async post(
    path: string,
    body: object,
    idempotencyKey: string | undefined,
  ): Promise<ProviderReceipt> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const key = this.sendKeys ? idempotencyKey : undefined;
    if (key !== undefined) headers['idempotency-key'] = key;
    const payload = JSON.stringify(body);
    let last = '';
    for (let attempt = 1; attempt <= this.attempts; attempt += 1) {
      let retryAfterMs: number | undefined;
      try {
        const answer = await fetch(this.endpoint(path), {
          method: 'POST',
          headers,
          body: payload,
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        const text = await answer.text();
        if (answer.ok) return receiptOf(text);
        const error = errorOf(text);
        if (!RETRIED_STATUSES.has(answer.status)) {
          if (answer.status >= 500)
            throw unknownOutcome(new ProviderUnavailable(attempt, `${answer.status} ${error.type}`));
          throw new ProviderRefusal(answer.status, error.type, error.message);
        }
        last = `${answer.status} ${error.type}`;
        retryAfterMs = retryAfterOf(answer.headers.get('retry-after'));
      } catch (error) {
        if (error instanceof ProviderRefusal || error instanceof ProviderUnavailable) throw error;
        // A reset, a refused connection, a timeout: the request may or may not have arrived.
        last = describeFailure(error);
      }
      if (attempt < this.attempts) {
        const delayMs = Math.round(this.backoff(attempt, retryAfterMs));
        this.onRetry({ path, attempt, failure: last, idempotencyKey: key, delayMs });
        await sleep(delayMs);
      }
    }
    throw unknownOutcome(new ProviderUnavailable(this.attempts, last));
  }

  /** Full jitter (a random wait up to the doubled ceiling), so retrying instances don't stampede. */
  private backoff(attempt: number, retryAfterMs: number | undefined): number {
    const ceiling = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (attempt - 1));
    return Math.min(this.maxDelayMs, Math.max(retryAfterMs ?? 0, Math.random() * ceiling));
  }
}

/** Answers that leave the operation to be retried with the same key (the IETF draft: 409 is one). */
const RETRIED_STATUSES = new Set([409, 502, 503, 504]);

/** Tells the guard this call's outcome is unknown, and hands the error on for the tool to throw. */
function unknownOutcome(error: ProviderUnavailable): ProviderUnavailable {
  currentExecution()?.markOutcomeUnknown(error.last);
  return error;
}

function receiptOf(text: string): ProviderReceipt {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const id = fieldOf(parsed, 'id');
  const amount = fieldOf(parsed, 'amount');
  const balance = fieldOf(parsed, 'balance');
  if (typeof id !== 'string' || typeof amount !== 'number' || typeof balance !== 'number')
    // It answered 200 and may well have committed, but not what it committed: unknown.
    throw unknownOutcome(
      new ProviderUnavailable(1, `an unreadable 200 (${JSON.stringify(text.slice(0, 40))})`),
    );
  return { id, amount, balance };
}

function errorOf(text: string): { type: string; message: string } {
  let error: unknown;
  try {
    error = fieldOf(JSON.parse(text), 'error');
  } catch {
    return { type: 'unknown', message: text.slice(0, 200) };
  }
  const type = fieldOf(error, 'type');
  const message = fieldOf(error, 'message');
  return {
    type: typeof type === 'string' ? type : 'unknown',
    message: typeof message === 'string' ? message : text.slice(0, 200),
  };
}

function numberField(value: unknown, name: string): number {
  const field = fieldOf(value, name);
  if (typeof field !== 'number')
    throw new Error(`the payment provider's answer has no ${name}: ${JSON.stringify(value)}`);
  return field;
}

function fieldOf(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}

/** `Retry-After` in seconds (the only form the wire uses); anything else is ignored. */
function retryAfterOf(header: string | null): number | undefined {
  const seconds = header === null ? Number.NaN : Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

function describeFailure(error: unknown): string {
  if (error instanceof Error && error.name === 'TimeoutError') return 'timed out';
  const cause = error instanceof Error ? error.cause : undefined;
  const code = fieldOf(cause, 'code');
  return typeof code === 'string' ? code : error instanceof Error ? error.message : String(error);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// --- The balance as a table beside the idempotency records (Postgres) ---
//
// When the records live in Postgres, the ledger can too, and then a charge and its record commit
// in one transaction (packages/idempotency/stores/postgres/store.ts): a crash at any point leaves both or neither,
// with no help from any provider. Each charge writes its entry and the new balance in one
// statement, through the call's transaction when the guard offers one (a keyed call), else on
// its own (a call without a key). `entries` is the ledger's own log: every committed charge once.

/** The demo ledger's tables under `prefix`: its balance (one row) and its entries. */
export function postgresLedgerMigration(prefix: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${prefix}balance (id integer PRIMARY KEY CHECK (id = 1), balance bigint NOT NULL);
INSERT INTO ${prefix}balance VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS ${prefix}entries (
  seq bigserial PRIMARY KEY, amount bigint NOT NULL, idempotency_key text, at timestamptz NOT NULL DEFAULT now()
);`;
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
    const db = (await postgresTransaction()) ?? this.pool;
    const { rows } = await db.query<{ balance: string }>(
      `WITH entry AS (INSERT INTO ${this.prefix}entries (amount, idempotency_key) VALUES ($1, $2))
       UPDATE ${this.prefix}balance SET balance = balance + $1 WHERE id = 1 RETURNING balance`,
      [amount, idempotencyKey ?? null],
    );
    if (this.latencyMs > 0) await sleep(this.latencyMs);
    return Number(rows[0]?.balance);
  }

  refund(amount: number, options: RefundOptions = {}): Promise<number> {
    return this.charge(-amount, options);
  }

  async balance(): Promise<number> {
    const { rows } = await this.pool.query<{ balance: string }>(
      `SELECT balance FROM ${this.prefix}balance WHERE id = 1`,
    );
    return Number(rows[0]?.balance ?? 0);
  }

  async reset(): Promise<void> {
    await this.pool.query(`UPDATE ${this.prefix}balance SET balance = 0; DELETE FROM ${this.prefix}entries`);
  }
}

// --- The balance as a table in the records' SQLite file ---
//
// The same idea on one machine: when the records live in a SQLite file, the ledger lives in that
// file too, and a keyed charge writes through its record's transaction
// (packages/idempotency/stores/sqlite/store.ts), so a process killed at any point leaves both the
// charge and its record, or neither. A charge without a key writes in a transaction of its own.

/** The demo ledger's tables in the records' file: its balance (one row) and its entries. */
export const SQLITE_LEDGER_SCHEMA = `
CREATE TABLE IF NOT EXISTS sep3182_ledger_balance (id INTEGER PRIMARY KEY CHECK (id = 1), balance INTEGER NOT NULL);
INSERT INTO sep3182_ledger_balance VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS sep3182_ledger_entries (
  seq INTEGER PRIMARY KEY, amount INTEGER NOT NULL, idempotency_key TEXT, at INTEGER NOT NULL
);`;

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
    const write = (db: SqliteStatements) => {
      db.run(
        'INSERT INTO sep3182_ledger_entries (amount, idempotency_key, at) VALUES (?, ?, ?)',
        amount,
        idempotencyKey ?? null,
        Date.now(),
      );
      return Number(
        db.get(
          'UPDATE sep3182_ledger_balance SET balance = balance + ? WHERE id = 1 RETURNING balance',
          amount,
        )?.balance,
      );
    };
    const tx = await sqliteTransaction();
    const balance = tx ? write(tx) : await this.store.transaction(write);
    if (this.latencyMs > 0) await sleep(this.latencyMs);
    return balance;
  }

  refund(amount: number, options: RefundOptions = {}): Promise<number> {
    return this.charge(-amount, options);
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
    });
  }
}
