// --- An in-process dedup store ---
//
// Right for one process (stdio, or a single HTTP instance). A horizontally scaled,
// stateless deployment must share one store instead (redis/, postgres/): a
// retry that lands on another instance finds nothing in this one's memory.

import type { Fingerprint } from '../core/fingerprint.js';
import type { Claim, ClaimTicket, IdempotencyStore, RecordId, StoredResponse } from './contract.js';
import { milliseconds, positiveInteger, type ScopeQuotaOptions, scopeQuotasOf } from './support.js';

/** Default cap. Roughly 100 MB at 1 KB a record; over the 24 h retention, a keyed call a second. */
export const DEFAULT_MAX_RECORDS = 100_000;

/**
 * Default cap on what the stored responses add up to, in characters of their JSON. A count
 * alone does not bound memory: a response can echo its request (an unknown tool's error names
 * the tool), so 100,000 keyed calls with 4 MB names would pin 400 GB for the retention period.
 */
export const DEFAULT_MAX_BYTES = 256 * 1024 * 1024;

interface InProgressRecord {
  scope: string;
  fingerprint: Fingerprint;
  token: string;
  expiresAt: number;
  /** Characters still counted for the key: those of the awaiting-input record it resumed, else 0. */
  bytes: number;
  /** The awaiting-input record a continuation took over, put back if nothing ran. */
  resumed?: StoredRecord;
}

/** A completed or awaiting-input record: a response, kept until `expiresAt`. */
interface StoredRecord {
  scope: string;
  fingerprint: Fingerprint;
  response: StoredResponse;
  expiresAt: number;
  /** The response's size, counted against `maxBytes` until the record is evicted. */
  bytes: number;
}

export interface MemoryStoreOptions extends ScopeQuotaOptions {
  maxRecords?: number;
  /** Cap on the stored responses' total size (characters of JSON). */
  maxBytes?: number;
  /** A clock in milliseconds; monotonic by default so a wall-clock step cannot reorder expiry. Tests pass one they control. */
  now?: () => number;
}

/** What one scope holds, against its quota. */
interface ScopeUsage {
  records: number;
  bytes: number;
}

export class MemoryIdempotencyStore implements IdempotencyStore {
  readonly maxRecords: number;
  readonly maxBytes: number;
  readonly maxRecordsPerScope: number;
  readonly maxBytesPerScope: number;
  private readonly now: () => number;
  private bytes = 0;
  /** Claims made so far; the latest one's number is its token. */
  private claims = 0;
  /**
   * No stored record expires before this: a lower bound, lowered by every write and raised only
   * by a sweep. A claim sweeps only once it is reached, so most claims cost a comparison here
   * instead of an iterator over each of the three maps.
   */
  private nextExpiry = Number.POSITIVE_INFINITY;
  private readonly usage = new Map<string, ScopeUsage>();
  // One map per state, each in insertion order. A guard uses one lease and one retention per
  // state, so insertion order is expiry order and expired records are at the front: evicting
  // them costs O(1) per record, however many records are stored. Where it is not (guards with
  // other leases or retentions sharing the store; an awaiting-input record put back by `release`
  // with its original expiry), a record is also checked on lookup, so none outlives its expiry;
  // the sweep then reclaims its memory once the records before it have expired.
  private readonly inProgress = new Map<string, InProgressRecord>();
  private readonly awaiting = new Map<string, StoredRecord>();
  private readonly completed = new Map<string, StoredRecord>();

  constructor(options: MemoryStoreOptions = {}) {
    this.maxRecords = positiveInteger('maxRecords', options.maxRecords ?? DEFAULT_MAX_RECORDS);
    this.maxBytes = positiveInteger('maxBytes', options.maxBytes ?? DEFAULT_MAX_BYTES);
    const quotas = scopeQuotasOf(options);
    this.maxRecordsPerScope = quotas.maxRecordsPerScope;
    this.maxBytesPerScope = quotas.maxBytesPerScope;
    this.now = options.now ?? (() => performance.now());
  }

