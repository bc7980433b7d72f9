// --- A shared dedup store in Postgres (SEP-3182 stateless deployments) ---
//
// The same contract as the Redis store, the same answers and the same quotas, for a deployment
// whose system of record is already Postgres. Every operation is one statement, so one round trip,
// and each is atomic on its own; no transaction is ever held open across a tool's call:
//   claim    = SELECT claim(…): "the record if there is one; else, within the caller's quota, my
//              claim, with a lease, stamped with my liveness lock"   (1 round trip)
//   complete = SELECT settle(…): "replace it only if it is still my claim"   (1; `awaitInput` the
//              same, writing an awaiting-input record)
//   release  = SELECT release(…): delete it (or put back the awaiting-input record it resumed),
//              "only if mine"   (1)
//   renew    = UPDATE "extend its lease only if it is still my claim"   (1, once per third of a lease)
// A replay, a conflict and an in-progress answer cost one round trip; a first execution two.
// Expired rows are treated as absent by every statement. A claim does only what a claim must:
// take the key atomically and check the caller's quota. Deleting what expired is the reaper's
// (`reap`, which every instance runs every `reapIntervalMs`, safe with any number of them), so the
// only index a claim writes is the one a lookup needs. A caller's quota is read from one row of
// its usage, which every function keeps as it writes: a claim costs the same however many records
// its caller holds (counting them would scan all of them; docs/cost.md). The usage counts
// expired rows until they are reaped, so a claim about to refuse for the quota deletes its
// caller's expired rows first and looks again: the quota counts live records only.
//
// --- A dead holder is seen at once ---
// A lease alone makes the retry of a call whose process died wait out the lease (two minutes by
// default). Postgres knows sooner: each store instance holds an advisory lock of its own from two
// dedicated sessions for its whole life, and stamps every claim with it (`liveness.ts`). A claim
// that finds an in-progress record whose holder's lock no session holds takes the key as free:
// the process that held it is gone. A live holder, however slow, still answers in progress, and
// the lease stays the backstop. What that signal can and cannot see:
//   - A killed process (crash, OOM kill, SIGKILL): its kernel closes its sockets, Postgres ends
//     its sessions and their locks at once, and the key is free for the next claim (measured in
//     the tests: well under a second). Through a session-pooling PgBouncer too, which resets the
//     server session it kept (DISCARD ALL releases its locks).
//   - A host that vanishes (power, network partition): no socket is closed, so Postgres notices
//     only when TCP keepalives give up (this store asks for about 25 s on its liveness sessions;
//     behind a pooler, the pooler's own keepalives towards the host count) or the lease ends.
//   - One liveness session that ends while its process lives (an idle timeout, a terminated
//     session, a broken connection): the other holds the lock while it reconnects. Both ending at
//     once (every connection of the host cut, its pooler restarted): its claims look dead until
//     a session is back, and a retry meanwhile may run the call again. New claims are refused
//     (failed closed) while no session holds the lock; the claim function itself checks.
//   - Postgres restarted, or a replica promoted: locks do not survive, so a claim written before
//     the server started is judged by its lease alone.
//   - A pooler that shares server sessions between clients (PgBouncer's transaction pooling):
//     refused, at connect and whenever it is seen later (see `liveness.ts`).
//
// --- The tool's writes and the record, in one transaction ---
// A tool that writes to the same database (a balance, an order table) may ask for the call's
// transaction (`postgresTransaction()`, through the guard's execution context): the store begins it
// on a pooled connection (BEGIN, READ COMMITTED), the tool writes through it, and `complete`
// records the response in it and commits: the side effect and its record are durable together, or
// neither is. The record and its COMMIT are sent together, one round trip (the pool's connections
// are pipelined): the record raises if its claim has lost the key, which turns that COMMIT into a
// ROLLBACK. BEGIN is not sent ahead with the tool's first statement: each pipelined statement has
// its own Sync, so a BEGIN that failed would leave the tool's statements to commit one by one.
// A crash at any point rolls the transaction back (Postgres ends a dead client's session), and the
// claim's holder is dead, so the retry takes the key over at once and executes once.
// READ COMMITTED is enough, and the strictest level that never refuses a commit: the tool's writes
// are single-statement read-modify-writes (`balance = balance + $1`), which the row lock
// serializes, and the record re-checks its claim's token against the latest committed row, so a
// claim that lost its key fails it and the whole transaction is rolled back. SERIALIZABLE would
// add serialization failures to retry, for anomalies these statements cannot have. Only a
// tool that asks holds a transaction open; a tool that calls a foreign system (a payment provider)
// must not ask, since a transaction cannot undo that call (Brandur Leach: commit before any foreign
// call); it gets the provider's idempotency key instead (`providerKey`).
//
// --- Schema ---
// Two tables (the records, and each caller's usage), plain SQL in `sql.ts` (`migrationOf`), applied by
// `migratePostgresStore` (by `connect` unless told not to), every name under a configurable prefix
// so tests and tenants do not collide.

