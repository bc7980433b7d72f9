// A continuation's claim (core/continuation.ts), against the real memory store: a multi-round-trip
// continuation may take over only the record its opening round left awaiting input, with the same
// arguments. Every other key comes back as it was held, and a key nobody holds comes back
// `unopened` and free again, so a sealed requestState is never carried to a fresh key.

import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { claimContinuation } from '../../../packages/idempotency/core/continuation.js';
import { fingerprintToolCall } from '../../../packages/idempotency/core/fingerprint.js';
import { guardSettings } from '../../../packages/idempotency/core/options.js';

const id = { scope: 'local', idempotencyKey: 'k-1' };
const fingerprintOf = (args: Record<string, unknown>) => {
  const result = fingerprintToolCall('book', args);
  if (!result.ok) throw new Error(result.reason);
  return result.fingerprint;
};
const asked = fingerprintOf({ seats: 2 });
const other = fingerprintOf({ seats: 3 });
const question = { result: { resultType: 'input_required', inputRequests: {} } };
const answer = { result: { content: [{ type: 'text', text: 'booked' }] } };

/** A store, the guard's settings on it, and the key in the state `state` under `asked`. */
async function keyIn(state: 'free' | 'inProgress' | 'awaitingInput' | 'completed') {
  const store = new MemoryIdempotencyStore();
  const settings = guardSettings({ store });
  if (state !== 'free') {
    const opening = await store.claim(id, asked, settings.leaseMs);
    if (opening.state !== 'claimed') throw new Error(`could not open the key: ${opening.state}`);
    if (state === 'awaitingInput')
      await store.awaitInput(opening.ticket, question, settings.awaitingInputRetentionMs);
    if (state === 'completed') await store.complete(opening.ticket, answer, settings.retentionMs);
  }
  return { store, settings };
}

describe('a continuation', () => {
  it('takes over the key its opening round left awaiting input, with the same arguments', async () => {
    const { settings } = await keyIn('awaitingInput');
    const claim = await claimContinuation(id, asked, settings);
    expect(claim).toMatchObject({ state: 'claimed', ticket: { ...id, fingerprint: asked } });
  });

  it('holds the key while it runs: a second continuation of the same round is in progress', async () => {
    const { settings } = await keyIn('awaitingInput');
    await claimContinuation(id, asked, settings);
    expect(await claimContinuation(id, asked, settings)).toStrictEqual({
      state: 'inProgress',
      fingerprint: asked,
    });
  });

  it('with other arguments is given the awaiting record as it is, unclaimed (the guard answers conflict)', async () => {
    const { store, settings } = await keyIn('awaitingInput');
    expect(await claimContinuation(id, other, settings)).toStrictEqual({
      state: 'awaitingInput',
      fingerprint: asked,
      response: question,
    });
    // Still there for the continuation that does belong to it.
    expect((await store.claim(id, asked, settings.leaseMs, true)).state).toBe('claimed');
  });

  it('under a completed key is given the completed record, never claims it', async () => {
    const { settings } = await keyIn('completed');
    expect(await claimContinuation(id, asked, settings)).toStrictEqual({
      state: 'completed',
      fingerprint: asked,
      response: answer,
    });
  });

  it('under a key whose opening round is still running is told it is in progress', async () => {
    const { settings } = await keyIn('inProgress');
    expect(await claimContinuation(id, asked, settings)).toStrictEqual({
      state: 'inProgress',
      fingerprint: asked,
    });
  });

  it('under a key nobody holds is unopened, and leaves the key free for its opening round', async () => {
    const { store, settings } = await keyIn('free');
    expect(await claimContinuation(id, asked, settings)).toStrictEqual({ state: 'unopened' });
    expect((await store.claim(id, other, settings.leaseMs)).state).toBe('claimed');
  });

  it("under another caller's awaiting key is unopened: the record is scoped", async () => {
    const { settings } = await keyIn('awaitingInput');
    expect(await claimContinuation({ ...id, scope: 'someone-else' }, asked, settings)).toStrictEqual({
      state: 'unopened',
    });
  });
});
