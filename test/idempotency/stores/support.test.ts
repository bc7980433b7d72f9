// What every store does alike (stores/support.ts): options refused by one rule in one wording, each
// backend call bounded by a deadline naming the backend, a reconnect back-off that stays within a
// second, a record read back failing closed whenever it cannot be read, and a release the store
// failed retried in the background until the claim is free.

import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import {
  type ClaimTicket,
  type IdempotencyStore,
  MAX_RETENTION_MS,
  MemoryIdempotencyStore,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { describe, expect, it, vi } from 'vitest';
import {
  claimOfHeld,
  milliseconds,
  parsedJson,
  positiveInteger,
  reconnectDelayMs,
  releaseSoon,
  withDeadline,
} from '../../../packages/idempotency/stores/support.js';

describe('a count or a bound given to a store', () => {
  it('is taken when it is a positive safe integer, refused by name with the value otherwise', () => {
    const value = fc.oneof(
      fc.integer({ min: -1000, max: 1000 }),
      fc.double(),
      fc.constantFrom(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 1, Number.POSITIVE_INFINITY),
    );
    fc.assert(
      fc.property(value, (n) => {
        if (Number.isSafeInteger(n) && n >= 1) expect(positiveInteger('maxRecords', n)).toBe(n);
        else
          expect(() => positiveInteger('maxRecords', n)).toThrow(
            new RangeError(`maxRecords must be a positive integer, got ${n}`),
          );
      }),
    );
  });
});

describe('a lease or retention as a backend takes it', () => {
  it('is whole milliseconds, rounded up so a record never lives shorter than asked', () => {
    fc.assert(
      fc.property(fc.double({ min: Number.MIN_VALUE, max: MAX_RETENTION_MS, noNaN: true }), (ms) => {
        const taken = milliseconds(ms);
        expect(Number.isInteger(taken)).toBe(true);
        expect(taken).toBeGreaterThanOrEqual(ms);
        expect(taken - 1).toBeLessThan(ms);
      }),
    );
  });

  it('is refused when it is no positive duration, or longer than any store keeps', () => {
    for (const ms of [0, -1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => milliseconds(ms)).toThrow(RangeError);
    expect(() => milliseconds(MAX_RETENTION_MS + 1)).toThrow(
      `past the longest a store keeps, ${MAX_RETENTION_MS} ms`,
    );
  });
});

describe('a call to a backend under a deadline', () => {
  it("gives the backend's answer when it comes in time", async () => {
    expect(await withDeadline(Promise.resolve('OK'), 1_000, 'Redis')).toBe('OK');
  });

  it("gives the backend's own failure when it fails in time", async () => {
    await expect(withDeadline(Promise.reject(new Error('ECONNRESET')), 1_000, 'Redis')).rejects.toThrow(
      'ECONNRESET',
    );
  });

  it('is given up once the deadline passes, the error naming the backend and the bound', async () => {
    const started = performance.now();
    await expect(withDeadline(new Promise(() => {}), 30, 'Postgres')).rejects.toThrow(
      'no reply from Postgres within 30 ms',
    );
    // Node may fire a timer a millisecond or so before its time by performance.now().
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
  });
});

describe('the reconnect back-off', () => {
  it('doubles from 50 ms up to 1 s, with under 100 ms of jitter, for any attempt', () => {
    fc.assert(
      fc.property(fc.nat(10_000), (attempt) => {
        const delay = reconnectDelayMs(attempt);
        const base = Math.min(50 * 2 ** attempt, 1_000);
        expect(Number.isInteger(delay)).toBe(true);
        expect(delay).toBeGreaterThanOrEqual(base);
        expect(delay).toBeLessThan(base + 100);
      }),
    );
  });
});

describe('a record read back from a backend', () => {
  const result = { content: [{ type: 'text', text: 'Charged 100' }] };
  const error = { code: -32000, message: 'declined', data: null };

  it("is the claim it says, its response exactly as stored, an error's data kept even when null", () => {
    expect(claimOfHeld({ state: 'inProgress', fingerprint: 'f' }, '')).toStrictEqual({
      state: 'inProgress',
      fingerprint: 'f',
    });
    expect(claimOfHeld({ state: 'completed', fingerprint: 'f', response: { result } }, '')).toStrictEqual({
      state: 'completed',
      fingerprint: 'f',
      response: { result },
    });
    expect(claimOfHeld({ state: 'awaitingInput', fingerprint: 'f', response: { error } }, '')).toStrictEqual({
      state: 'awaitingInput',
      fingerprint: 'f',
      response: { error },
    });
    const { data: _, ...withoutData } = error;
    expect(
      claimOfHeld({ state: 'completed', fingerprint: 'f', response: { error: withoutData } }, ''),
    ).toStrictEqual({
      state: 'completed',
      fingerprint: 'f',
      response: { error: withoutData },
    });
  });

  it('fails closed as the store unavailable whenever any part cannot be read, never as a free key', () => {
    const unreadable = fc.oneof(
      fc.record({ state: fc.jsonValue(), fingerprint: fc.jsonValue(), response: fc.jsonValue() }),
      fc.record({
        state: fc.constantFrom('completed', 'awaitingInput'),
        fingerprint: fc.string(),
        response: fc.oneof(
          fc.jsonValue(),
          fc.record({ result: fc.oneof(fc.constant(null), fc.array(fc.jsonValue()), fc.string()) }),
          fc.record({ error: fc.record({ code: fc.string(), message: fc.string() }) }),
          fc.record({ error: fc.record({ code: fc.integer(), message: fc.integer() }) }),
        ),
      }),
    );
    // The model: readable only as the three shapes above.
    const readable = (r: { state: unknown; fingerprint: unknown; response: unknown }) => {
      if (typeof r.fingerprint !== 'string') return false;
      if (r.state === 'inProgress') return true;
      if (r.state !== 'completed' && r.state !== 'awaitingInput') return false;
      const response = r.response as {
        result?: unknown;
        error?: { code?: unknown; message?: unknown };
      } | null;
      const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
      if (!isObject(response)) return false;
      if (isObject(response?.result)) return true;
      return (
        isObject(response?.error) &&
        typeof response?.error?.code === 'number' &&
        typeof response?.error?.message === 'string'
      );
    };
    fc.assert(
      fc.property(unreadable, (record) => {
        fc.pre(!readable(record));
        expect(() => claimOfHeld(record, JSON.stringify(record))).toThrow(StoreUnavailableError);
      }),
    );
  });

  it('quotes at most 200 characters of what it could not read, for the operator', () => {
    const shown = `{"state":"${'x'.repeat(500)}"}`;
    try {
      claimOfHeld({ state: 'x'.repeat(500) }, () => shown);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).message).toBe(
        `idempotency store unavailable: unreadable idempotency record: ${shown.slice(0, 200)}`,
      );
    }
  });

  it('is parsed from JSON text, and anything else is no value at all', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(parsedJson(JSON.stringify(value))).toStrictEqual(JSON.parse(JSON.stringify(value)));
      }),
    );
    for (const text of ['{', '', 'undefined', 42, null, undefined]) expect(parsedJson(text)).toBeUndefined();
  });
});

