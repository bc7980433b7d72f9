// --- A dedup store in a SQLite file: records that outlive the process, on one machine ---
//
// Most MCP servers run over stdio, started by a desktop or IDE host, with no database server.
// The memory store forgets every record when such a process crashes, and the client's retry then
// executes again. This store keeps the records in a file: the same contract as the other stores
// (../contract.ts), the same answers, quotas and size bound, proven by the same suite. Any number of
// server processes on one machine may share the file; they are the instances.
//   claim    = a read; only a key that is free (absent, expired, or held by a dead process) takes
//              a write transaction: "the record if there is one; else, within the caller's quota,
//              my claim, with a lease, naming my process"
//   complete = a write transaction: "replace it only if it is still my claim"   (`awaitInput`
//              the same, writing an awaiting-input record; `release` its undo)
//   renew    = one UPDATE "extend its lease only if it is still my claim"
// A replay, a conflict and an in-progress answer are one read, which no writer blocks (WAL); a
// first execution is two short write transactions.
//
// --- Two commits, not one held across the tool ---
// One BEGIN IMMEDIATE held from the claim to the record would save the second commit (an fsync at
// FULL; docs/cost.md has what it would save). It is not taken, because an uncommitted claim is invisible to every other process: a duplicate
// there finds no record, must write to claim, and waits on the file's write lock instead of
// answering in progress at once; every other first execution, in every process, waits for the
// tool; and a tool that hangs (or a process stopped, not dead) holds the lock with no lease to end
// it, so every process fails closed past its busy timeout. The store cannot know a tool will be
// short before it runs. Two commits keep a claim one row that others read, under a lease.
//
// --- One writer at a time, and nobody waits with the event loop held ---
// SQLite lets one connection write at a time; readers never wait (WAL). Every write transaction
// here is BEGIN IMMEDIATE (the file's write lock taken first, so two processes can never both read
// a key as free and then both write it: of N concurrent claims exactly one is claimed) and runs to
// its COMMIT synchronously, with no await inside: nothing else in the process interleaves either.
// A write that finds the lock held (SQLITE_BUSY) is tried again after a short sleep, never with
// SQLite's own busy handler, which would sleep with the event loop held: a server waiting for the
// file still answers its other calls. Past `busyTimeoutMs` the call fails closed
// (`StoreUnavailableError`): nothing ran, retry later with the same key; never a second execution.
// Within one process the writers also queue on a lock of the process's own (one per file), so a
// claim behind a tool's open transaction waits its turn instead of polling for it.
//
// --- A dead holder is seen at once ---
// Each claim names its holder process: its pid, its start time and its host (liveness.ts
// says why a pid alone is not enough). A claim that finds an in-progress record whose holder is
// gone takes the key as free at once; a live holder, however slow, still answers in progress, and
// the lease stays the backstop (a holder this machine cannot judge: another pid namespace).
//
// --- A step of the wall clock ---
// Times in the file are the wall clock's, which every process and every restart reads alike, and
// which NTP, or a VM or laptop resumed, may step. A claim's lease is also kept on its machine's
// monotonic clock (liveness.ts: one clock for every process of a boot, never stepped), and a
// claimant of the same machine judges a live holder's lease by that clock alone: a step forward
// past the lease neither frees the key of a call still running nor fails its renewal or record.
// What a step can still do: forward, end completed and awaiting-input records early (retention
// is on the wall clock; a retry after it executes again), and end the lease of a holder this
// machine cannot judge (another pid namespace or boot, or a system other than Linux), whose key
// another process may then take while it runs; backward, lengthen both by the step.
//
// --- Durability: synchronous = NORMAL by default, chosen ---
// WAL, and `PRAGMA synchronous = NORMAL`: a commit is written to the WAL file, not fsynced; the
// WAL is fsynced at each checkpoint. What that keeps:
//   - A process crash (SIGKILL, OOM, a host that kills its stdio server): every committed record
//     survives. The commit is in the kernel's page cache, which a dying process does not take
//     with it. This is the failure a stdio server meets, and the one this store is for.
//   - A power loss or kernel crash: the file stays consistent (never corrupt), but the commits of
//     the last seconds may be lost (the kernel writes the WAL out by itself within about 30 s,
//     Linux's dirty_expire_centisecs, checkpoint or not). A record so lost lets its retry execute
//     again. A tool whose writes go to the same file in the record's transaction loses them with
//     it (both or neither, still); a tool calling a provider is covered by its `providerKey`.
// `synchronous: 'full'` fsyncs the WAL at every commit, so a record acknowledged survives a power
// loss too, at the cost of an fsync per write transaction, two per first execution (the bench
// compares both over stdio, docs/sqlite.md). NORMAL is the default because the process crash is
// the failure to survive, and two fsyncs would cost a stdio call more than the whole guard does.
//
// --- The tool's writes and the record, in one transaction ---
// A tool whose writes go to the same file may ask for the call's transaction: its writes commit
// with the record, or neither does (transaction.ts says how, and what it costs every other claim).
//
// --- Schema ---
// Plain SQL (sql.ts), created at open, or migrated from an older schema; a file that is not a
// SQLite database, or holds a schema this store did not write, is refused with an error that says
// so, and never reset. The tables are named `sep3182_idem_*`, so the file may hold a server's own
// tables too.

