// --- The store contract, written once ---
//
// Every promise of `IdempotencyStore` (packages/idempotency/stores/contract.ts), as tests that run against
// every store: the memory store, Redis, a Redis Cluster, Postgres and SQLite
// (`test/idempotency/stores/contract.test.ts`).
// A claim, a replay byte for byte (results and errors), the original fingerprint for a conflict, in
// progress, the lease and its renewal, release, the continuation of a multi-round-trip call,
// retention, each caller's quota, the size bound, clear, scopes kept apart, and failing closed while
// a networked backend hangs. Each store's own
// test file keeps only what its backend alone can get wrong (Redis' scripts and key names,
// Postgres' transactions and liveness, SQLite's processes sharing one file, the memory store's
// insertion order).
//
// Where the contract lets stores differ, the difference is an option of the suite, named below, and
// the test that depends on it says which way the store goes: no store skips a promise in silence.

import { randomUUID } from 'node:crypto';
import {
  type ClaimTicket,
  DEFAULT_MAX_BYTES_PER_SCOPE,
  DEFAULT_MAX_RECORDS_PER_SCOPE,
  type IdempotencyStore,
  MAX_RETENTION_MS,
  type MemoryStoreOptions,
  type RecordId,
  type StoredResponse,
} from 'mcp-request-idempotency';
import { afterEach, describe, expect, it } from 'vitest';
import { sleep, waitUntil } from '../../demo/processes/bounds.js';
import {
  claimTicket,
  ERROR,
  expectUnavailableWithin,
  FINGERPRINT,
  LEASE_MS,
  newId,
  OTHER_FINGERPRINT,
  RESULT,
  RETENTION_MS,
  replayOf,
  SHORT_MS,
} from './store-fixtures.js';

/** A store as every store here is: the contract, its quotas, and a `close` where it holds connections. */
export interface ContractStore extends IdempotencyStore {
  readonly maxRecordsPerScope: number;
  readonly maxBytesPerScope: number;
  close?(): Promise<void>;
}

/** The quota options every store takes, alike. */
export type ScopeQuotas = Pick<MemoryStoreOptions, 'maxRecordsPerScope' | 'maxBytesPerScope'>;

/**
 * Opens `count` stores on one backend, as that many server instances would, each with its own
 * connection and these quotas; the memory store, which lives in one process, is the same store
 * `count` times. Rejects as the store's own constructor or `connect` does.
 */
export type OpenStores<S extends ContractStore> = (count: number, quotas: ScopeQuotas) => Promise<S[]>;

/** What store.ts leaves to each store, named. */
export interface ContractOptions<S extends ContractStore> {
  /**
   * Whether `complete` still records a claim whose lease ran out while nothing took its key: store.ts
   * allows both. The memory store does (the safer side); in Redis and Postgres the claim is gone.
   */
  completesAfterLease: boolean;
  /**
   * What is left of a record's lease or retention in ms, as the backend itself holds it (Redis'
   * PTTL, Postgres' `expires_at`), or undefined while it holds no live record: the suite checks
   * the store writes its expiry where the backend enforces it. Absent for the memory store: its
   * records live nowhere else, and what they do is all its tests see.
   */
  expiryOf?(id: RecordId): Promise<number | undefined>;
  /**
   * Makes the store's backend full, as its size bound would (the memory store's record cap, Redis'
   * `maxmemory`), and answers what empties it again. Absent where the suite cannot reach the bound
   * (Postgres': its disk) or must not (a Redis it shares).
   */
  fill?(store: S): Promise<() => Promise<void>>;
  /** What else the backend shows of 40 claims made at once from two instances (Postgres: many sessions). */
  afterConcurrentClaims?(instances: S[]): void;
  /**
   * Opens a store that waits `replyTimeoutMs` for each of its backend's replies, and stops that
   * backend answering (SIGSTOP), with what lets it answer again: the suite checks the store fails
   * closed while it hangs and recovers by itself. Absent where the suite must not freeze the
   * backend (a server it shares) or has no way to (the memory store, a SQLite file, a Redis Cluster).
   */
  hang?: { open(replyTimeoutMs: number): Promise<S>; freeze(): () => void };
}