describe('releasing the claim of a call that recorded nothing', () => {
  /** The real memory store, whose release fails the first `failures` times it is asked. */
  async function stalling(failures: number) {
    const store = new MemoryIdempotencyStore();
    const id = { scope: 'local', idempotencyKey: 'k' };
    const claim = await store.claim(id, 'f', 60_000);
    if (claim.state !== 'claimed') throw new Error(claim.state);
    let asked = 0;
    const flaky: IdempotencyStore = Object.assign(Object.create(store), {
      release: (ticket: ClaimTicket) =>
        ++asked <= failures ? Promise.reject(new Error('stalled')) : store.release(ticket),
    });
    return { store, flaky, ticket: claim.ticket, id, asked: () => asked };
  }

  it('frees the key at once when the store answers', async () => {
    const { store, flaky, ticket, id } = await stalling(0);
    expect(await releaseSoon(flaky, ticket, 60_000)).toBe(true);
    expect((await store.claim(id, 'f', 60_000)).state).toBe('claimed');
  });

  it('tells the caller the store failed, and frees the key in the background once it recovers', async () => {
    const { store, flaky, ticket, id, asked } = await stalling(2);
    await expect(releaseSoon(flaky, ticket, 60_000)).rejects.toThrow('stalled');
    expect((await store.claim(id, 'f', 60_000)).state).toBe('inProgress');
    // Retried after 100 ms, then 200 ms: the third release succeeds.
    await vi.waitFor(async () => expect((await store.claim(id, 'f', 60_000)).state).toBe('claimed'), {
      timeout: 5_000,
    });
    expect(asked()).toBe(3);
  });

  it('stops retrying once the lease would have ended anyway', async () => {
    const { flaky, ticket, asked } = await stalling(Number.POSITIVE_INFINITY);
    await expect(releaseSoon(flaky, ticket, 250)).rejects.toThrow('stalled');
    await vi.waitFor(() => expect(asked()).toBe(2), { timeout: 5_000 });
    await sleep(400);
    // The first attempt, then 100 ms later one more; the next (200 ms on) would pass the 250 ms lease.
    expect(asked()).toBe(2);
  });
});