import { randomUUID } from 'node:crypto';
import { realpathSync, type Stats, statSync } from 'node:fs';
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
} from '../support.js';
import {
  SqliteConnection,
  type SqliteDriverName,
  type SqlRow,
  sqliteCodeOf,
  sqliteDriverName,
} from './driver.js';
import { configure, migrate, type SqliteSynchronous, transact, unavailable, untilNotBusy } from './file.js';
import {
  CLEAR_SEEN_WITHIN_MS,
  type KnownReplays,
  leftInProcess,
  type ProcessWriteLock,
  sharedInProcess,
  slotOf,
} from './in-process.js';
import { isGone, monotonicMs, type ProcessIdentity, THIS_PROCESS } from './liveness.js';
import { SQL } from './sql.js';
import {
  readOwn,
  type SqliteStatements,
  type SqliteTransaction,
  ToolTransactions,
  writeOwn,
} from './transaction.js';

export type { SqliteDriverName, SqlRow, SqlValue } from './driver.js';
export type { SqliteSynchronous } from './file.js';
export { type SqliteStatements, SqliteTransaction, sqliteTransaction } from './transaction.js';

/**
 * How long a write waits for the file's write lock before the call fails closed. Another claim
 * holds it for its own few statements; a tool writing in its record's transaction, for as long as
 * that tool runs after its first write (a slow charge: about a second). Five seconds outlasts any
 * tool that keeps its transaction short, and is still an answer a caller can act on ("retry
 * later, same key") rather than a hang.
 */
export const DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 5_000;

export const DEFAULT_SQLITE_SYNCHRONOUS: SqliteSynchronous = 'normal';

/**
 * Every this many claims that write, a claim also looks at the next SWEEP_ROWS records (in key
 * order, wrapping round) and deletes those that have expired: a caller that never comes back
 * leaves no records behind for good. A caller's own expired records go sooner, when its quota
 * needs the room.
 */
const SWEEP_EVERY = 64;

/** What SQLite's page size makes of `maxFileBytes` (the default page size, which the store keeps). */
const PAGE_BYTES = 4_096;

export interface SqliteStoreOptions extends ScopeQuotaOptions {
  /** How long a write waits for the file's write lock before the call fails closed. */
  busyTimeoutMs?: number;
  /** What a commit survives: a process crash (`normal`, the default) or a power loss too (`full`). */
  synchronous?: SqliteSynchronous;
  /**
   * The file's size bound, in bytes (`PRAGMA max_page_count`, in pages of 4 KiB): at it, a claim
   * answers `full` rather than evict a live record. Unset: the disk is the bound, and a full disk
   * answers `full` the same way.
   */
  maxFileBytes?: number;
  /** A clock in ms since the epoch (default `Date.now`), shared by every store on the file. Tests pass one they control. */
  now?: () => number;
  /**
   * The machine's monotonic clock in ms, which no wall-clock step moves and every process of a
   * boot reads alike (default: CLOCK_MONOTONIC on Linux, none elsewhere). Leases of this
   * machine's claims are judged by it. Tests pass one they control, beside `now`.
   */
  monotonic?: () => number;
}

// --- The store ---