import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { currentExecution } from '../../core/execution.js';
import type { Fingerprint } from '../../core/fingerprint.js';
import {
  type Claim,
  type ClaimTicket,
  type IdempotencyStore,
  type RecordId,
  type StoredResponse,
  StoreUnavailableError,
} from '../contract.js';
import {
  claimOfHeld,
  milliseconds,
  parsedJson,
  positiveInteger,
  type ScopeQuotaOptions,
  scopeQuotasOf,
  withDeadline,
} from '../support.js';
import { Liveness, PostgresEnvironmentError } from './liveness.js';
import {
  CLAIM_LOST,
  checkedTablePrefix,
  migrationOf,
  SESSION_SETTINGS,
  SHARED_SESSION,
  type Statements,
  statementsOf,
} from './sql.js';

export { PostgresEnvironmentError } from './liveness.js';
export { checkedTablePrefix, migrationOf };

/** Every table and function the store creates starts with this; see `migrationOf`. */
export const DEFAULT_POSTGRES_TABLE_PREFIX = 'sep3182_idem_';

/**
 * How long one store statement may take before the call fails closed. Each is a handful of
 * index lookups, well under a millisecond on a healthy Postgres; a second means it is down,
 * frozen, or waiting on a lock, and the caller is better served by an immediate "retry later,
 * same key" than by waiting. Also set as each session's `statement_timeout`, so Postgres itself
 * stops a statement its caller gave up on.
 */
export const DEFAULT_POSTGRES_STATEMENT_TIMEOUT_MS = 1_000;

/** How long `connect` waits for the first connection (and the migration) before refusing to start. */
export const DEFAULT_POSTGRES_CONNECT_TIMEOUT_MS = 2_000;

/**
 * Pooled connections per store. Each claim holds one for a single statement, so ten serve far
 * more concurrent calls than ten; more would mostly add sessions for Postgres to schedule.
 */
export const DEFAULT_POSTGRES_MAX_CONNECTIONS = 10;

/**
 * How often each instance walks the table for expired rows. Their only cost while they wait is
 * disk (no statement returns them, and a claim that would refuse for its caller's quota deletes
 * its caller's first): a minute keeps the table near its live size at one walk of it per minute
 * per instance.
 */
export const DEFAULT_POSTGRES_REAP_INTERVAL_MS = 60_000;

/**
 * Blocks of the table one reap statement reads (8 KB each, so 8 MB): a few milliseconds of
 * Postgres' time a statement however large the table, far inside the statement timeout.
 */
const REAP_BLOCKS_PER_STATEMENT = 1_024;

/**
 * What `pg_stat_activity.application_name` shows for the store's sessions, for operators; its
 * liveness sessions add ` liveness`.
 */
export const DEFAULT_POSTGRES_APPLICATION_NAME = 'sep3182-idempotency';

/**
 * After the statement timeout, how much longer the client waits for Postgres' own cancellation
 * before it gives the connection up: a server that answers nothing at all (frozen, vanished)
 * must not leave a pooled connection with a reply still owed, to be reused by the next call.
 */
const CLIENT_TIMEOUT_GRACE_MS = 1_000;

export interface PostgresStoreOptions extends ScopeQuotaOptions {
  /** Prefix of the store's table and function names (lower case, digits, `_`; at most 40 characters). */
  tablePrefix?: string;
  /** Bound on every store statement; past it the operation rejects and the guard fails closed. */
  statementTimeoutMs?: number;
}

