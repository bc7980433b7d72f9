// What every store test hands a store, and the steps each takes: the contract suite
// (`store-contract.ts`) and each store's own file share them, so a response replayed by one is
// the response replayed by all.

import { randomUUID } from 'node:crypto';
import {
  type Claim,
  type ClaimTicket,
  type IdempotencyStore,
  type RecordId,
  type StoredResponse,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { expect } from 'vitest';

export const LEASE_MS = 120_000;
export const RETENTION_MS = 300_000;
/** Short enough to watch a backend expire a record within a test. */
export const SHORT_MS = 200;

export const FINGERPRINT = 'fingerprint-of-charge_guarded(100)';
export const OTHER_FINGERPRINT = 'fingerprint-of-charge_guarded(999)';

/** A result with what JSON can hold, and what a careless store would change: every kind of value, non-ASCII text, `_meta`. */
export const RESULT: StoredResponse = {
  result: {
    content: [{ type: 'text', text: 'Charged 100. New balance: 100 — “ok” \u{1F4B3}' }],
    structuredContent: { charged: 100, balance: 100, ratio: 0.1, nothing: null, list: [1, 'two', false] },
    isError: false,
    _meta: { 'example.com/trace': { id: 'abc' } },
  },
};

/** A JSON-RPC error with data: errors replay too (SEP-3182). */
export const ERROR: StoredResponse = {
  error: { code: -32603, message: 'provider timed out', data: { retryable: true, detail: [null, 0] } },
};

export const newId = (scope = 'alice'): RecordId => ({ scope, idempotencyKey: randomUUID() });

/** What a claim answers for a key whose call, under FINGERPRINT, completed with `response`: its replay. */
export const replayOf = (response: StoredResponse): Claim => ({
  state: 'completed',
  fingerprint: FINGERPRINT,
  response,
});

export async function claimTicket(
  store: IdempotencyStore,
  id: RecordId,
  leaseMs = LEASE_MS,
): Promise<ClaimTicket> {
  const claim = await store.claim(id, FINGERPRINT, leaseMs);
  if (claim.state !== 'claimed') throw new Error(`expected a claim, got ${claim.state}`);
  return claim.ticket;
}

/** The claim of a continuation that takes over `id`'s awaiting-input record. */
export async function continuationTicket(store: IdempotencyStore, id: RecordId): Promise<ClaimTicket> {
  const claim = await store.claim(id, FINGERPRINT, LEASE_MS, true);
  if (claim.state !== 'claimed') throw new Error(`expected the continuation's claim, got ${claim.state}`);
  return claim.ticket;
}

export async function expectUnavailableWithin(ms: number, action: () => Promise<unknown>): Promise<void> {
  const started = performance.now();
  await expect(action()).rejects.toBeInstanceOf(StoreUnavailableError);
  expect(performance.now() - started).toBeLessThan(ms);
}

/**
 * `store`, but its `renew` extends no lease and answers `answer`: false for an instance that died
 * (its renewal timer never fires; a late completion still arrives), true for a store that says it
 * renewed and did not, the lease running out all the same.
 */
export function neverRenewing(store: IdempotencyStore, answer: boolean): IdempotencyStore {
  return {
    claim: (id, fingerprint, leaseMs) => store.claim(id, fingerprint, leaseMs),
    complete: (ticket, response, retentionMs) => store.complete(ticket, response, retentionMs),
    awaitInput: (ticket, response, retentionMs) => store.awaitInput(ticket, response, retentionMs),
    release: (ticket) => store.release(ticket),
    renew: () => Promise.resolve(answer),
    clear: () => store.clear(),
  };
}