/** A record as the store reads it back, checked. */
interface HeldRow {
  state: unknown;
  fingerprint: unknown;
  response: unknown;
  bytes: number;
  expiresAt: number;
  holder: ProcessIdentity | undefined;
  /** An in-progress claim's lease on its holder machine's monotonic clock, if it has one. */
  leaseUntil: number | undefined;
}

/** What a claim's write decided. */
type ClaimDecision = Claim | { state: 'mine'; token: string };

export class SqliteIdempotencyStore implements IdempotencyStore {
  readonly maxRecordsPerScope: number;
  readonly maxBytesPerScope: number;
  /** The binding this store runs on (node:sqlite, or better-sqlite3 where Node has no SQLite). */
  readonly driver: SqliteDriverName;
  private readonly busyTimeoutMs: number;
  private readonly now: () => number;
  private readonly monotonic: () => number | null;
  private readonly lock: ProcessWriteLock;
  /** The completed records this process knows of the file: their replays need no read. */
  private readonly replays: KnownReplays;
  /** The file's real path: what this process's stores on it share is under it. */
  private readonly realPath: string;
  /** Checks, while it remembers replays, whether another process cleared the file. */
  private readonly clearsCheck: NodeJS.Timeout;
  /** The transactions its tools write through (transaction.ts). */
  private readonly tools: ToolTransactions;
  /** Claims this store holds now (by token): on `close`, they are left to be taken at once. */
  private readonly held = new Set<string>();
  private claimsWritten = 0;
  /** Where the sweep goes on from: the last record it looked at. */
  private sweptTo: [string, string] = ['', ''];
  private closed = false;

  private constructor(
    /** The file, as given. */
    readonly path: string,
    private readonly db: SqliteConnection,
    /** The file's identity when opened: a file deleted or replaced under the store is refused. */
    private readonly identity: Stats,
    private readonly options: SqliteStoreOptions & { synchronous: SqliteSynchronous; maxPages?: number },
  ) {
    const quotas = scopeQuotasOf(options);
    this.maxRecordsPerScope = quotas.maxRecordsPerScope;
    this.maxBytesPerScope = quotas.maxBytesPerScope;
    this.busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_SQLITE_BUSY_TIMEOUT_MS;
    this.now = options.now ?? Date.now;
    this.monotonic = options.monotonic ?? monotonicMs;
    this.driver = db.driver;
    this.realPath = realpathSync(path);
    const shared = sharedInProcess(this.realPath);
    this.lock = shared.lock;
    this.replays = shared.replays;
    // The clear count the replays it will remember are checked against (the first store's, if shared).
    const clears = db.get('SELECT clears FROM sep3182_idem_schema')?.clears;
    if (typeof clears === 'number') this.replays.clears ??= clears;
    this.clearsCheck = setInterval(() => this.seeClears(), CLEAR_SEEN_WITHIN_MS);
    // A server with nothing else to do may exit.
    this.clearsCheck.unref();
    this.tools = new ToolTransactions({
      path,
      lock: this.lock,
      busyTimeoutMs: this.busyTimeoutMs,
      connect: () => this.connect(),
      checkStillThere: () => this.checkStillThere(),
    });
  }

  /**
   * Opens the file at `path` (creating it, and the schema, if missing; bringing an earlier schema
   * up to date). Rejects with `StoreUnavailableError` saying what is wrong with the file: it
   * cannot be opened or written, it is not a SQLite database, it holds a schema this store did
   * not write, or it stayed locked past `busyTimeoutMs`. Never resets a file.
   */
  static async open(path: string, options: SqliteStoreOptions = {}): Promise<SqliteIdempotencyStore> {
    // Options first, as every store checks them: a mistake is a RangeError, not an unusable file.
    scopeQuotasOf(options);
    const busyTimeoutMs = positiveInteger(
      'busyTimeoutMs',
      options.busyTimeoutMs ?? DEFAULT_SQLITE_BUSY_TIMEOUT_MS,
    );
    const synchronous = options.synchronous ?? DEFAULT_SQLITE_SYNCHRONOUS;
    if (synchronous !== 'normal' && synchronous !== 'full')
      throw new RangeError(`synchronous must be normal or full, got ${String(synchronous)}`);
    const maxPages =
      options.maxFileBytes === undefined
        ? undefined
        : Math.max(1, Math.floor(positiveInteger('maxFileBytes', options.maxFileBytes) / PAGE_BYTES));
    if (path === '' || path === ':memory:' || path.startsWith('file:'))
      throw new RangeError(
        `the SQLite store keeps its records in a file: give it a file path, got "${path}" (in memory, use MemoryIdempotencyStore)`,
      );
    const settings = { ...options, busyTimeoutMs, synchronous, maxPages };
    let db: SqliteConnection | undefined;
    try {
      if (statSync(path, { throwIfNoEntry: false })?.isDirectory())
        throw new Error(`${path} is a folder: give the store the path of a file in it`);
      db = SqliteConnection.open(path);
      const opened = db;
      await untilNotBusy(performance.now() + busyTimeoutMs, () => {
        configure(opened, settings);
        migrate(opened);
      });
      return new SqliteIdempotencyStore(path, opened, statSync(path), settings);
    } catch (error) {
      db?.close();
      throw unavailable(path, error);
    }
  }

