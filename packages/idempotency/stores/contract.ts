// --- The dedup store contract ---
//
// Small and atomic on purpose: a claim, then one of three ways to settle it, are all the guard
// needs, so a backend can be added without touching the guard. Memory, a SQLite file, Redis (one
// or a Cluster) and Postgres ship here; another (DynamoDB, say) is a file of yours beside them, on
// the helpers they share (`support.ts`), held to the contract suite every store here passes (in
// the project's repository, not this package). `claim` must be atomic across every process
// sharing the store: of N concurrent claims of one (scope, key), exactly one may come back `claimed`.
//
// A key is in one of three states: in progress (a claim whose call runs), awaiting input (a
// multi-round-trip call answered `input_required`; the key waits for its continuation), or
// completed (the final response, replayed to every retry).

import type { Fingerprint } from '../core/fingerprint.js';

/**
 * Whatever the dispatch answered, kept so a retry gets the same bytes: a `result` (a
 * success or an `isError` tool result) or a JSON-RPC `error`. SEP: errors replay too.
 */
export type StoredResponse = { result: JsonObject } | { error: WireError };

/** A JSON-RPC `result`: whatever object the dispatch answered, kept as it was. */
export type JsonObject = { [key: string]: unknown };

/** A JSON-RPC `error` object. */
export interface WireError {
  code: number;
  message: string;
  data?: unknown;
}

/**
 * Records are scoped to the caller's authorization boundary (SEP-3182 security section):
 * one caller's key never replays another caller's result.
 */
export interface RecordId {
  scope: string;
  idempotencyKey: string;
}

/** Proof of a successful claim, handed back to `complete`, `awaitInput`, `renew` or `release`. */
export interface ClaimTicket extends RecordId {
  fingerprint: Fingerprint;
  /** Unique per claim, so a claim that outlived its lease cannot overwrite a newer one. */
  token: string;
  /** The awaiting-input record a continuation took over, for `release` to put back (the store's own). */
  resumed?: unknown;
}

export type Claim =
  | { state: 'claimed'; ticket: ClaimTicket }
  | { state: 'inProgress'; fingerprint: Fingerprint }
  /** A round answered `input_required`: the key waits for its continuation, holding that answer. */
  | { state: 'awaitingInput'; fingerprint: Fingerprint; response: StoredResponse }
  | { state: 'completed'; fingerprint: Fingerprint; response: StoredResponse }
  /** The cap is reached and nothing has expired: refuse rather than evict a live record. */
  | { state: 'full' }
  /** This caller's own quota of records is reached (SEP: servers SHOULD apply quotas to the records). */
  | { state: 'quotaExceeded' };

export interface IdempotencyStore {
  /**
   * If no live record exists for `id`, atomically record an in-progress claim that expires
   * after `leaseMs` and return `claimed`; otherwise return the live record untouched. One
   * exception: a `continuation` with the same fingerprint takes over an awaiting-input record,
   * as a claim (the record is already counted against the quota), and its ticket remembers the
   * record for `release`.
   */
  claim(id: RecordId, fingerprint: Fingerprint, leaseMs: number, continuation?: boolean): Promise<Claim>;
  /**
   * Replace the claim with the completed response, kept for `retentionMs`. Does nothing if
   * the claim is no longer the live record (the store was cleared, or its lease expired and
   * another claim took the key). A claim whose lease ran out with nothing in its place may
   * still be recorded (the memory store does, the safer side; in SQLite, Redis and Postgres the
   * claim is already gone).
   * Resolves true when the response was recorded, false when the claim had lost its key.
   */
  complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean>;
  /**
   * Replace the claim with an awaiting-input record: the round answered `input_required`, and
   * the key waits `retentionMs` for its continuation, holding that answer. Like `complete`, it
   * does nothing if the claim had lost its key, and resolves whether it recorded.
   */
  awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean>;
  /**
   * Undo the claim: nothing ran. The key goes back to what the claim took over (an
   * awaiting-input record, until its own expiry), or to no record at all. Does nothing if the
   * claim had lost its key; resolves whether it released.
   */
  release(ticket: ClaimTicket): Promise<boolean>;
  /**
   * Extend the claim's lease to `leaseMs` from now, if the claim still holds its key. The guard
   * renews while the call runs, so only the claim of a process that died ever expires. Resolves
   * false when the claim had lost its key (the store was cleared, or the lease had run out).
   */
  renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean>;
  /** Forget every record, and with them every caller's quota (a reset, for an operator or a test). */
  clear(): Promise<void>;
  /**
   * Optional, for a store whose records live where a tool can write too (a database): begins a
   * transaction for the claim and returns what the tool writes through. The claim's `complete` or
   * `awaitInput` then records the response in that transaction and commits it, the tool's writes
   * with it, or neither; `release` rolls it back. The guard calls it only when the running tool
   * asks (`ToolExecution.transaction`), so a tool that calls a foreign system holds no transaction.
   */
  begin?(ticket: ClaimTicket): Promise<unknown>;
}

/**
 * The longest lease or retention the guard and every store take: 100 years. A record's expiry is
 * now plus its retention, and each backend must store it exactly for every process that reads it
 * (SQLite's milliseconds since the epoch a safe integer, a Postgres timestamp, a Redis PX); a
 * retention past what one backend holds would be accepted by the guard and then fail the key
 * closed forever. Far beyond any provider's key retention (Stripe's is 24 hours).
 */
export const MAX_RETENTION_MS = 100 * 365.25 * 24 * 60 * 60 * 1000;

/**
 * Default quota of one caller (one scope), in every store: live records. A tenth of the memory
 * store's global cap, so no single caller can lock every other out of deduplication (the SEP:
 * servers SHOULD apply rate limits and quotas to the records); over the default 24 h retention,
 * a caller making a keyed call every nine seconds, day and night.
 */
export const DEFAULT_MAX_RECORDS_PER_SCOPE = 10_000;

/** Default quota of one caller: characters of stored responses, a sixteenth of the memory store's budget. */
export const DEFAULT_MAX_BYTES_PER_SCOPE = 16 * 1024 * 1024;

/** Thrown by a store that cannot be reached; the guard fails closed on it. */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`idempotency store unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
    this.name = 'StoreUnavailableError';
  }
}
