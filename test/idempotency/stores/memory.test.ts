// What only the memory store can get wrong. The store contract every store keeps is
// test/idempotency/stores/contract.test.ts; here, its expiry, kept in insertion order, which is expiry order
// only while every claim has one lease and every record one retention; a response it cannot hold;
// and its global caps, which bind however many callers stay under their own quotas.

import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore, type RecordId, type StoredResponse } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../support/in-process.js';
import { LEASE_MS, RETENTION_MS } from '../../support/store-fixtures.js';

const RESULT: StoredResponse = { result: { content: [{ type: 'text', text: 'ok' }] } };
const id = (idempotencyKey: string) => ({ scope: 'alice', idempotencyKey });

const QUOTA = 3;
const alice = (): RecordId => ({ scope: 'principal:alice', idempotencyKey: randomUUID() });

/** Claims and completes a fresh key of `id`'s scope, as an execution would. */
async function execute(store: MemoryIdempotencyStore, id: RecordId, response = RESULT): Promise<string> {
  const claim = await store.claim(id, 'fingerprint', LEASE_MS);
  if (claim.state === 'claimed') await store.complete(claim.ticket, response, RETENTION_MS);
  return claim.state;
}

describe('a memory store shared by guards with different leases and retentions', () => {
  it('frees a short lease on time though a longer one was claimed before it', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now });
    // Two holders that die without completing: one with a 10 s lease, then one with 1 s.
    expect((await store.claim(id('long'), 'fingerprint', 10_000)).state).toBe('claimed');
    expect((await store.claim(id('short'), 'fingerprint', 1_000)).state).toBe('claimed');

    clock.advance(1_001);
    expect((await store.claim(id('short'), 'fingerprint', 1_000)).state).toBe('claimed');
    expect((await store.claim(id('long'), 'fingerprint', 10_000)).state).toBe('inProgress');
  });

  it('stops replaying a short retention on time though a longer one was recorded before it', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now });
    for (const [key, retentionMs] of [
      ['long', 60_000],
      ['short', 1_000],
    ] as const) {
      const claim = await store.claim(id(key), 'fingerprint', 10_000);
      if (claim.state !== 'claimed') throw new Error(claim.state);
      await store.complete(claim.ticket, RESULT, retentionMs);
    }

    clock.advance(1_001);
    expect((await store.claim(id('short'), 'fingerprint', 10_000)).state).toBe('claimed');
    expect((await store.claim(id('long'), 'fingerprint', 10_000)).state).toBe('completed');
    // The expired record was forgotten, with its place in the caller's quota.
    expect(store.usageOfScope('alice').records).toBe(2);
  });
});

describe('a response the memory store cannot hold', () => {
  it('keeps its claim counted until the lease ends, then gives the caller its quota back', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now, maxRecordsPerScope: QUOTA });
    // JSON has no BigInt: such a response can be neither stored nor sent.
    const unstorable: StoredResponse = { result: { balance: 10n } };
    for (let i = 0; i < QUOTA; i++) {
      const claim = await store.claim(alice(), 'fingerprint', LEASE_MS);
      if (claim.state !== 'claimed') throw new Error(`expected a claim, got ${claim.state}`);
      await expect(store.complete(claim.ticket, unstorable, RETENTION_MS)).rejects.toThrow(TypeError);
    }
    expect(store.usageOfScope('principal:alice').records).toBe(QUOTA);
    expect(await execute(store, alice())).toBe('quotaExceeded');
    clock.advance(LEASE_MS + 1);
    expect(await execute(store, alice())).toBe('claimed');
    expect(store.size).toBe(1);
    expect(store.usageOfScope('principal:alice').records).toBe(1);
  });
});

describe('many callers, each under its quota, stay within the global caps', () => {
  const principal = (n: number): RecordId => ({ scope: `principal:p${n}`, idempotencyKey: randomUUID() });

  it('in the memory store: its record cap and byte cap bind, and nothing is left of a caller once its records expire', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now, maxRecords: 50, maxBytes: 20_000 });
    const answers = [];
    for (let n = 0; n < 500; n++) answers.push(await execute(store, principal(n)));
    expect(answers.indexOf('full')).toBe(50);
    expect(answers.filter((a) => a === 'claimed')).toHaveLength(50);
    clock.advance(LEASE_MS + RETENTION_MS);
    const huge: StoredResponse = { result: { content: [{ type: 'text', text: 'x'.repeat(6_000) }] } };
    const hugeAnswers = [];
    for (let n = 0; n < 20; n++) hugeAnswers.push(await execute(store, principal(n), huge));
    // Past 20,000 characters the next caller is refused, however far under its own quota.
    expect(hugeAnswers.indexOf('full')).toBe(4);
    clock.advance(LEASE_MS + RETENTION_MS);
    expect(await execute(store, principal(0))).toBe('claimed');
    expect(store.size).toBe(1);
    for (let n = 1; n < 500; n++) expect(store.usageOfScope(`principal:p${n}`).records).toBe(0);
  });
});