  /** The binding `open` would use in this process: `node:sqlite`, or `better-sqlite3` on Node 20. */
  static get driver(): SqliteDriverName {
    return sqliteDriverName();
  }

  async claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number, continuation = false): Promise<Claim> {
    const lease = milliseconds(leaseMs);
    // A completed record this process knows: replayed (or a conflict) with no read of the file.
    const known = this.replays.get(slotOf(id.scope, id.idempotencyKey), this.now());
    if (known) return { state: 'completed', fingerprint: known.fingerprint, response: known.response };
    const decide = (db: SqliteConnection) => this.claimIn(db, id, fingerprint, lease, continuation);
    let decision: ClaimDecision | undefined;
    try {
      // A read first, which no writer blocks: a replay, a conflict and an in-progress answer end
      // there. When this process has no other writer under way, the read opens the transaction
      // that writes the claim, if the key is free; else (or if another process is writing) the
      // claim waits its turn for the write lock, and reads again under it.
      decision = this.lock.tryTake()
        ? this.claimAtOnce(decide)
        : this.answerWithoutWriting(id, fingerprint, continuation);
      decision ??= await this.write(decide);
    } catch (error) {
      // At its size bound (or the disk's), refuse rather than evict a live record.
      if (sqliteCodeOf(error) === 'SQLITE_FULL') return { state: 'full' };
      throw unavailable(this.path, error);
    }
    if (decision.state !== 'mine') return decision;
    this.held.add(decision.token);
    // A continuation's ticket carries nothing more: the row itself keeps what `release` puts back.
    const ticket = { scope: id.scope, idempotencyKey: id.idempotencyKey, fingerprint, token: decision.token };
    return { state: 'claimed', ticket };
  }

  complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, 'completed', response, retentionMs);
  }

  awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, 'awaitingInput', response, retentionMs);
  }

  /** Begins the claim's transaction (transaction.ts), once; the tool writes through it. */
  begin(ticket: ClaimTicket): Promise<SqliteTransaction> {
    return this.tools.begin(ticket.token);
  }

  async release(ticket: ClaimTicket): Promise<boolean> {
    this.held.delete(ticket.token);
    this.tools.rollback(ticket.token);
    try {
      return await this.write((db) => this.releaseIn(db, ticket));
    } catch (error) {
      throw unavailable(this.path, error);
    }
  }

  async renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    const lease = milliseconds(leaseMs);
    const renew = (db: SqliteConnection) => {
      const { now, mine } = this.mine(ticket);
      const { pid, started, host } = THIS_PROCESS;
      return (
        db.run(SQL.renew, now + lease, pid, started, host, leaseOn(this.monotonic(), lease), ...mine) === 1
      );
    };
    try {
      // The call's own transaction holds the file: renewed in it, committed with the record.
      const own = this.tools.connectionOf(ticket.token);
      const renewed = own ? renew(own) : await this.write(renew);
      if (!renewed) this.held.delete(ticket.token);
      return renewed;
    } catch (error) {
      throw unavailable(this.path, error);
    }
  }

  /** Deletes every record and every caller's usage (never the tables, never the file). */
  async clear(): Promise<void> {
    try {
      const clears = await this.write((db) => {
        db.run('DELETE FROM sep3182_idem_records');
        db.run('DELETE FROM sep3182_idem_usage');
        // Every process that remembers replays of the file sees this, and forgets them.
        return db.get('UPDATE sep3182_idem_schema SET clears = clears + 1 RETURNING clears')?.clears;
      });
      this.replays.forgetAll(typeof clears === 'number' ? clears : undefined);
    } catch (error) {
      throw unavailable(this.path, error);
    }
  }

  /**
   * Runs `work` in a write transaction of its own on the file (committed when it returns, rolled
   * back if it throws), waiting its turn for the write lock: for a server's writes to its own
   * tables outside a keyed call (a keyed call's tool writes through `sqliteTransaction()`).
   */
  transaction<T>(work: (db: SqliteStatements) => T): Promise<T> {
    return writeOwn(this.path, (write) => this.write(write), work);
  }

  /**
   * Runs `work` on one snapshot of the file (a read transaction): it waits for no writer, in this
   * process or another, and no writer waits for it. For a server's reads of its own tables; a
   * statement that would write is refused (`PRAGMA query_only`).
   */
  async read<T>(work: (db: SqliteStatements) => T): Promise<T> {
    return readOwn(this.path, this.db, work);
  }

  /**
   * Closes the file. The claims this store still holds are left to be taken at once, as a process
   * that exits leaves them: their holder is marked gone.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.clearsCheck);
    this.tools.close();
    const held = [...this.held];
    this.held.clear();
    if (held.length > 0) {
      await this.write((db) => {
        for (const token of held) db.run(SQL.orphan, token);
      }).catch(() => {
        // Unwritable now: the claims then end with their lease, as a crashed process's would.
      });
    }
    this.db.close();
    leftInProcess(this.realPath);
  }

  /**
   * Forgets the replays this process knows once another process has cleared the file (its clear
   * count changed), or once the count cannot be read: every CLEAR_SEEN_WITHIN_MS, while it knows any.
   */
  private seeClears(): void {
    if (this.replays.size === 0) return;
    let clears: unknown;
    try {
      clears = this.db.get('SELECT clears FROM sep3182_idem_schema')?.clears;
    } catch {
      // Unreadable now: forget them, rather than answer from them unchecked.
    }
    if (typeof clears !== 'number') this.replays.forgetAll(undefined);
    else if (this.replays.clears === undefined) this.replays.clears = clears;
    else if (clears !== this.replays.clears) this.replays.forgetAll(clears);
  }

  // --- Each operation's transaction ---

  /**
   * The claim in one deferred transaction, with this process's lock held: its read, and if the key
   * is free its writes, which take SQLite's write lock then. Undefined if another process holds
   * that lock, or wrote since the read (SQLITE_BUSY): nothing was written, and the claim waits.
   */
  private claimAtOnce(decide: (db: SqliteConnection) => ClaimDecision): ClaimDecision | undefined {
    try {
      return transact(this.db, decide, 'BEGIN');
    } catch (error) {
      if (sqliteCodeOf(error) === 'SQLITE_BUSY') return undefined;
      throw error;
    } finally {
      this.lock.give();
    }
  }

  /** The answer for a key someone holds, read without a lock; undefined when the claim must write. */
  private answerWithoutWriting(
    id: RecordId,
    fingerprint: Fingerprint,
    continuation: boolean,
  ): Claim | undefined {
    let row: SqlRow | undefined;
    try {
      row = this.db.get(SQL.find, id.scope, id.idempotencyKey);
    } catch (error) {
      // Locked for a moment (a WAL being recovered): the write waits its turn and reads again.
      if (sqliteCodeOf(error) === 'SQLITE_BUSY') return undefined;
      throw error;
    }
    return row && this.answerOf(id, heldRow(row), this.now(), fingerprint, continuation);
  }

  /** `answerOf`, remembering a completed record it reads, for its next replay. */
  private answerOf(
    id: RecordId,
    held: HeldRow,
    now: number,
    fingerprint: Fingerprint,
    continuation: boolean,
  ): Claim | undefined {
    const answer = answerOf(held, now, this.monotonic(), fingerprint, continuation);
    if (answer?.state === 'completed') {
      const replay = { ...answer, expiresAt: held.expiresAt, characters: held.bytes };
      this.replays.remember(slotOf(id.scope, id.idempotencyKey), replay);
    }
    return answer;
  }

  /** The claim, in a write transaction: the record's state read, and decided. */
  private claimIn(
    db: SqliteConnection,
    id: RecordId,
    fingerprint: Fingerprint,
    leaseMs: number,
    continuation: boolean,
  ): ClaimDecision {
    const now = this.now();
    const found = db.get(SQL.find, id.scope, id.idempotencyKey);
    const held = found && heldRow(found);
    const answer = held && this.answerOf(id, held, now, fingerprint, continuation);
    if (answer) return answer;
    this.checkStillThere();
    const token = randomUUID();
    const leaseEnd = now + leaseMs;
    const { pid, started, host } = THIS_PROCESS;
    const live = held !== undefined && held.expiresAt > now;
    if (live && held.state === 'awaitingInput') {
      // The continuation takes the key over; the record's response and size stay, for release.
      const monotonicEnd = leaseOn(this.monotonic(), leaseMs);
      db.run(SQL.resume, token, leaseEnd, pid, started, host, monotonicEnd, id.scope, id.idempotencyKey);
      db.run(SQL.count, id.scope, 0, 0, leaseEnd);
      return { state: 'mine', token };
    }
    // The key is free: no row, an expired one, or one whose holder died. Within the caller's
    // quota, without this key's own row, which the claim replaces.
    const ownRecords = held ? 1 : 0;
    const ownBytes = held?.bytes ?? 0;
    if (this.overQuota(db, id, now, ownRecords, ownBytes)) return { state: 'quotaExceeded' };
    const monotonicEnd = leaseOn(this.monotonic(), leaseMs);
    const values = [
      id.scope,
      id.idempotencyKey,
      fingerprint,
      leaseEnd,
      token,
      pid,
      started,
      host,
      monotonicEnd,
    ] as const;
    db.run(SQL.claim, ...values);
    db.run(SQL.count, id.scope, 1 - ownRecords, -ownBytes, leaseEnd);
    this.claimsWritten += 1;
    if (this.claimsWritten % SWEEP_EVERY === 0) this.sweep(db, now);
    return { state: 'mine', token };
  }

  /**
   * Whether the caller holds its quota of records or of characters, besides `own` (the row the
   * claim replaces). Its usage row counts expired rows too, until they are deleted: so a caller at
   * its quota whose rows may have expired (`next_expiry` has passed) has them deleted and counted
   * exactly first, once per expiry at most.
   */
  private overQuota(
    db: SqliteConnection,
    id: RecordId,
    now: number,
    ownRecords: number,
    ownBytes: number,
  ): boolean {
    const usage = db.get(SQL.usage, id.scope);
    const over = (records: number, bytes: number) =>
      records - ownRecords >= this.maxRecordsPerScope || bytes - ownBytes >= this.maxBytesPerScope;
    if (!usage || !over(integer(usage.records), integer(usage.bytes))) return false;
    if (now < integer(usage.next_expiry)) return true;
    db.run(SQL.pruneScope, id.scope, id.idempotencyKey, ...expiredAt(now, this.monotonic()));
    const exact = db.get(SQL.recount, id.scope);
    const records = integer(exact?.records);
    const bytes = integer(exact?.bytes);
    const next = exact?.next_expiry;
    db.run(SQL.setUsage, records, bytes, typeof next === 'number' ? next : now, id.scope);
    db.run(SQL.forgetEmpty, id.scope);
    return over(records, bytes);
  }

  /** Deletes the expired among the next SWEEP_ROWS records, whoever's, and uncounts them. */
  private sweep(db: SqliteConnection, now: number): void {
    const expired = db.all(SQL.sweep, ...this.sweptTo, ...expiredAt(now, this.monotonic()));
    const last = db.get(SQL.sweptTo, ...this.sweptTo);
    // Past the last record, round again from the first.
    this.sweptTo = last ? [String(last.scope), String(last.idempotency_key)] : ['', ''];
    for (const row of expired) {
      const scope = String(row.scope);
      if (db.run(SQL.sweepOne, scope, String(row.idempotency_key), ...expiredAt(now, this.monotonic())) === 0)
        continue;
      db.run(SQL.uncount, -1, -integer(row.bytes), scope);
      db.run(SQL.forgetEmpty, scope);
    }
  }

  /** Replaces the claim with a completed or awaiting-input record, kept for `retentionMs`. */
  private async settle(
    ticket: ClaimTicket,
    state: 'completed' | 'awaitingInput',
    response: StoredResponse,
    retentionMs: number,
  ): Promise<boolean> {
    const retention = milliseconds(retentionMs);
    // Measured before anything changes: a response JSON cannot hold throws here, the claim as it was.
    const json = JSON.stringify(response);
    this.held.delete(ticket.token);
    const record = (db: SqliteConnection) => this.settleIn(db, ticket, state, json, retention);
    // Committed, a completed record is known for its replays.
    const recorded = (expiresAt: number | undefined) => {
      if (expiresAt === undefined) return false;
      if (state === 'completed') {
        const { fingerprint } = ticket;
        const replay = { fingerprint, response, expiresAt, characters: json.length };
        this.replays.remember(slotOf(ticket.scope, ticket.idempotencyKey), replay);
      }
      return true;
    };
    // In the tool's transaction, if it began one: the tool's writes commit with the record.
    const inTools = this.tools.commitWith(ticket.token, record);
    if (inTools) return recorded(inTools.recorded);
    try {
      return recorded(await this.write(record));
    } catch (error) {
      // At the file's size bound the response cannot be kept, now or on any retry: the key then
      // answers `full` for the record's retention, rather than each retry after the lease
      // executing again to the same end. (The marker is smaller than the claim it replaces.)
      if (sqliteCodeOf(error) === 'SQLITE_FULL')
        await this.write((db) => this.markFullIn(db, ticket, retention)).catch(() => {});
      throw unavailable(this.path, error);
    }
  }

  /** The claim replaced by a record of no response: its key answers `full` (see `answerOf`). */
  private markFullIn(db: SqliteConnection, ticket: ClaimTicket, retentionMs: number): void {
    const { now, mine } = this.mine(ticket);
    const claim = db.get(SQL.mine, ...mine);
    if (!claim) return;
    const expiresAt = now + retentionMs;
    db.run(SQL.markFull, expiresAt, ...mine);
    db.run(SQL.count, ticket.scope, 0, -integer(claim.bytes), expiresAt);
  }

  /** The clock's reading now, and the parameters of SQL's MINE for `ticket`'s claim. */
  private mine(ticket: ClaimTicket) {
    const now = this.now();
    return { now, mine: [ticket.scope, ticket.idempotencyKey, ticket.token, now, this.monotonic()] as const };
  }

  /** The claim settled, in a write transaction: the record's expiry, or undefined if the claim lost its key. */
  private settleIn(
    db: SqliteConnection,
    ticket: ClaimTicket,
    state: 'completed' | 'awaitingInput',
    json: string,
    retentionMs: number,
  ): number | undefined {
    const { now, mine } = this.mine(ticket);
    const claim = db.get(SQL.mine, ...mine);
    if (!claim) return undefined;
    const expiresAt = now + retentionMs;
    db.run(SQL.settle, state, json, json.length, expiresAt, ...mine);
    // The key may already count the bytes of the awaiting-input record it resumed.
    db.run(SQL.count, ticket.scope, 0, json.length - integer(claim.bytes), expiresAt);
    return expiresAt;
  }

  /** Nothing ran: a fresh claim's row goes; a continuation's puts back the record it took over. */
  private releaseIn(db: SqliteConnection, ticket: ClaimTicket): boolean {
    const { mine } = this.mine(ticket);
    const claim = db.get(SQL.mine, ...mine);
    if (!claim) return false;
    const resumedUntil = claim.resumed_until;
    if (typeof resumedUntil === 'number') {
      // With its own expiry: nothing ran, so nothing about the key changed. (Passed already, the
      // record is as good as gone, and the next claim of the key or the sweep deletes it.)
      db.run(SQL.putBack, ...mine);
      db.run(SQL.count, ticket.scope, 0, 0, resumedUntil);
    } else {
      db.run(SQL.release, ...mine);
      db.run(SQL.uncount, -1, -integer(claim.bytes), ticket.scope);
      db.run(SQL.forgetEmpty, ticket.scope);
    }
    return true;
  }

  // --- The file's write lock, in turn ---

  /**
   * Runs `work` in a write transaction (BEGIN IMMEDIATE … COMMIT), once this process's other
   * writers of the file are done and SQLite's lock is free, within `busyTimeoutMs`. `work` is
   * synchronous: nothing else runs between its reads and its writes, here or in another process.
   */
  private async write<T>(work: (db: SqliteConnection) => T): Promise<T> {
    const deadline = performance.now() + this.busyTimeoutMs;
    if (!this.lock.tryTake()) await this.lock.take(deadline);
    try {
      return await untilNotBusy(deadline, () => transact(this.db, work));
    } finally {
      this.lock.give();
    }
  }

  /** A second connection to the file, set up as the first (for tools' transactions). */
  private connect(): SqliteConnection {
    const db = SqliteConnection.open(this.path);
    try {
      configure(db, this.options);
    } catch (error) {
      db.close();
      throw error;
    }
    return db;
  }

  /**
   * Refuses to write once the file at `path` is no longer the one the store opened (deleted,
   * or replaced): SQLite would go on writing to the deleted file, where no other process looks,
   * and a retry there would execute again. (A stat before each claim that writes.)
   */
  private checkStillThere(): void {
    const now = statSync(this.path, { throwIfNoEntry: false });
    if (now?.ino !== this.identity.ino || now.dev !== this.identity.dev)
      throw new Error(`${this.path} was deleted or replaced while the store had it open`);
  }
}