export interface PostgresConnectOptions {
  connectTimeoutMs?: number;
  /** Size of the store's connection pool; its two liveness sessions come on top. */
  maxConnections?: number;
  applicationName?: string;
  /** Create the table and functions if they are missing (default true); false when migrations run elsewhere. */
  migrate?: boolean;
  /** How often this instance deletes expired records (see DEFAULT_POSTGRES_REAP_INTERVAL_MS). */
  reapIntervalMs?: number;
  /**
   * Told about every connection error, including each failed reconnect of a liveness session,
   * and of a refusal found while running (a pooler that shares sessions). Callers already learn
   * of an outage as a `StoreUnavailableError`; this is for the operator's log.
   */
  onError?: (error: unknown) => void;
}

/** The schema under the default prefix, for an operator who applies migrations with psql. */
export const MIGRATION = migrationOf(DEFAULT_POSTGRES_TABLE_PREFIX);

/**
 * Creates the store's schema under `tablePrefix` if it is missing (the functions are replaced
 * with this version's). In one transaction, under an advisory lock, so instances starting
 * together do not trip over each other's CREATEs.
 */
export async function migratePostgresStore(
  pool: pg.Pool,
  tablePrefix = DEFAULT_POSTGRES_TABLE_PREFIX,
): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1), 0)', [`${tablePrefix}migrate`]);
    await client.query(migrationOf(tablePrefix));
    await client.query('COMMIT');
    client.release();
  } catch (error) {
    // The connection may be mid-transaction or broken: never hand it back to the pool.
    client.release(true);
    throw error;
  }
}

export class PostgresIdempotencyStore implements IdempotencyStore {
  readonly tablePrefix: string;
  readonly maxRecordsPerScope: number;
  readonly maxBytesPerScope: number;
  private readonly statementTimeoutMs: number;
  private readonly sql: Statements;
  private reapTimer: NodeJS.Timeout | undefined;
  private closing = false;

  /**
   * Connects a pool and the liveness sessions, and (unless `migrate: false`) creates the
   * schema. Rejects with `StoreUnavailableError` if Postgres does not answer within
   * `connectTimeoutMs`, or with `PostgresEnvironmentError` (one line: the setting and the fix) if
   * the store cannot be safe there: a pooler that shares sessions. While Postgres is unreachable
   * later on, every operation rejects within its statement timeout, and the store heals by itself
   * once Postgres is back; one refused while running fails every claim closed with that line.
   */
  static async connect(
    connection: string | pg.ClientConfig,
    options: PostgresStoreOptions & PostgresConnectOptions = {},
  ): Promise<PostgresIdempotencyStore> {
    const config = typeof connection === 'string' ? { connectionString: connection } : connection;
    const statementTimeoutMs = positiveInteger(
      'statementTimeoutMs',
      options.statementTimeoutMs ?? DEFAULT_POSTGRES_STATEMENT_TIMEOUT_MS,
    );
    const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_POSTGRES_CONNECT_TIMEOUT_MS;
    const reapIntervalMs = positiveInteger(
      'reapIntervalMs',
      options.reapIntervalMs ?? DEFAULT_POSTGRES_REAP_INTERVAL_MS,
    );
    const applicationName = options.applicationName ?? DEFAULT_POSTGRES_APPLICATION_NAME;
    const onError = options.onError ?? (() => {});
    // No start-up parameter but the application name, which PgBouncer knows: the statement
    // timeout and the rest are set once connected (see SESSION_SETTINGS).
    const pool = new pg.Pool({
      ...config,
      application_name: applicationName,
      // Client-side, for a server that answers nothing at all (see CLIENT_TIMEOUT_GRACE_MS).
      query_timeout: statementTimeoutMs + CLIENT_TIMEOUT_GRACE_MS,
      keepAlive: true,
      // A transaction's record and its COMMIT go out together (see the file header).
      pipeline: true,
      max: options.maxConnections ?? DEFAULT_POSTGRES_MAX_CONNECTIONS,
      // Bounds both a new connection and the wait for a free one: the guard must answer now.
      connectionTimeoutMillis: statementTimeoutMs,
      // Queued ahead of the connection's first statement, not waited for: the connection is
      // pipelined, so the settings ride with that statement and cost no round trip of their own.
      // One that fails is a broken connection, whose next statement fails too.
      onConnect: (client) => {
        client.query(SESSION_SETTINGS, [String(statementTimeoutMs)]).catch(onError);
      },
    });
    // An idle pooled connection that breaks (Postgres restarted) is reported here; with no
    // listener the EventEmitter would throw, and take the whole server down with Postgres.
    pool.on('error', onError);
    const liveness = new Liveness({
      config: {
        ...config,
        application_name: `${applicationName} liveness`,
        keepAlive: true,
        connectionTimeoutMillis: connectTimeoutMs,
      },
      statementTimeoutMs,
      onError,
    });
    const store = new PostgresIdempotencyStore(pool, liveness, { ...options, statementTimeoutMs, onError });
    try {
      await withDeadline(
        (async () => {
          if (options.migrate ?? true) await migratePostgresStore(pool, store.tablePrefix);
          await liveness.start(pool);
        })(),
        connectTimeoutMs,
        'Postgres',
      );
    } catch (error) {
      await store.close();
      if (error instanceof PostgresEnvironmentError) throw error;
      throw new StoreUnavailableError(error);
    }
    store.reapEvery(reapIntervalMs);
    return store;
  }

