// --- What every store does alike, written once ---
//
// The contract is `contract.ts`; this is the code the stores share to keep it, so each store file
// holds only what is its backend's own (as Powertools' persistence layers share theirs):
//   - its options checked by one rule, in one wording: a quota one store refuses, every store refuses;
//   - every call to a networked backend bounded by a deadline, and reconnected with one back-off;
//   - a record read back from a backend turned into the guard's answer, anything unreadable failing
//     closed, never read as a free key.
// Internal to the package: each store imports it; it is no subpath of its own.

import {
  type Claim,
  type ClaimTicket,
  DEFAULT_MAX_BYTES_PER_SCOPE,
  DEFAULT_MAX_RECORDS_PER_SCOPE,
  type IdempotencyStore,
  MAX_RETENTION_MS,
  type StoredResponse,
  StoreUnavailableError,
} from './contract.js';

// --- Options ---

/** The quota of one scope (one caller), as every store takes it. */
export interface ScopeQuotaOptions {
  /** Quota of one scope (one caller): live records. */
  maxRecordsPerScope?: number;
  /** Quota of one scope: characters of stored responses. */
  maxBytesPerScope?: number;
}

/**
 * The quotas a store keeps, the defaults filled in. A quota that is no positive whole number is
 * refused when the store is made: zero would refuse every caller's first keyed call, and a negative
 * or NaN one would be compared against the caller's count as nonsense, silently.
 */
export function scopeQuotasOf(options: ScopeQuotaOptions): Required<ScopeQuotaOptions> {
  return {
    maxRecordsPerScope: positiveInteger(
      'maxRecordsPerScope',
      options.maxRecordsPerScope ?? DEFAULT_MAX_RECORDS_PER_SCOPE,
    ),
    maxBytesPerScope: positiveInteger(
      'maxBytesPerScope',
      options.maxBytesPerScope ?? DEFAULT_MAX_BYTES_PER_SCOPE,
    ),
  };
}

/** A count, a cap or a bound in whole milliseconds: `value`, or a RangeError naming the option. */
export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1)
    throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

/**
 * A lease or retention as a backend takes it: a positive whole number of milliseconds (Redis' PX,
 * a Postgres interval), at most `MAX_RETENTION_MS`. The guard has checked both; a fraction is
 * rounded up, so a record never lives shorter than asked.
 */
export function milliseconds(ms: number): number {
  if (!Number.isFinite(ms) || ms <= 0) throw new RangeError(`not a positive duration in ms: ${ms}`);
  if (ms > MAX_RETENTION_MS)
    throw new RangeError(`a duration of ${ms} ms is past the longest a store keeps, ${MAX_RETENTION_MS} ms`);
  return Math.ceil(ms);
}

// --- Calls to a backend ---

/**
 * Rejects once `ms` have passed without an answer from `backend` (named in the error); the losing
 * promise's own outcome is still handled by `race`. A store's bound on each call: past it, the
 * caller is told "nothing ran, retry with the same key" instead of waiting on a backend that hangs.
 */
export async function withDeadline<T>(promise: Promise<T>, ms: number, backend: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reply from ${backend} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Ceiling of the reconnect back-off: a recovered backend serves claims again within about a second. */
const MAX_RECONNECT_DELAY_MS = 1_000;

/**
 * How long to wait before reconnect attempt `attempt` (0 first): exponential back-off from 50 ms to
 * 1 s, with jitter so a fleet of instances does not reconnect in lockstep.
 */
export function reconnectDelayMs(attempt: number): number {
  return Math.min(50 * 2 ** attempt, MAX_RECONNECT_DELAY_MS) + Math.floor(Math.random() * 100);
}

// --- Reading a record back ---

/** A record as a backend gives it back: its state, its fingerprint and its response, all unchecked. */
export interface HeldRecord {
  state?: unknown;
  fingerprint?: unknown;
  /** The stored response as parsed JSON (see `parsedJson`); unread for an in-progress record. */
  response?: unknown;
}

/**
 * The answer for a key someone else holds. Anything unreadable fails closed: a record the store
 * cannot read may be a completed call, and reading it as free would execute it again. `shown` is
 * what the error quotes of it, for the operator (a function: made only when the error is).
 */
export function claimOfHeld(record: HeldRecord, shown: string | (() => string)): Claim {
  const { state, fingerprint } = record;
  if (typeof fingerprint === 'string') {
    if (state === 'inProgress') return { state, fingerprint };
    const response = storedResponseOf(record.response);
    if ((state === 'completed' || state === 'awaitingInput') && response)
      return { state, fingerprint, response };
  }
  const text = typeof shown === 'string' ? shown : shown();
  throw new StoreUnavailableError(new Error(`unreadable idempotency record: ${text.slice(0, 200)}`));
}

/** A JSON text's value, or undefined if `text` is not JSON text. */
export function parsedJson(text: unknown): unknown {
  if (typeof text !== 'string') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A stored response from its parsed JSON, exactly as it was stored, or undefined if it is not one. */
function storedResponseOf(value: unknown): StoredResponse | undefined {
  if (!isPlainObject(value)) return undefined;
  const { result, error } = value;
  if (isPlainObject(result)) return { result };
  if (!isPlainObject(error)) return undefined;
  const { code, message } = error;
  if (typeof code !== 'number' || typeof message !== 'string') return undefined;
  // `data` is optional: present (even as null) only if the original had it.
  return Object.hasOwn(error, 'data')
    ? { error: { code, message, data: error.data } }
    : { error: { code, message } };
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Releases the claim of a call that recorded nothing. If the store fails to, the release is tried
 * again in the background, backing off from 100 ms to 5 s, until it succeeds or the lease would
 * have ended anyway: a claim left standing after a short store stall would answer every retry "in
 * progress" for the rest of its lease, though nothing holds it.
 */
export async function releaseSoon(
  store: IdempotencyStore,
  ticket: ClaimTicket,
  leaseMs: number,
): Promise<boolean> {
  try {
    return await store.release(ticket);
  } catch (error) {
    const deadline = performance.now() + leaseMs;
    const retry = (delayMs: number) => {
      if (performance.now() + delayMs >= deadline) return;
      // A process with nothing else to do may exit: its claim then ends with its lease.
      setTimeout(
        () => store.release(ticket).catch(() => retry(Math.min(delayMs * 2, 5_000))),
        delayMs,
      ).unref();
    };
    retry(100);
    throw error;
  }
}
