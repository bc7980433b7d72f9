// What only the memory store can get wrong: its expiry is kept in insertion order, which is expiry
// order only while every claim has one lease and every record one retention.

import { MemoryIdempotencyStore, type StoredResponse } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../processes/in-process.js';

const RESULT: StoredResponse = { result: { content: [{ type: 'text', text: 'ok' }] } };
const id = (idempotencyKey: string) => ({ scope: 'alice', idempotencyKey });

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
