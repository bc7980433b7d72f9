// What the SQLite stores of one process share on one file: a write lock that grants its turns first
// come, first served, and gives up on a waiter at its bound without passing the turn to it; the
// completed records it remembers for replays, never an expired one, within its bounds (10,000
// records, 16 MiB of responses), the oldest forgotten first; one of each per file while any
// store on it is open; and a slot per (scope, key) that no other pair shares.

import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import {
  BusyError,
  type KnownReplay,
  KnownReplays,
  leftInProcess,
  ProcessWriteLock,
  sharedInProcess,
  slotOf,
} from '../../../../packages/idempotency/stores/sqlite/in-process.js';
import { FINGERPRINT, RESULT } from '../../../support/store-fixtures.js';

/** The bounds the file header states. */
const MAX_REPLAYS = 10_000;
const MAX_REPLAY_CHARACTERS = 16 * 1024 * 1024;

const replay = (characters: number, expiresAt: number): KnownReplay => ({
  fingerprint: FINGERPRINT,
  response: RESULT,
  expiresAt,
  characters,
});

describe("the process's write lock on a file", () => {
  it('grants its turns in the order they were asked for', async () => {
    const lock = new ProcessWriteLock();
    const far = performance.now() + 60_000;
    await lock.take(far);
    const order: number[] = [];
    const turns = [1, 2, 3].map((n) =>
      lock.take(far).then(() => {
        order.push(n);
      }),
    );
    for (const [i, turn] of turns.entries()) {
      expect(order).toStrictEqual([1, 2, 3].slice(0, i));
      lock.give();
      await turn;
    }
    expect(order).toStrictEqual([1, 2, 3]);
    expect(lock.tryTake()).toBe(false);
    lock.give();
    expect(lock.tryTake()).toBe(true);
  });

  it('gives up on a waiter at its bound with BusyError, and hands the turn to the next one instead', async () => {
    const lock = new ProcessWriteLock();
    expect(lock.tryTake()).toBe(true);
    const started = performance.now();
    const impatient = lock.take(started + 100);
    const patient = lock.take(started + 60_000);
    await expect(impatient).rejects.toBeInstanceOf(BusyError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(100);
    lock.give();
    await patient;
    // The patient waiter holds it now: nobody else may take it.
    expect(lock.tryTake()).toBe(false);
  });

  it('does not give up on a waiter before its bound when the timer fires early', async () => {
    // Node counts a timer in whole milliseconds of the event loop's clock, so it can fire a
    // millisecond before the bound by performance.now(). Fake timers fire it long before.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const lock = new ProcessWriteLock();
      expect(lock.tryTake()).toBe(true);
      const bound = performance.now() + 30;
      let gaveUpAt: number | undefined;
      const impatient = lock.take(bound).catch((error: unknown) => {
        gaveUpAt = performance.now();
        throw error;
      });
      vi.advanceTimersByTime(30);
      await Promise.resolve();
      expect(gaveUpAt).toBeUndefined();
      while (performance.now() < bound);
      vi.advanceTimersByTime(30);
      await expect(impatient).rejects.toBeInstanceOf(BusyError);
      expect(gaveUpAt).toBeGreaterThanOrEqual(bound);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('the replays a process remembers', () => {
  type Step =
    | { kind: 'remember'; slot: number; characters: number; expiresAt: number }
    | { kind: 'get'; slot: number; now: number }
    | { kind: 'forgetAll' };
  const slot = fc.integer({ min: 0, max: 8 });
  // Times close together, so that a read often falls on a record's expiry itself.
  const time = fc.integer({ min: 0, max: 6 });
  const step: fc.Arbitrary<Step> = fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({
        kind: fc.constant('remember' as const),
        slot,
        // Some responses large enough that a few fill the bound, some past it on their own.
        characters: fc.oneof(
          fc.nat(100),
          fc.integer({ min: 4 * 1024 * 1024, max: 9 * 1024 * 1024 }),
          fc.constant(MAX_REPLAY_CHARACTERS + 1),
        ),
        expiresAt: time,
      }),
    },
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('get' as const), slot, now: time }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('forgetAll' as const) }) },
  );

  it('answers what a simple model answers: never an expired record, within the bounds, the oldest forgotten first', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const replays = new KnownReplays();
        // The model: records in the order they were remembered.
        let model: Array<[string, KnownReplay]> = [];
        const total = () => model.reduce((sum, [, r]) => sum + r.characters, 0);
        for (const s of steps) {
          if (s.kind === 'remember') {
            const key = String(s.slot);
            const record = replay(s.characters, s.expiresAt);
            model = model.filter(([k]) => k !== key);
            if (record.characters <= MAX_REPLAY_CHARACTERS) model.push([key, record]);
            while (model.length > MAX_REPLAYS || total() > MAX_REPLAY_CHARACTERS) model.shift();
            replays.remember(key, record);
          } else if (s.kind === 'get') {
            const key = String(s.slot);
            const known = model.find(([k]) => k === key)?.[1];
            const live = known && known.expiresAt > s.now ? known : undefined;
            if (known && !live) model = model.filter(([k]) => k !== key);
            expect(replays.get(key, s.now)).toBe(live);
          } else {
            model = [];
            replays.forgetAll(7);
            expect(replays.clears).toBe(7);
          }
          expect(replays.size).toBe(model.length);
        }
        for (const [key, record] of model) expect(replays.get(key, -1)).toBe(record);
      }),
    );
  });

  it('keeps at most 10,000 records, forgetting the oldest first', () => {
    const replays = new KnownReplays();
    for (let i = 0; i <= MAX_REPLAYS; i++) replays.remember(`s${i}`, replay(1, 100));
    expect(replays.size).toBe(MAX_REPLAYS);
    expect(replays.get('s0', 0)).toBeUndefined();
    expect(replays.get('s1', 0)).toBeDefined();
    expect(replays.get(`s${MAX_REPLAYS}`, 0)).toBeDefined();
  });
});

