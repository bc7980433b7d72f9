// Stopping without abandoning a claim: `ClaimsInFlight` counts the claims still open, and
// `settled` waits for them, so a server told to stop records every running call first.

import { ClaimsInFlight, fingerprintToolCall, MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';

const LEASE_MS = 60_000;

function fingerprintOf(amount: number) {
  const result = fingerprintToolCall('charge_guarded', { amount });
  if (!result.ok) throw new Error(result.reason);
  return result.fingerprint;
}

async function claimed(claims: ClaimsInFlight, idempotencyKey: string) {
  const claim = await claims.claim({ scope: 'alice', idempotencyKey }, fingerprintOf(100), LEASE_MS);
  if (claim.state !== 'claimed') throw new Error(`expected a claim, got ${claim.state}`);
  return claim.ticket;
}

describe('claims in flight', () => {
  it('counts a claim settled twice (completed, then released) as closed once', async () => {
    const claims = new ClaimsInFlight(new MemoryIdempotencyStore());
    // The guard's path when a transactional record fails: complete, then release, one ticket.
    const first = await claimed(claims, 'settled-twice');
    await claims.complete(first, { result: { content: [] } }, 60_000);
    await claims.release(first);
    expect(claims.open).toBe(0);

    const running = await claimed(claims, 'still-running');
    expect(claims.open).toBe(1);
    let stopped = false;
    const stopping = claims.settled(30_000).then(() => {
      stopped = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(stopped).toBe(false);

    await claims.complete(running, { result: { content: [] } }, 60_000);
    await stopping;
    expect(stopped).toBe(true);
    expect(claims.open).toBe(0);
  });

  it('closes a claim the store refused or answered with a record at once', async () => {
    const claims = new ClaimsInFlight(new MemoryIdempotencyStore());
    const ticket = await claimed(claims, 'k');
    await claims.claim({ scope: 'alice', idempotencyKey: 'k' }, fingerprintOf(100), LEASE_MS);
    expect(claims.open).toBe(1);
    await claims.release(ticket);
    expect(claims.open).toBe(0);
  });
});