/** The contract against one store; skipped, as that store's other tests are, when `open` is undefined. */
export function describeStoreContract<S extends ContractStore>(
  name: string,
  open: OpenStores<S> | undefined,
  options: ContractOptions<S>,
): void {
  describe.skipIf(!open)(`the store contract, on ${name}`, () => {
    const opened = new Set<S>();
    afterEach(async () => {
      const stores = [...opened];
      opened.clear();
      await Promise.all(stores.map((store) => store.close?.()));
    });

    /** Stores sharing one backend, as server instances do; closed after the test. */
    async function instances(count: number, quotas: ScopeQuotas = {}): Promise<S[]> {
      if (!open) throw new Error('unreachable: skipped without this store');
      const stores = await open(count, quotas);
      for (const store of stores) opened.add(store);
      return stores;
    }

    async function openStore(quotas: ScopeQuotas = {}): Promise<S> {
      const [store] = await instances(1, quotas);
      if (!store) throw new Error('no store opened');
      return store;
    }

    const { expiryOf, fill, hang } = options;

    /**
     * Waits until `id`'s record, written to last `ms`, has expired: until the backend holds it no
     * more, where it can be asked, else past `ms`.
     */
    async function untilExpired(id: RecordId, ms: number): Promise<void> {
      if (expiryOf) await waitUntil(async () => (await expiryOf(id)) === undefined);
      else await sleep(ms + 5);
    }

    describe('claim and complete', () => {
      it('claims a key nobody holds', async () => {
        const store = await openStore();
        const id = newId();

        const claim = await store.claim(id, FINGERPRINT, LEASE_MS);

        expect(claim).toMatchObject({ state: 'claimed', ticket: { ...id, fingerprint: FINGERPRINT } });
      });

      it('answers inProgress, with the original fingerprint, while the first claim is executing', async () => {
        const store = await openStore();
        const id = newId();
        await claimTicket(store, id);

        expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'inProgress',
          fingerprint: FINGERPRINT,
        });
        // Another request under the key gets the original fingerprint too: the guard's conflict.
        expect(await store.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'inProgress',
          fingerprint: FINGERPRINT,
        });
      });

      it('replays a stored result after complete, byte for byte as the dispatch answered it', async () => {
        const store = await openStore();
        const id = newId();
        expect(await store.complete(await claimTicket(store, id), RESULT, RETENTION_MS)).toBe(true);

        const replay = await store.claim(id, FINGERPRINT, LEASE_MS);

        expect(replay).toStrictEqual(replayOf(RESULT));
        if (replay.state !== 'completed') throw new Error('unreachable');
        expect(JSON.stringify(replay.response)).toBe(JSON.stringify(RESULT));
      });

      it('replays a stored error response exactly, with and without data', async () => {
        const store = await openStore();
        const withData = newId();
        const withoutData = newId();
        const bare: StoredResponse = { error: { code: -32602, message: 'Invalid arguments' } };
        await store.complete(await claimTicket(store, withData), ERROR, RETENTION_MS);
        await store.complete(await claimTicket(store, withoutData), bare, RETENTION_MS);

        expect(await store.claim(withData, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(ERROR));
        expect(await store.claim(withoutData, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(bare));
      });

      it('hands a claim of a completed key under other arguments the original fingerprint, for the conflict', async () => {
        const store = await openStore();
        const id = newId();
        await store.complete(await claimTicket(store, id), RESULT, RETENTION_MS);

        const claim = await store.claim(id, OTHER_FINGERPRINT, LEASE_MS);

        expect(claim).toMatchObject({ state: 'completed', fingerprint: FINGERPRINT });
      });
    });

    describe('scope isolation', () => {
      it('keeps the same idempotencyKey under two scopes as two independent records', async () => {
        const store = await openStore();
        const alice = newId('alice');
        const bob: RecordId = { scope: 'bob', idempotencyKey: alice.idempotencyKey };
        await store.complete(await claimTicket(store, alice), RESULT, RETENTION_MS);

        expect((await store.claim(bob, OTHER_FINGERPRINT, LEASE_MS)).state).toBe('claimed');
        expect(await store.claim(alice, FINGERPRINT, LEASE_MS)).toMatchObject({
          state: 'completed',
          response: RESULT,
        });
      });

      it('never confuses a scope and a key that concatenate to the same text', async () => {
        const store = await openStore();
        const key = randomUUID();
        await claimTicket(store, { scope: 'team:a', idempotencyKey: key });

        const claim = await store.claim({ scope: 'team', idempotencyKey: `a:${key}` }, FINGERPRINT, LEASE_MS);

        expect(claim.state).toBe('claimed');
      });
    });

    describe('claim is atomic across instances', () => {
      it('of 40 concurrent claims of one key from two instances, exactly one is claimed', async () => {
        const [one, two] = await instances(2);
        if (!one || !two) throw new Error('unreachable');
        const id = newId();

        const claims = await Promise.all(
          Array.from({ length: 40 }, (_, i) =>
            (i % 2 === 0 ? one : two).claim(id, `fingerprint-${i}`, LEASE_MS),
          ),
        );

        const winners = claims.flatMap((claim) => (claim.state === 'claimed' ? [claim.ticket] : []));
        expect(winners).toHaveLength(1);
        // Everyone else is told the key is held, and by whom (the winner's fingerprint).
        const others = claims.filter((claim) => claim.state !== 'claimed');
        expect(others).toStrictEqual(
          Array(39).fill({ state: 'inProgress', fingerprint: winners[0]?.fingerprint }),
        );
        options.afterConcurrentClaims?.([one, two]);
      });
    });

    describe('lease: an instance that dies mid-execution does not block its key forever', () => {
      it('expires an in-progress claim that is never completed after leaseMs, then lets the key be claimed', async () => {
        const store = await openStore();
        const id = newId();
        const started = performance.now();
        await claimTicket(store, id, SHORT_MS);
        if (expiryOf) {
          const left = await expiryOf(id);
          expect(left).toBeGreaterThan(0);
          expect(left).toBeLessThanOrEqual(SHORT_MS);
        }

        expect((await store.claim(id, FINGERPRINT, SHORT_MS)).state).toBe('inProgress');
        await waitUntil(async () => (await store.claim(id, FINGERPRINT, LEASE_MS)).state === 'claimed');

        expect(performance.now() - started).toBeGreaterThanOrEqual(SHORT_MS - 10);
      });

      it('ignores a complete with a stale ticket: the newer claim keeps the key', async () => {
        const [stalled, survivor] = await instances(2);
        if (!stalled || !survivor) throw new Error('unreachable');
        const id = newId();
        const stale = await claimTicket(stalled, id, SHORT_MS);
        let fresh: ClaimTicket | undefined;
        await waitUntil(async () => {
          const claim = await survivor.claim(id, OTHER_FINGERPRINT, LEASE_MS);
          if (claim.state === 'claimed') fresh = claim.ticket;
          return fresh !== undefined;
        });

        expect(await stalled.complete(stale, ERROR, RETENTION_MS)).toBe(false);

        expect(await survivor.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'inProgress',
          fingerprint: OTHER_FINGERPRINT,
        });
        if (!fresh) throw new Error('unreachable');
        expect(await survivor.complete(fresh, RESULT, RETENTION_MS)).toBe(true);
        expect(await survivor.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toMatchObject({ response: RESULT });
      });

      if (options.completesAfterLease) {
        it('still records a claim that completes after its lease expired while nobody re-claimed (the safer side)', async () => {
          const store = await openStore();
          const id = newId();
          const stale = await claimTicket(store, id, SHORT_MS);
          await untilExpired(id, SHORT_MS);

          expect(await store.complete(stale, RESULT, RETENTION_MS)).toBe(true);

          expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
        });
      } else {
        it('records nothing when a claim completes after its lease expired and nobody re-claimed', async () => {
          const store = await openStore();
          const id = newId();
          const stale = await claimTicket(store, id, SHORT_MS);
          await untilExpired(id, SHORT_MS);

          expect(await store.complete(stale, RESULT, RETENTION_MS)).toBe(false);

          if (expiryOf) expect(await expiryOf(id)).toBeUndefined();
          expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
        });
      }
    });

    describe('renewing a live claim', () => {
      it("extends the claim's lease, as another connection sees it", async () => {
        const store = await openStore();
        const id = newId();
        const ticket = await claimTicket(store, id, SHORT_MS);

        expect(await store.renew(ticket, LEASE_MS)).toBe(true);

        if (expiryOf) {
          const left = await expiryOf(id);
          expect(left).toBeGreaterThan(LEASE_MS - 5_000);
          expect(left).toBeLessThanOrEqual(LEASE_MS);
        }
        await sleep(2 * SHORT_MS);
        expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('inProgress');
      });

      it('does nothing for a claim that lost its key: another claim keeps its lease, an expired key stays free', async () => {
        const [stalled, survivor] = await instances(2);
        if (!stalled || !survivor) throw new Error('unreachable');
        const id = newId();
        const stale = await claimTicket(stalled, id, SHORT_MS);
        await untilExpired(id, SHORT_MS);
        expect(await stalled.renew(stale, LEASE_MS)).toBe(false);
        if (expiryOf) expect(await expiryOf(id)).toBeUndefined();

        const fresh = await claimTicket(survivor, id, SHORT_MS);
        expect(await stalled.renew(stale, LEASE_MS)).toBe(false);
        if (expiryOf) expect(await expiryOf(id)).toBeLessThanOrEqual(SHORT_MS);
        expect(await survivor.renew(fresh, LEASE_MS)).toBe(true);
      });

      it('does nothing for a completed record: its retention stands', async () => {
        const store = await openStore();
        const id = newId();
        const ticket = await claimTicket(store, id);
        await store.complete(ticket, RESULT, SHORT_MS);

        expect(await store.renew(ticket, LEASE_MS)).toBe(false);
        if (expiryOf) expect(await expiryOf(id)).toBeLessThanOrEqual(SHORT_MS);
      });
    });

    describe('retention', () => {
      it('treats a completed record as gone after retentionMs, and the key executes again', async () => {
        const store = await openStore();
        const id = newId();
        await store.complete(await claimTicket(store, id), RESULT, SHORT_MS);
        if (expiryOf) {
          const left = await expiryOf(id);
          expect(left).toBeGreaterThan(0);
          expect(left).toBeLessThanOrEqual(SHORT_MS);
        }
        expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('completed');

        await untilExpired(id, SHORT_MS);

        expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      });
    });

    describe('the longest retention, MAX_RETENTION_MS, which the guard takes too', () => {
      it('keeps a record for it, replayed by another instance, and refuses a longer one, the claim left as it was', async () => {
        const [writer, reader] = await instances(2);
        if (!writer || !reader) throw new Error('no stores opened');
        const id = newId();
        const ticket = await claimTicket(writer, id);
        await expect((async () => writer.complete(ticket, RESULT, MAX_RETENTION_MS + 1))()).rejects.toThrow(
          RangeError,
        );
        expect((await reader.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('inProgress');
        expect(await writer.complete(ticket, RESULT, MAX_RETENTION_MS)).toBe(true);
        const replay = await reader.claim(id, FINGERPRINT, LEASE_MS);
        expect(replay.state === 'completed' && replay.response).toStrictEqual(RESULT);
      });
    });

    describe('multi-round-trip calls: awaiting input, continuation, release', () => {
      async function awaiting(store: S, id: RecordId): Promise<void> {
        expect(await store.awaitInput(await claimTicket(store, id), RESULT, RETENTION_MS)).toBe(true);
      }

      it('answers a repeat of the opening round awaitingInput, with the question it stored', async () => {
        const store = await openStore();
        const id = newId();
        await awaiting(store, id);

        expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'awaitingInput',
          fingerprint: FINGERPRINT,
          response: RESULT,
        });
      });

      it('lets a continuation of the same fingerprint take the key over, and no second one at once', async () => {
        const [one, two] = await instances(2);
        if (!one || !two) throw new Error('unreachable');
        const id = newId();
        await awaiting(one, id);

        const continuations = await Promise.all([
          one.claim(id, FINGERPRINT, LEASE_MS, true),
          two.claim(id, FINGERPRINT, LEASE_MS, true),
        ]);

        expect(continuations.map((claim) => claim.state).sort()).toStrictEqual(['claimed', 'inProgress']);
      });

      it('refuses the takeover to a continuation of another fingerprint', async () => {
        const store = await openStore();
        const id = newId();
        await awaiting(store, id);

        expect(await store.claim(id, OTHER_FINGERPRINT, LEASE_MS, true)).toMatchObject({
          state: 'awaitingInput',
          fingerprint: FINGERPRINT,
        });
      });

      it('release after a continuation puts the awaiting-input record back, with its own expiry', async () => {
        const store = await openStore();
        const id = newId();
        await store.awaitInput(await claimTicket(store, id), RESULT, 60_000);
        const continuation = await store.claim(id, FINGERPRINT, LEASE_MS, true);
        if (continuation.state !== 'claimed') throw new Error(continuation.state);

        expect(await store.release(continuation.ticket)).toBe(true);

        expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toMatchObject({
          state: 'awaitingInput',
          response: RESULT,
        });
        if (expiryOf) {
          const left = await expiryOf(id);
          expect(left).toBeLessThanOrEqual(60_000);
          expect(left).toBeGreaterThan(55_000);
        }
        expect(await store.release(continuation.ticket)).toBe(false);
      });

      it('release of an opening claim frees the key; a continuation that completes stores the final answer', async () => {
        const store = await openStore();
        const id = newId();
        expect(await store.release(await claimTicket(store, id))).toBe(true);
        if (expiryOf) expect(await expiryOf(id)).toBeUndefined();

        await awaiting(store, id);
        const continuation = await store.claim(id, FINGERPRINT, LEASE_MS, true);
        if (continuation.state !== 'claimed') throw new Error(continuation.state);
        expect(await store.complete(continuation.ticket, ERROR, RETENTION_MS)).toBe(true);

        expect(await store.claim(id, FINGERPRINT, LEASE_MS, true)).toStrictEqual(replayOf(ERROR));
      });
    });

    describe('quotas of one caller (SEP: servers SHOULD apply quotas to the records)', () => {
      it('defaults to the quotas every store has', async () => {
        const store = await openStore();
        expect([store.maxRecordsPerScope, store.maxBytesPerScope]).toStrictEqual([
          DEFAULT_MAX_RECORDS_PER_SCOPE,
          DEFAULT_MAX_BYTES_PER_SCOPE,
        ]);
      });

      it('refuses a quota that is no positive integer when the store is made, in the words every store uses', async () => {
        for (const name of ['maxRecordsPerScope', 'maxBytesPerScope'] as const) {
          for (const bad of [0, -1, Number.NaN, 1.5, Number.POSITIVE_INFINITY]) {
            await expect(instances(1, { [name]: bad }), `${name}: ${bad}`).rejects.toThrow(
              new RangeError(`${name} must be a positive integer, got ${bad}`),
            );
          }
        }
      });

      it('answers quotaExceeded past the caller’s live records, while another caller still claims', async () => {
        const store = await openStore({ maxRecordsPerScope: 2 });
        const scope = `quota-${randomUUID()}`;
        const first = await claimTicket(store, newId(scope));
        await store.complete(await claimTicket(store, newId(scope), SHORT_MS), RESULT, SHORT_MS);

        expect(await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'quotaExceeded',
        });
        expect((await store.claim(newId(`other-${scope}`), FINGERPRINT, LEASE_MS)).state).toBe('claimed');

        // A record that expires and one that is released give their places back.
        await waitUntil(
          async () => (await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).state === 'claimed',
        );
        expect(await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'quotaExceeded',
        });
        await store.release(first);
        expect((await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      });

      it('answers quotaExceeded once the caller’s stored responses reach its quota of characters', async () => {
        const size = JSON.stringify(RESULT).length;
        const store = await openStore({ maxBytesPerScope: 2 * size });
        const scope = `bytes-${randomUUID()}`;
        await store.complete(await claimTicket(store, newId(scope)), RESULT, RETENTION_MS);
        expect((await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
        await store.complete(await claimTicket(store, newId(scope)), RESULT, RETENTION_MS);

        expect(await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).toStrictEqual({
          state: 'quotaExceeded',
        });
        // Another caller's quota is its own.
        expect((await store.claim(newId(`other-${scope}`), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      });

      it('holds the quota under concurrent claims of different keys from two instances', async () => {
        const [one, two] = await instances(2, { maxRecordsPerScope: 5 });
        if (!one || !two) throw new Error('unreachable');
        const scope = `race-${randomUUID()}`;

        const claims = await Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            (i % 2 === 0 ? one : two).claim(newId(scope), FINGERPRINT, LEASE_MS),
          ),
        );

        const states = claims.map((claim) => claim.state);
        expect(states.filter((state) => state === 'claimed')).toHaveLength(5);
        expect(states.filter((state) => state === 'quotaExceeded')).toHaveLength(25);
      });

      describe('one caller past its quota is refused, nothing executed; every other caller goes on', () => {
        const QUOTA = 3;
        // Each test's callers are its own: the backend is shared by the whole file.
        let aliceScope = '';
        let bobScope = '';
        const alice = (): RecordId => ({ scope: aliceScope, idempotencyKey: randomUUID() });
        const bob = (): RecordId => ({ scope: bobScope, idempotencyKey: randomUUID() });
        const callers = async (quotas: { records: number; bytes: number }) => {
          aliceScope = `principal:alice-${randomUUID()}`;
          bobScope = `principal:bob-${randomUUID()}`;
          return openStore({ maxRecordsPerScope: quotas.records, maxBytesPerScope: quotas.bytes });
        };

        /** Claims and completes a fresh key of `id`'s scope, as an execution would. */
        async function execute(
          store: S,
          id: RecordId,
          response = RESULT,
          retentionMs = RETENTION_MS,
        ): Promise<string> {
          const claim = await store.claim(id, FINGERPRINT, LEASE_MS);
          if (claim.state === 'claimed') await store.complete(claim.ticket, response, retentionMs);
          return claim.state;
        }

        it('refuses a caller past its quota of records, and no other caller', async () => {
          const store = await callers({ records: QUOTA, bytes: 1_000_000 });
          const kept = alice();
          expect(await execute(store, kept)).toBe('claimed');
          for (let i = 1; i < QUOTA; i++) expect(await execute(store, alice())).toBe('claimed');
          expect(await execute(store, alice())).toBe('quotaExceeded');
          expect(await execute(store, bob())).toBe('claimed');
          // Her stored responses still replay: a replay adds no record.
          expect((await store.claim(kept, FINGERPRINT, LEASE_MS)).state).toBe('completed');
        });

        it('counts claims still in progress against the quota', async () => {
          const store = await callers({ records: QUOTA, bytes: 1_000_000 });
          for (let i = 0; i < QUOTA; i++)
            expect((await store.claim(alice(), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
          expect((await store.claim(alice(), FINGERPRINT, LEASE_MS)).state).toBe('quotaExceeded');
        });

        it('frees the quota as the caller’s records expire on their own', async () => {
          const store = await callers({ records: QUOTA, bytes: 1_000_000 });
          for (let i = 0; i < QUOTA; i++) await execute(store, alice(), RESULT, SHORT_MS);
          expect(await execute(store, alice())).toBe('quotaExceeded');
          // Nobody tells the store they expired: it must notice by itself.
          await sleep(SHORT_MS + 50);
          await waitUntil(async () => (await execute(store, alice())) === 'claimed', 2_000);
        });

        it('refuses a caller whose stored responses reach its quota of bytes', async () => {
          const store = await callers({ records: 100, bytes: 1_000 });
          const big: StoredResponse = { result: { content: [{ type: 'text', text: 'x'.repeat(1_200) }] } };
          expect(await execute(store, alice(), big)).toBe('claimed');
          expect(await execute(store, alice())).toBe('quotaExceeded');
          expect(await execute(store, bob())).toBe('claimed');
        });

        it('counts a key awaiting input once, through its continuations', async () => {
          const store = await callers({ records: 2, bytes: 1_000_000 });
          const waiting = alice();
          const opening = await store.claim(waiting, FINGERPRINT, LEASE_MS);
          if (opening.state !== 'claimed') throw new Error(opening.state);
          await store.awaitInput(opening.ticket, RESULT, LEASE_MS);
          expect(await execute(store, alice())).toBe('claimed');
          expect(await execute(store, alice())).toBe('quotaExceeded');
          // At her quota, her continuation still takes over its own key; refused, it gives the key back.
          const resumed = await store.claim(waiting, FINGERPRINT, LEASE_MS, true);
          if (resumed.state !== 'claimed') throw new Error(resumed.state);
          expect(await store.release(resumed.ticket)).toBe(true);
          expect((await store.claim(waiting, FINGERPRINT, LEASE_MS)).state).toBe('awaitingInput');
          expect(await execute(store, alice())).toBe('quotaExceeded');
        });

        it('frees the record of a refused continuation that had no key to resume', async () => {
          const store = await callers({ records: 1, bytes: 1_000_000 });
          const claim = await store.claim(alice(), FINGERPRINT, LEASE_MS, true);
          if (claim.state !== 'claimed') throw new Error(claim.state);
          expect(await execute(store, alice())).toBe('quotaExceeded');
          expect(await store.release(claim.ticket)).toBe(true);
          expect(await execute(store, alice())).toBe('claimed');
        });

        it('counts the answer that completes a resumed key instead of its question, not beside it', async () => {
          const store = await callers({ records: 100, bytes: 1_000 });
          const sized: StoredResponse = { result: { content: [{ type: 'text', text: 'x'.repeat(550) }] } };
          const waiting = alice();
          const opening = await store.claim(waiting, FINGERPRINT, LEASE_MS);
          if (opening.state !== 'claimed') throw new Error(opening.state);
          await store.awaitInput(opening.ticket, sized, LEASE_MS);
          const resumed = await store.claim(waiting, FINGERPRINT, LEASE_MS, true);
          if (resumed.state !== 'claimed') throw new Error(resumed.state);
          await store.complete(resumed.ticket, sized, RETENTION_MS);
          // About 600 characters stored, not 1,200: she is still under her 1,000, until the next 600.
          expect(await execute(store, alice(), sized)).toBe('claimed');
          expect(await execute(store, alice())).toBe('quotaExceeded');
        });

        it('forgets the quota with the records when the store is cleared', async () => {
          const store = await callers({ records: 1, bytes: 1_000_000 });
          await execute(store, alice());
          expect(await execute(store, alice())).toBe('quotaExceeded');
          await store.clear();
          expect(await execute(store, alice())).toBe('claimed');
        });
      });
    });

    if (fill) {
      describe('full: at its size bound, refuse rather than evict a live record', () => {
        it('answers full, and keeps every record, while the store is full', async () => {
          const store = await openStore();
          const held = newId();
          await store.complete(await claimTicket(store, held), RESULT, RETENTION_MS);
          const empty = await fill(store);
          try {
            expect(await store.claim(newId(), FINGERPRINT, LEASE_MS)).toStrictEqual({ state: 'full' });
          } finally {
            await empty();
          }

          expect(await store.claim(held, FINGERPRINT, LEASE_MS)).toMatchObject({
            state: 'completed',
            response: RESULT,
          });
        });
      });
    }

    if (hang) {
      describe('fail closed: a backend that hangs never means executing without a record', () => {
        it('rejects a claim with StoreUnavailableError within 2 s when the backend hangs, and recovers when it answers again', async () => {
          const store = await hang.open(500);
          opened.add(store);
          const id = newId();
          const thaw = hang.freeze();
          try {
            await expectUnavailableWithin(2_000, () => store.claim(id, FINGERPRINT, LEASE_MS));
          } finally {
            thaw();
          }

          // The same instance, no reconnect call: the store heals by itself.
          await waitUntil(
            async () =>
              (await store.claim(newId(), FINGERPRINT, LEASE_MS).catch(() => undefined)) !== undefined,
          );
          expect((await store.claim(newId(), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
          // The timed-out claim may have run once the backend woke: then the key is held, never free twice.
          expect(['claimed', 'inProgress']).toContain((await store.claim(id, FINGERPRINT, LEASE_MS)).state);
        });
      });
    }

    describe('clear', () => {
      it('forgets every record of every caller, whatever its state: each key executes again', async () => {
        const store = await openStore();
        const [running, waiting, done] = [newId('alice'), newId('bob'), newId('carol')];
        await claimTicket(store, running);
        await store.awaitInput(await claimTicket(store, waiting), RESULT, RETENTION_MS);
        await store.complete(await claimTicket(store, done), ERROR, RETENTION_MS);

        await store.clear();

        for (const id of [running, waiting, done]) {
          expect((await store.claim(id, OTHER_FINGERPRINT, LEASE_MS)).state).toBe('claimed');
        }
      });
    });
  });
}