/** The answer for a held key that needs no write, or undefined when the claim must write. */
function answerOf(
  held: HeldRow,
  now: number,
  monotonic: number | null,
  fingerprint: Fingerprint,
  continuation: boolean,
) {
  if (held.state === 'inProgress') {
    if (!held.holder || isGone(held.holder) || leaseOver(held, now, monotonic)) return undefined;
  } else if (held.expiresAt <= now) return undefined;
  if (held.state === 'awaitingInput' && continuation && held.fingerprint === fingerprint) return undefined;
  // A response too large for the file's bound was executed once and could not be kept.
  if (held.state === 'completed' && held.response === null) return { state: 'full' } as const;
  return claimOfHeld(
    { state: held.state, fingerprint: held.fingerprint, response: parsedJson(held.response) },
    () => JSON.stringify(held),
  );
}

/**
 * Whether an in-progress claim's lease has run out: on the monotonic clock of its machine, when
 * this process shares it (see the file header), else on the wall clock.
 */
function leaseOver(held: HeldRow, now: number, monotonic: number | null): boolean {
  const sameMachine = held.holder?.host === THIS_PROCESS.host;
  if (sameMachine && monotonic !== null && held.leaseUntil !== undefined) return held.leaseUntil <= monotonic;
  return held.expiresAt <= now;
}