describe('what the stores of one process share on one file', () => {
  it('is one lock and one set of replays per file while any store on it is open, and gone with the last', () => {
    const path = `/records-${process.pid}-${Math.random()}.sqlite`;
    const first = sharedInProcess(path);
    const second = sharedInProcess(path);
    const elsewhere = sharedInProcess(`${path}-other`);
    expect(second.lock).toBe(first.lock);
    expect(second.replays).toBe(first.replays);
    expect(elsewhere.lock).not.toBe(first.lock);
    first.replays.remember('slot', replay(10, Number.MAX_SAFE_INTEGER));

    leftInProcess(path);
    const third = sharedInProcess(path);
    expect(third.replays.get('slot', 0)).toBeDefined();

    leftInProcess(path);
    leftInProcess(path);
    leftInProcess(`${path}-other`);
    const afterAll = sharedInProcess(path);
    expect(afterAll.replays).not.toBe(first.replays);
    expect(afterAll.replays.size).toBe(0);
    leftInProcess(path);
  });
});

describe("a record's slot", () => {
  it('is another for every other (scope, key) pair, whatever characters either holds', () => {
    const text = fc.string({ maxLength: 8, unit: fc.constantFrom('a', ':', '1', '0', 'é', '\u0000') });
    // Pairs most likely to meet: any two, and two cut from one text at two places, with or
    // without the character at the cut (where a separator would go).
    const pairs = fc.oneof(
      fc.tuple(text, text, text, text),
      fc.tuple(text, fc.nat(), fc.nat(), fc.boolean()).map(([w, i, j, drop]) => {
        const [at, other] = [i % (w.length + 1), j % (w.length + 1)];
        const skip = drop ? 1 : 0;
        return [w.slice(0, at), w.slice(at + skip), w.slice(0, other), w.slice(other + skip)] as const;
      }),
    );
    fc.assert(
      fc.property(pairs, ([scopeA, keyA, scopeB, keyB]) => {
        fc.pre(scopeA !== scopeB || keyA !== keyB);
        expect(slotOf(scopeA, keyA)).not.toBe(slotOf(scopeB, keyB));
      }),
      { numRuns: 2_000 },
    );
  });
});