  private constructor(
    /** The store's connection pool; a ledger in the same database may share it. */
    readonly pool: pg.Pool,
    private readonly liveness: Liveness,
    private readonly options: PostgresStoreOptions & { onError: (error: unknown) => void },
  ) {
    this.tablePrefix = checkedTablePrefix(options.tablePrefix ?? DEFAULT_POSTGRES_TABLE_PREFIX);
    this.statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_POSTGRES_STATEMENT_TIMEOUT_MS;
    const quotas = scopeQuotasOf(options);
    this.maxRecordsPerScope = quotas.maxRecordsPerScope;
    this.maxBytesPerScope = quotas.maxBytesPerScope;
    this.sql = statementsOf(this.tablePrefix);
  }

  /** Claims whose tool asked for a transaction, by claim token: the connection it is open on. */
  private readonly transactions = new Map<string, pg.PoolClient>();

  /**
   * The advisory lock this store's claims are stamped with, and the backends of the liveness
   * sessions holding it now: what `pg_locks` shows (`locktype = 'advisory'`, the key's high and
   * low 32 bits as `classid` and `objid`), for operators and tests.
   */
  get livenessLock(): { lock: string; pids: number[] } {
    return { lock: this.liveness.lock, pids: this.liveness.pids };
  }

  // No global `maxRecords` here, and never `full` from a count: counting every record would
  // cost a scan. The global cap is the operator's disk; a full one is reported as `full`.
  async claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number, continuation = false): Promise<Claim> {
    const lease = milliseconds(leaseMs);
    const liveness = this.liveness;
    if (liveness.refused) throw new StoreUnavailableError(liveness.refused);
    // Fail closed while no session holds the lock: a claim stamped with it would look dead at
    // once. (The claim function checks again as it writes, for a session lost on the way.)
    if (!liveness.held) throw new StoreUnavailableError(new Error('no liveness session to Postgres'));
    const token = randomUUID();
    let row: Row | undefined;
    try {
      row = await this.one(this.sql.claim, [
        id.scope,
        id.idempotencyKey,
        fingerprint,
        token,
        lease,
        continuation,
        liveness.lock,
        this.maxRecordsPerScope,
        this.maxBytesPerScope,
      ]);
    } catch (error) {
      if (isDiskFull(error)) return { state: 'full' };
      if (error instanceof pg.DatabaseError && error.code === SHARED_SESSION) {
        throw new StoreUnavailableError(liveness.refuse());
      }
      // Fail closed. A statement that timed out may still have claimed the key; its retry
      // then sees `inProgress` until the lease ends, which is the safe side to err on. One the
      // claim function refused (LIVENESS_NOT_HELD: no session held the lock) wrote nothing.
      throw new StoreUnavailableError(error);
    }
    const answer = row?.answer;
    // A continuation's ticket carries nothing more: the row itself keeps what `release` puts back.
    if (answer === 'claimed' || answer === 'resumed') {
      return {
        state: 'claimed',
        ticket: { scope: id.scope, idempotencyKey: id.idempotencyKey, fingerprint, token },
      };
    }
    if (answer === 'quota') return { state: 'quotaExceeded' };
    return claimOf(row);
  }

  complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, 'completed', response, retentionMs);
  }

  awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, 'awaitingInput', response, retentionMs);
  }

  /** Begins the claim's transaction (see the file header), once; the tool writes through it. */
  async begin(ticket: ClaimTicket): Promise<pg.PoolClient> {
    const open = this.transactions.get(ticket.token);
    if (open) return open;
    let client: pg.PoolClient;
    try {
      // The pool's connectionTimeoutMillis bounds the wait for a connection.
      client = await this.pool.connect();
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
    // A checked-out client has no listener of the pool's: if its connection breaks while the
    // tool holds it (Postgres restarted mid-call), the unheard 'error' would kill the process.
    // Heard, it only fails the transaction's next statement, and the call fails closed.
    client.on('error', this.options.onError);
    try {
      await this.bounded(client.query('BEGIN ISOLATION LEVEL READ COMMITTED'));
    } catch (error) {
      this.releaseTransaction(client, true);
      throw new StoreUnavailableError(error);
    }
    this.transactions.set(ticket.token, client);
    return client;
  }

  async release(ticket: ClaimTicket): Promise<boolean> {
    await this.rollback(ticket);
    try {
      const row = await this.one(this.sql.release, [ticket.scope, ticket.idempotencyKey, ticket.token]);
      return row?.released === true;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  async renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    const lease = milliseconds(leaseMs);
    try {
      const result = await this.bounded(
        this.pool.query(this.sql.renew, [ticket.scope, ticket.idempotencyKey, ticket.token, lease]),
      );
      return result.rowCount === 1;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /** Deletes every record of this store's table (never the table, never anything else). */
  async clear(): Promise<void> {
    try {
      await this.bounded(this.pool.query(this.sql.clear));
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /**
   * Deletes the expired records in the whole table, one statement per few megabytes of it, and
   * answers how many went: what every instance does every `reapIntervalMs`. Rejects with
   * `StoreUnavailableError` if a statement fails; the next walk starts over.
   */
  async reap(): Promise<number> {
    let reaped = 0;
    let block = 0;
    try {
      do {
        const row = await this.one(this.sql.reap, [block, REAP_BLOCKS_PER_STATEMENT]);
        reaped += Number(row?.reaped ?? 0);
        block = Number(row?.next_block ?? 0);
      } while (block > 0 && !this.closing);
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
    return reaped;
  }

  /** Reaps every `intervalMs`, one walk at a time, until the store closes; failures go to `onError`. */
  private reapEvery(intervalMs: number): void {
    if (this.closing) return;
    this.reapTimer = setTimeout(() => {
      this.reap()
        .catch(this.options.onError)
        .finally(() => this.reapEvery(intervalMs));
    }, intervalMs);
    // The reaper alone must not keep a server's process alive.
    this.reapTimer.unref();
  }

  /** Creates the schema if it is missing (what `connect` does unless told `migrate: false`). */
  async migrate(): Promise<void> {
    try {
      await this.bounded(migratePostgresStore(this.pool, this.tablePrefix));
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /**
   * Closes the pool and the liveness sessions. The claims this store still holds then look
   * dead to every other instance, which is what they are.
   */
  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.reapTimer);
    await Promise.all([this.liveness.close(), this.pool.ended ? undefined : this.pool.end().catch(() => {})]);
  }

  /** Replaces the claim with a completed or awaiting-input record, kept for `retentionMs`. */
  private async settle(
    ticket: ClaimTicket,
    state: 'completed' | 'awaitingInput',
    response: StoredResponse,
    retentionMs: number,
  ): Promise<boolean> {
    const retention = milliseconds(retentionMs);
    const json = JSON.stringify(response);
    const values = [ticket.scope, ticket.idempotencyKey, ticket.token, state, json, json.length, retention];
    const tx = this.transactions.get(ticket.token);
    if (tx) {
      this.transactions.delete(ticket.token);
      const settled = await this.settleIn(tx, values);
      if (settled !== 'aborted') return settled;
      // A statement of the tool's failed, so its transaction could only roll back: nothing it
      // wrote stands, and its answer (which says so, or should) is recorded on its own.
    }
    try {
      const row = await this.one(this.sql.settle, values);
      return row?.settled === true;
    } catch (error) {
      throw new StoreUnavailableError(error);
    }
  }

  /**
   * Records the response in the tool's transaction and commits both, in one round trip; rolls both
   * back if the claim lost its key meanwhile. 'aborted' when a statement of the tool's had already
   * failed the transaction.
   */
  private async settleIn(tx: pg.PoolClient, values: unknown[]): Promise<boolean | 'aborted'> {
    // Pipelined: COMMIT is sent before the record's answer comes back. A record that fails (its
    // claim lost the key, or the transaction was already failed) makes Postgres answer that
    // COMMIT with ROLLBACK, so the COMMIT's answer says what stands.
    const [recorded, committed] = await Promise.allSettled([
      this.bounded(tx.query(this.sql.settleOrFail, values)),
      this.bounded(tx.query('COMMIT')),
    ]);
    if (committed.status === 'rejected') {
      // Whether COMMIT took is unknown: the connection is in no state to reuse. Both committed,
      // or neither did; the caller is told to retry, which replays or executes once.
      this.releaseTransaction(tx, true);
      throw new StoreUnavailableError(committed.reason);
    }
    this.releaseTransaction(tx, false);
    // Committed: the record took, since one that failed would have rolled the commit back.
    if (committed.value.command === 'COMMIT') return true;
    const failure = recorded.status === 'rejected' ? recorded.reason : undefined;
    const code = failure instanceof pg.DatabaseError ? failure.code : undefined;
    if (code === CLAIM_LOST) return false;
    // A statement of the tool's failed, so its transaction could only roll back: nothing it
    // wrote stands, and its answer (which says so, or should) is recorded on its own.
    if (code === IN_FAILED_SQL_TRANSACTION) return 'aborted';
    // Rolled back for another reason: neither stands, and the caller is told to retry.
    throw new StoreUnavailableError(failure ?? new Error(`COMMIT answered ${committed.value.command}`));
  }

  /** Rolls back the claim's transaction, if its tool began one: nothing it wrote stands. */
  private async rollback(ticket: ClaimTicket): Promise<void> {
    const tx = this.transactions.get(ticket.token);
    if (!tx) return;
    this.transactions.delete(ticket.token);
    try {
      await this.bounded(tx.query('ROLLBACK'));
      this.releaseTransaction(tx, false);
    } catch {
      // A connection that cannot roll back is destroyed, and Postgres rolls back for it.
      this.releaseTransaction(tx, true);
    }
  }

  /** Hands a transaction's connection back (`destroy`: closes it instead), without `begin`'s listener. */
  private releaseTransaction(tx: pg.PoolClient, destroy: boolean): void {
    tx.removeListener('error', this.options.onError);
    tx.release(destroy);
  }

  /** The first row a statement answers, if any, within the statement timeout. */
  private async one(text: string, values: unknown[]): Promise<Row | undefined> {
    const result = await this.bounded(this.pool.query<Row>(text, values));
    return result.rows[0];
  }

  /**
   * Fails the call once the statement timeout has passed without a reply. `statement_timeout`
   * bounds only a statement Postgres runs, and `query_timeout` starts only once a connection
   * is had: neither bounds the whole call against a Postgres that accepts a connection and then
   * says nothing. If the reply never comes, `query_timeout` then gives its connection up.
   */
  private bounded<T>(query: Promise<T>): Promise<T> {
    return withDeadline(query, this.statementTimeoutMs, 'Postgres');
  }
}

/** SQLSTATE 25P02: a statement in the transaction failed, and every later one is refused. */
const IN_FAILED_SQL_TRANSACTION = '25P02';

/**
 * The transaction of the running tool call's record, for a tool that writes to the database the
 * Postgres store keeps its records in: write through it, and the writes commit with the record, or
 * neither. Undefined outside a keyed call guarded with a Postgres store: write as usual then.
 * The connection is pipelined, so a query that keeps a portal open (a cursor) is refused on it.
 */
export async function postgresTransaction(): Promise<pg.ClientBase | undefined> {
  const tx = await currentExecution()?.transaction();
  return tx instanceof pg.Client ? tx : undefined;
}

/** A row as a statement answers it: every column's value still to be checked. */
type Row = Record<string, unknown>;

/** The answer for a key someone else holds (see `claimOfHeld`): the response column is JSON text. */
function claimOf(row: Row | undefined): Claim {
  return claimOfHeld(
    { state: row?.answer, fingerprint: row?.fingerprint, response: parsedJson(row?.response) },
    JSON.stringify(row ?? null),
  );
}

/** Postgres refused a write because its disk is full (SQLSTATE 53100 disk_full). */
function isDiskFull(error: unknown): boolean {
  return error instanceof pg.DatabaseError && error.code === '53100';
}