/** A lease's end on the monotonic clock, if this machine has one. */
function leaseOn(monotonic: number | null, leaseMs: number): number | null {
  return monotonic === null ? null : monotonic + leaseMs;
}

/** SQL's EXPIRED parameters at `now`: a live claim of this machine's is not expired, whatever the wall clock says. */
function expiredAt(now: number, monotonic: number | null) {
  return [now, THIS_PROCESS.host, monotonic] as const;
}

/** A record's row, its numbers checked: one the store cannot read fails closed (`claimOfHeld`). */
function heldRow(row: SqlRow): HeldRow {
  const { holder_pid: pid, holder_started: started, holder_host: host } = row;
  return {
    state: row.state,
    fingerprint: row.fingerprint,
    response: row.response,
    bytes: integer(row.bytes),
    expiresAt: integer(row.expires_at),
    holder:
      typeof pid === 'number' && typeof host === 'string'
        ? { pid, started: typeof started === 'string' ? started : null, host }
        : undefined,
    leaseUntil: typeof row.holder_lease_until === 'number' ? row.holder_lease_until : undefined,
  };
}

/** A count or a time as SQLite gives it back; anything else fails closed. */
function integer(value: unknown): number {
  if (typeof value === 'number' && Number.isSafeInteger(value)) return value;
  if (typeof value === 'bigint') return Number(value);
  throw new StoreUnavailableError(new Error(`unreadable idempotency record: ${String(value)}`));
}
