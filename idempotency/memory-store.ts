// --- An in-process dedup store ---
//
// Right for one process (stdio, or a single HTTP instance). A horizontally scaled,
// stateless deployment must share one store instead (see redis-store.ts): a retry that
// lands on another instance finds nothing in this one's memory.

import { randomUUID } from 'node:crypto';
import type { Fingerprint } from './fingerprint.js';
import type { Claim, ClaimTicket, IdempotencyStore, RecordId, StoredResponse } from './store.js';

/** Default cap. Roughly 100 MB at the demo's response size; 333 keyed calls/s for 300 s. */
export const DEFAULT_MAX_RECORDS = 100_000;

/**
 * Default cap on what the stored responses add up to, in characters of their JSON. A count
 * alone does not bound memory: a response can echo its request (an unknown tool's error names
 * the tool), so 100,000 keyed calls with 4 MB names would pin 400 GB for the retention period.
 */
export const DEFAULT_MAX_BYTES = 256 * 1024 * 1024;

interface InProgressRecord {
  fingerprint: Fingerprint;
  token: string;
  expiresAt: number;
}

interface CompletedRecord {
  fingerprint: Fingerprint;
  response: StoredResponse;
  expiresAt: number;
  /** The response's size, counted against `maxBytes` until the record is evicted. */
  bytes: number;
}

export interface MemoryStoreOptions {
  maxRecords?: number;
  /** Cap on the stored responses' total size (characters of JSON). */
  maxBytes?: number;
  /** A clock in milliseconds; monotonic by default so a wall-clock step cannot reorder expiry. Tests pass one they control. */
  now?: () => number;
}

export class MemoryIdempotencyStore implements IdempotencyStore {
  readonly maxRecords: number;
  readonly maxBytes: number;
  private readonly now: () => number;
  private bytes = 0;
  // Two maps, each in insertion order. The guard uses one lease and one retention, so
  // insertion order is expiry order and expired records are always at the front: evicting
  // them costs O(1) per record, however many records are stored.
  private readonly inProgress = new Map<string, InProgressRecord>();
  private readonly completed = new Map<string, CompletedRecord>();

  constructor(options: MemoryStoreOptions = {}) {
    this.maxRecords = options.maxRecords ?? DEFAULT_MAX_RECORDS;
    if (!Number.isSafeInteger(this.maxRecords) || this.maxRecords < 1) {
      throw new RangeError(`maxRecords must be a positive integer, got ${this.maxRecords}`);
    }
    this.maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
    if (!Number.isSafeInteger(this.maxBytes) || this.maxBytes < 1) {
      throw new RangeError(`maxBytes must be a positive integer, got ${this.maxBytes}`);
    }
    this.now = options.now ?? (() => performance.now());
  }

  /** Live and not-yet-evicted records together; bounded by `maxRecords`. */
  get size(): number {
    return this.inProgress.size + this.completed.size;
  }

  async claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number): Promise<Claim> {
    // No await before the write below: in one event loop, check-then-set is atomic.
    const now = this.now();
    this.evictExpired(now);
    const slot = slotOf(id);

    const running = this.inProgress.get(slot);
    if (running) return { state: 'inProgress', fingerprint: running.fingerprint };
    const done = this.completed.get(slot);
    if (done) return { state: 'completed', fingerprint: done.fingerprint, response: done.response };

    // Full of live records: refuse. Evicting one would let its retry execute a second time.
    // (A response's size is known only once it exists, so the byte cap can be passed by the
    // last response taken; that one is bounded by the request size limit.)
    if (this.size >= this.maxRecords || this.bytes >= this.maxBytes) return { state: 'full' };

    const token = randomUUID();
    this.inProgress.set(slot, { fingerprint, token, expiresAt: now + leaseMs });
    // Members written out, not `{ ...id, fingerprint, token }`: V8 (Node 20) takes a slow
    // path for a spread followed by more members, about 2 µs, a fifth of the guard's cost.
    const ticket = { scope: id.scope, idempotencyKey: id.idempotencyKey, fingerprint, token };
    return { state: 'claimed', ticket };
  }

  async complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    const slot = slotOf(ticket);
    if (this.inProgress.get(slot)?.token !== ticket.token) return false;
    this.inProgress.delete(slot);
    const bytes = JSON.stringify(response).length;
    this.bytes += bytes;
    this.completed.set(slot, {
      fingerprint: ticket.fingerprint,
      response,
      expiresAt: this.now() + retentionMs,
      bytes,
    });
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
    this.inProgress.set(slot, { ...running, expiresAt: now + leaseMs });
    return true;
  }

  async clear(): Promise<void> {
    this.inProgress.clear();
    this.completed.clear();
    this.bytes = 0;
  }

  /** Drop every expired record: SEP retention, after which the same key may execute again. */
  private evictExpired(now: number): void {
    evictExpiredFront(this.inProgress, now);
    this.bytes -= evictExpiredFront(this.completed, now);
  }
}

/** Returns the bytes the evicted records held. */
function evictExpiredFront(records: Map<string, { expiresAt: number; bytes?: number }>, now: number): number {
  let freed = 0;
  for (const [slot, record] of records) {
    if (record.expiresAt > now) break;
    records.delete(slot);
    freed += record.bytes ?? 0;
  }
  return freed;
}

// The scope's length up front keeps (scope, key) pairs distinct whatever characters either
// contains ("a" + "bc" is "1:abc", "ab" + "c" is "2:abc"), at a fraction of JSON.stringify's cost.
function slotOf(id: RecordId): string {
  return `${id.scope.length}:${id.scope}${id.idempotencyKey}`;
}