  /** Live and not-yet-evicted records together; bounded by `maxRecords`. */
  get size(): number {
    return this.inProgress.size + this.awaiting.size + this.completed.size;
  }

  async claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number, continuation = false): Promise<Claim> {
    // No await before the write below: in one event loop, check-then-set is atomic.
    const now = this.now();
    this.evictExpired(now);
    const slot = slotOf(id);

    // Each record is checked for expiry as it is found, not only swept from the front: guards with
    // other leases or retentions may share this store, and then insertion order is not expiry order.
    const running = this.inProgress.get(slot);
    if (running && running.expiresAt > now) return { state: 'inProgress', fingerprint: running.fingerprint };
    if (running) this.forget(this.inProgress, slot, running);
    const done = this.completed.get(slot);
    if (done && done.expiresAt > now)
      return { state: 'completed', fingerprint: done.fingerprint, response: done.response };
    if (done) this.forget(this.completed, slot, done);
    const waiting = this.awaiting.get(slot);
    if (waiting && waiting.expiresAt > now) {
      if (!continuation || waiting.fingerprint !== fingerprint) {
        return { state: 'awaitingInput', fingerprint: waiting.fingerprint, response: waiting.response };
      }
      // The continuation takes the key over; the record stays counted, and comes back if nothing runs.
      this.awaiting.delete(slot);
      return this.claimSlot(slot, id, fingerprint, now + leaseMs, waiting);
    }
    if (waiting) this.forget(this.awaiting, slot, waiting);

    // Full of live records: refuse. Evicting one would let its retry execute a second time.
    // (A response's size is known only once it exists, so the byte cap can be passed by the
    // last response taken; that one is bounded by the request size limit.)
    if (this.size >= this.maxRecords || this.bytes >= this.maxBytes) return { state: 'full' };
    // The caller's own quota, checked after the global cap: a full store is everyone's answer.
    const usage = this.usage.get(id.scope);
    if (usage && (usage.records >= this.maxRecordsPerScope || usage.bytes >= this.maxBytesPerScope)) {
      return { state: 'quotaExceeded' };
    }
    if (usage) usage.records += 1;
    else this.usage.set(id.scope, { records: 1, bytes: 0 });
    return this.claimSlot(slot, id, fingerprint, now + leaseMs, undefined);
  }

  async complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, this.completed, response, retentionMs);
  }

  async awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.settle(ticket, this.awaiting, response, retentionMs);
  }

  async release(ticket: ClaimTicket): Promise<boolean> {
    const slot = slotOf(ticket);
    const running = this.inProgress.get(slot);
    if (running?.token !== ticket.token) return false;
    this.inProgress.delete(slot);
    const { resumed } = running;
    // Back as it was, with its own expiry: nothing ran, so nothing about the key changed.
    if (resumed && resumed.expiresAt > this.now()) this.keep(this.awaiting, slot, resumed);
    else this.forget(undefined, slot, running);
    return true;
  }

  async renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    const slot = slotOf(ticket);
    const running = this.inProgress.get(slot);
    if (running?.token !== ticket.token) return false;
    const now = this.now();
    if (running.expiresAt <= now) return false;
    // Re-inserted, not updated in place: with one lease for every claim, the end of the map is
    // where the latest expiry belongs, so insertion order stays expiry order.
    this.inProgress.delete(slot);
    this.keep(this.inProgress, slot, { ...running, expiresAt: now + leaseMs });
    return true;
  }

  async clear(): Promise<void> {
    this.inProgress.clear();
    this.awaiting.clear();
    this.completed.clear();
    this.usage.clear();
    this.bytes = 0;
    this.nextExpiry = Number.POSITIVE_INFINITY;
  }

  /** Live records and stored characters of one scope, for its quota. */
  usageOfScope(scope: string): Readonly<ScopeUsage> {
    return this.usage.get(scope) ?? { records: 0, bytes: 0 };
  }

  private claimSlot(
    slot: string,
    id: RecordId,
    fingerprint: Fingerprint,
    expiresAt: number,
    resumed: StoredRecord | undefined,
  ): Claim {
    // Unique among this store's claims, which is all a token must be: the store is in process, so
    // a counter is enough, with no call into the CSPRNG per claim.
    const token = String(++this.claims);
    const bytes = resumed ? resumed.bytes : 0;
    this.keep(this.inProgress, slot, { scope: id.scope, fingerprint, token, expiresAt, bytes, resumed });
    // Members written out, not `{ ...id, fingerprint, token }`: V8 takes a slow path for a
    // spread followed by more members (docs/cost.md).
    const ticket = { scope: id.scope, idempotencyKey: id.idempotencyKey, fingerprint, token };
    return { state: 'claimed', ticket };
  }

  /** Replaces a live claim with a stored response in `records` (completed or awaiting input). */
  private settle(
    ticket: ClaimTicket,
    records: Map<string, StoredRecord>,
    response: StoredResponse,
    retentionMs: number,
  ): boolean {
    // The longest retention every store takes, refused before anything changes.
    const retention = milliseconds(retentionMs);
    const slot = slotOf(ticket);
    const running = this.inProgress.get(slot);
    if (running?.token !== ticket.token) return false;
    // Measured before anything changes: a response JSON cannot hold (a BigInt, a cycle) throws
    // here and leaves the claim as it was, counted until its lease ends, never dropped uncounted.
    const bytes = JSON.stringify(response).length;
    this.inProgress.delete(slot);
    // The key may already count the bytes of the awaiting-input record it resumed.
    this.bytes += bytes - running.bytes;
    this.usageOf(ticket.scope).bytes += bytes - running.bytes;
    this.keep(records, slot, {
      scope: ticket.scope,
      fingerprint: ticket.fingerprint,
      response,
      expiresAt: this.now() + retention,
      bytes,
    });
    return true;
  }

  /** Drop every expired record: SEP retention, after which the same key may execute again. */
  private evictExpired(now: number): void {
    if (now < this.nextExpiry) return;
    this.nextExpiry = Math.min(
      this.evictExpiredFront(this.inProgress, now),
      this.evictExpiredFront(this.awaiting, now),
      this.evictExpiredFront(this.completed, now),
    );
  }

  /** Evicts the expired front of `records`; answers the expiry of the first record left. */
  private evictExpiredFront(records: Map<string, InProgressRecord | StoredRecord>, now: number): number {
    for (const [slot, record] of records) {
      if (record.expiresAt > now) return record.expiresAt;
      this.forget(records, slot, record);
    }
    return Number.POSITIVE_INFINITY;
  }

  /** Writes a record, keeping `nextExpiry` a lower bound of every stored record's expiry. */
  private keep<R extends InProgressRecord | StoredRecord>(
    records: Map<string, R>,
    slot: string,
    record: R,
  ): void {
    records.set(slot, record);
    if (record.expiresAt < this.nextExpiry) this.nextExpiry = record.expiresAt;
  }

  /** Removes a record (from `records`, if it is still there) and what it counted against the caps. */
  private forget(
    records: Map<string, InProgressRecord | StoredRecord> | undefined,
    slot: string,
    record: InProgressRecord | StoredRecord,
  ): void {
    records?.delete(slot);
    this.bytes -= record.bytes;
    const usage = this.usageOf(record.scope);
    usage.records -= 1;
    usage.bytes -= record.bytes;
    // A scope with nothing left is forgotten, so many callers cannot grow this map for good.
    if (usage.records === 0) this.usage.delete(record.scope);
  }

  private usageOf(scope: string): ScopeUsage {
    let usage = this.usage.get(scope);
    if (!usage) {
      usage = { records: 0, bytes: 0 };
      this.usage.set(scope, usage);
    }
    return usage;
  }
}

// The scope's length up front keeps (scope, key) pairs distinct whatever characters either
// contains ("a" + "bc" is "1:abc", "ab" + "c" is "2:abc"), at a fraction of JSON.stringify's cost.
function slotOf(id: RecordId): string {
  return `${id.scope.length}:${id.scope}${id.idempotencyKey}`;
}
