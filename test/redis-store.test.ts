// The Redis store and ledger against a real redis-server: what every instance of a
// stateless deployment shares (SEP-3182, stateless deployments).

import { randomUUID } from 'node:crypto';
import {
  type ClaimTicket,
  type RecordId,
  type StoredResponse,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import {
  closeRedis,
  connectRedis,
  type RedisClient,
  RedisIdempotencyStore,
  type RedisStoreOptions,
  redisKeysOf,
} from 'mcp-request-idempotency/redis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { RedisLedger } from '../ledger.js';
import {
  commandsDuring as commandsDuringOn,
  REDIS_SKIP_REASON,
  startRedis,
  type TestRedis,
  uniqueKeyPrefix,
  waitUntil,
} from '../processes/redis.js';

const redis = await startRedis();
if (!redis) console.warn(REDIS_SKIP_REASON);
else if (!redis.owned) {
  console.warn(
    'Fail-closed and full tests skipped: they stop Redis, so need a private redis-server, not REDIS_URL',
  );
}
const needsOwnServer = !redis?.owned;

const prefix = uniqueKeyPrefix('redis-store');
const LEASE_MS = 120_000;
const RETENTION_MS = 300_000;
/** Short enough to watch Redis expire a record within a test. */
const SHORT_MS = 200;

const FINGERPRINT = 'fingerprint-of-charge_guarded(100)';
const OTHER_FINGERPRINT = 'fingerprint-of-charge_guarded(999)';

const RESULT: StoredResponse = {
  result: {
    content: [{ type: 'text', text: 'Charged 100. New balance: 100 — “ok” \u{1F4B3}' }],
    structuredContent: { charged: 100, balance: 100, ratio: 0.1, nothing: null, list: [1, 'two', false] },
    isError: false,
    _meta: { 'example.com/trace': { id: 'abc' } },
  },
};
const ERROR: StoredResponse = {
  error: { code: -32603, message: 'provider timed out', data: { retryable: true, detail: [null, 0] } },
};

function server(): TestRedis {
  if (!redis) throw new Error('unreachable: these tests are skipped without Redis');
  return redis;
}

const stores: RedisIdempotencyStore[] = [];
const clients: RedisClient[] = [];

/** A store with its own connection, as each server instance has. */
async function openStore(options: RedisStoreOptions = {}): Promise<RedisIdempotencyStore> {
  const store = await RedisIdempotencyStore.connect(server().url, { keyPrefix: prefix, ...options });
  stores.push(store);
  return store;
}

async function openClient(): Promise<RedisClient> {
  const client = await connectRedis(server().url);
  clients.push(client);
  return client;
}

afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()));
  await Promise.all(clients.splice(0).map((client) => closeRedis(client)));
});

afterAll(async () => {
  await redis?.flush(prefix);
  await redis?.stop();
});

const newId = (scope = 'alice'): RecordId => ({ scope, idempotencyKey: randomUUID() });

function keyOf(id: RecordId): string {
  return redisKeysOf(prefix, id)[0];
}

async function claimTicket(
  store: RedisIdempotencyStore,
  id: RecordId,
  leaseMs = LEASE_MS,
): Promise<ClaimTicket> {
  const claim = await store.claim(id, FINGERPRINT, leaseMs);
  if (claim.state !== 'claimed') throw new Error(`expected a claim, got ${claim.state}`);
  return claim.ticket;
}

describe.skipIf(!redis)('claim and complete', () => {
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

  it('replays a stored result exactly after complete', async () => {
    const store = await openStore();
    const id = newId();
    await store.complete(await claimTicket(store, id), RESULT, RETENTION_MS);

    expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'completed',
      fingerprint: FINGERPRINT,
      response: RESULT,
    });
  });

  it('replays a stored error response exactly, with and without data', async () => {
    const store = await openStore();
    const withData = newId();
    const withoutData = newId();
    const bare: StoredResponse = { error: { code: -32602, message: 'Invalid arguments' } };
    await store.complete(await claimTicket(store, withData), ERROR, RETENTION_MS);
    await store.complete(await claimTicket(store, withoutData), bare, RETENTION_MS);

    expect(await store.claim(withData, FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'completed',
      fingerprint: FINGERPRINT,
      response: ERROR,
    });
    expect(await store.claim(withoutData, FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'completed',
      fingerprint: FINGERPRINT,
      response: bare,
    });
  });

  it('hands a claim of a completed key under other arguments the original fingerprint, for the conflict', async () => {
    const store = await openStore();
    const id = newId();
    await store.complete(await claimTicket(store, id), RESULT, RETENTION_MS);

    const claim = await store.claim(id, OTHER_FINGERPRINT, LEASE_MS);

    expect(claim).toMatchObject({ state: 'completed', fingerprint: FINGERPRINT });
  });
});

describe.skipIf(!redis)('scope isolation', () => {
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

describe.skipIf(!redis)('claim is atomic across instances', () => {
  it('of 40 concurrent claims of one key from two instances, exactly one is claimed', async () => {
    const [one, two] = await Promise.all([openStore(), openStore()]);
    const id = newId();

    const claims = await Promise.all(
      Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? one : two).claim(id, `fingerprint-${i}`, LEASE_MS)),
    );

    const winners = claims.flatMap((claim) => (claim.state === 'claimed' ? [claim.ticket] : []));
    expect(winners).toHaveLength(1);
    // Everyone else is told the key is held, and by whom (the winner's fingerprint).
    const others = claims.filter((claim) => claim.state !== 'claimed');
    expect(others).toStrictEqual(
      Array(39).fill({ state: 'inProgress', fingerprint: winners[0]?.fingerprint }),
    );
  });
});

describe.skipIf(!redis)('lease: an instance that dies mid-execution does not block its key forever', () => {
  it('expires an in-progress claim that is never completed after leaseMs, then lets the key be claimed', async () => {
    const store = await openStore();
    const id = newId();
    const started = performance.now();
    await claimTicket(store, id, SHORT_MS);
    const ttl = await server().admin.pTTL(keyOf(id));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(SHORT_MS);

    expect((await store.claim(id, FINGERPRINT, SHORT_MS)).state).toBe('inProgress');
    await waitUntil(async () => (await store.claim(id, FINGERPRINT, LEASE_MS)).state === 'claimed');

    expect(performance.now() - started).toBeGreaterThanOrEqual(SHORT_MS - 10);
  });

  it('ignores a complete with a stale ticket: the newer claim keeps the key', async () => {
    const [crashed, survivor] = await Promise.all([openStore(), openStore()]);
    const id = newId();
    const stale = await claimTicket(crashed, id, SHORT_MS);
    let fresh: ClaimTicket | undefined;
    await waitUntil(async () => {
      const claim = await survivor.claim(id, OTHER_FINGERPRINT, LEASE_MS);
      if (claim.state === 'claimed') fresh = claim.ticket;
      return fresh !== undefined;
    });

    await crashed.complete(stale, ERROR, RETENTION_MS);

    expect(await survivor.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'inProgress',
      fingerprint: OTHER_FINGERPRINT,
    });
    if (!fresh) throw new Error('unreachable');
    await survivor.complete(fresh, RESULT, RETENTION_MS);
    expect(await survivor.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toMatchObject({ response: RESULT });
  });

  it('writes nothing when a claim completes after its lease expired and nobody re-claimed', async () => {
    const store = await openStore();
    const id = newId();
    const stale = await claimTicket(store, id, SHORT_MS);
    await waitUntil(async () => (await server().admin.exists(keyOf(id))) === 0);

    await store.complete(stale, RESULT, RETENTION_MS);

    expect(await server().admin.exists(keyOf(id))).toBe(0);
  });
});

describe.skipIf(!redis)('renewing a live claim', () => {
  it("extends the claim's lease, as another connection sees it", async () => {
    const store = await openStore();
    const id = newId();
    const ticket = await claimTicket(store, id, SHORT_MS);

    expect(await store.renew(ticket, LEASE_MS)).toBe(true);

    const ttl = await server().admin.pTTL(keyOf(id));
    expect(ttl).toBeGreaterThan(LEASE_MS - 5_000);
    expect(ttl).toBeLessThanOrEqual(LEASE_MS);
    await new Promise((resolve) => setTimeout(resolve, 2 * SHORT_MS));
    expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('inProgress');
  });

  it('does nothing for a claim that lost its key: another claim keeps its lease, an expired key stays free', async () => {
    const [crashed, survivor] = await Promise.all([openStore(), openStore()]);
    const id = newId();
    const stale = await claimTicket(crashed, id, SHORT_MS);
    await waitUntil(async () => (await server().admin.exists(keyOf(id))) === 0);
    expect(await crashed.renew(stale, LEASE_MS)).toBe(false);
    expect(await server().admin.exists(keyOf(id))).toBe(0);

    const fresh = await claimTicket(survivor, id, SHORT_MS);
    expect(await crashed.renew(stale, LEASE_MS)).toBe(false);
    expect(await server().admin.pTTL(keyOf(id))).toBeLessThanOrEqual(SHORT_MS);
    expect(await survivor.renew(fresh, LEASE_MS)).toBe(true);
  });

  it('does nothing for a completed record: its retention stands', async () => {
    const store = await openStore();
    const id = newId();
    const ticket = await claimTicket(store, id);
    await store.complete(ticket, RESULT, SHORT_MS);

    expect(await store.renew(ticket, LEASE_MS)).toBe(false);
    expect(await server().admin.pTTL(keyOf(id))).toBeLessThanOrEqual(SHORT_MS);
  });
});

describe.skipIf(!redis)('retention', () => {
  it('lets Redis evict a completed record after retentionMs, and the key executes again', async () => {
    const store = await openStore();
    const id = newId();
    await store.complete(await claimTicket(store, id), RESULT, SHORT_MS);
    const ttl = await server().admin.pTTL(keyOf(id));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(SHORT_MS);
    expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('completed');

    // Nothing in the store sweeps: Redis' own expiry removes the key.
    await waitUntil(async () => (await server().admin.exists(keyOf(id))) === 0);

    expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
  });
});

describe.skipIf(!redis)('round trips, as Redis receives them (MONITOR)', () => {
  it('costs one command per claim and per complete: a first execution two, any other answer one', async () => {
    const store = await openStore();
    const id = newId();
    const claim = (fingerprint = FINGERPRINT) => store.claim(id, fingerprint, LEASE_MS);

    const first = await commandsDuring(() => claim());
    expect(first).toMatchObject({ commands: ['EVAL'], value: { state: 'claimed' } });
    const inProgress = await commandsDuring(() => claim());
    expect(inProgress).toMatchObject({ commands: ['EVAL'], value: { state: 'inProgress' } });
    if (first.value.state !== 'claimed') throw new Error('unreachable');
    const { ticket } = first.value;
    const complete = await commandsDuring(() => store.complete(ticket, RESULT, RETENTION_MS));
    expect(complete.commands).toStrictEqual(['EVAL']);
    const replay = await commandsDuring(() => claim());
    expect(replay).toMatchObject({ commands: ['EVAL'], value: { state: 'completed' } });
    // Other arguments under the key: the guard's conflict, from the same single script.
    const conflict = await commandsDuring(() => claim(OTHER_FINGERPRINT));
    expect(conflict).toMatchObject({
      commands: ['EVAL'],
      value: { state: 'completed', fingerprint: FINGERPRINT },
    });
  });

  it('costs the same for a multi-round-trip call: each round one claim and one settling command', async () => {
    const store = await openStore();
    const id = newId();
    const opening = await commandsDuring(() => store.claim(id, FINGERPRINT, LEASE_MS));
    const openingClaim = opening.value;
    if (openingClaim.state !== 'claimed') throw new Error(openingClaim.state);
    const asked = await commandsDuring(() => store.awaitInput(openingClaim.ticket, RESULT, RETENTION_MS));
    expect([opening.commands, asked.commands]).toStrictEqual([['EVAL'], ['EVAL']]);
    const repeat = await commandsDuring(() => store.claim(id, FINGERPRINT, LEASE_MS));
    expect(repeat).toMatchObject({ commands: ['EVAL'], value: { state: 'awaitingInput' } });
    const resumed = await commandsDuring(() => store.claim(id, FINGERPRINT, LEASE_MS, true));
    const resumedClaim = resumed.value;
    if (resumedClaim.state !== 'claimed') throw new Error(resumedClaim.state);
    const released = await commandsDuring(() => store.release(resumedClaim.ticket));
    expect([resumed.commands, released.commands]).toStrictEqual([['EVAL'], ['EVAL']]);
    const again = await store.claim(id, FINGERPRINT, LEASE_MS, true);
    if (again.state !== 'claimed') throw new Error(again.state);
    const completed = await commandsDuring(() => store.complete(again.ticket, RESULT, RETENTION_MS));
    expect(completed.commands).toStrictEqual(['EVAL']);
    expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toMatchObject({ state: 'completed' });
  });
});

describe.skipIf(!redis)('full: at maxmemory, refuse rather than evict a live record', () => {
  it.skipIf(needsOwnServer)(
    'answers full, and keeps every record, while Redis is out of memory',
    async () => {
      const store = await openStore();
      const held = newId();
      await store.complete(await claimTicket(store, held), RESULT, RETENTION_MS);
      // Far below what Redis already uses: every write is refused (noeviction is the default).
      await server().admin.configSet('maxmemory', '1');
      try {
        expect(await store.claim(newId(), FINGERPRINT, LEASE_MS)).toStrictEqual({ state: 'full' });
      } finally {
        await server().admin.configSet('maxmemory', '0');
      }

      expect(await store.claim(held, FINGERPRINT, LEASE_MS)).toMatchObject({
        state: 'completed',
        response: RESULT,
      });
    },
  );
});

describe.skipIf(!redis)('fail closed: an unreachable Redis never means executing without a record', () => {
  it.skipIf(needsOwnServer)(
    'rejects claim and complete with StoreUnavailableError within 2 s while Redis is down, and recovers by itself',
    async () => {
      const store = await openStore();
      const ticket = await claimTicket(store, newId());
      await server().kill();
      try {
        await expectUnavailableWithin(2_000, () => store.claim(newId(), FINGERPRINT, LEASE_MS));
        await expectUnavailableWithin(2_000, () => store.complete(ticket, RESULT, RETENTION_MS));
      } finally {
        await server().restart();
      }

      // The same instance, no reconnect call: node-redis reconnects in the background.
      await waitUntil(
        async () => (await store.claim(newId(), FINGERPRINT, LEASE_MS).catch(() => undefined)) !== undefined,
      );
      expect((await store.claim(newId(), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    },
  );

  it.skipIf(needsOwnServer)(
    'rejects a claim with StoreUnavailableError within 2 s when Redis hangs, and recovers when it answers again',
    async () => {
      const store = await openStore({ commandTimeoutMs: 500 });
      const id = newId();
      server().freeze();
      try {
        await expectUnavailableWithin(2_000, () => store.claim(id, FINGERPRINT, LEASE_MS));
      } finally {
        server().thaw();
      }

      await waitUntil(
        async () => (await store.claim(newId(), FINGERPRINT, LEASE_MS).catch(() => undefined)) !== undefined,
      );
      expect((await store.claim(newId(), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    },
  );

  it.skipIf(needsOwnServer)(
    'undoes a claim that timed out but ran once Redis answered again: the retry executes, the quota slot is free',
    async () => {
      // One record per caller: a claim left standing would refuse the retry on quota, or as in progress.
      const store = await openStore({ commandTimeoutMs: 300, maxRecordsPerScope: 1 });
      const scope = `caller-${randomUUID()}`;
      const id = newId(scope);
      await server().admin.sendCommand(['CLIENT', 'PAUSE', '1500']);
      await expect(store.claim(id, FINGERPRINT, LEASE_MS)).rejects.toBeInstanceOf(StoreUnavailableError);

      // Redis runs the queued claim once the pause ends; the caller was told nothing ran, so the
      // retry must find the key free well before the lease (120 s) would have freed it.
      const retry = () => store.claim(id, FINGERPRINT, LEASE_MS).catch(() => undefined);
      await waitUntil(async () => (await retry())?.state === 'claimed', 10_000, 100);
      expect(await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).toStrictEqual({
        state: 'quotaExceeded',
      });
    },
  );

  it('treats a key holding something it cannot read as unavailable, never as free', async () => {
    const store = await openStore();
    const id = newId();
    await server().admin.set(keyOf(id), 'written by something else');

    await expect(store.claim(id, FINGERPRINT, LEASE_MS)).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(await server().admin.get(keyOf(id))).toBe('written by something else');
  });

  it.skipIf(needsOwnServer)(
    'refuses to connect, within the connect timeout, to a Redis that is down',
    async () => {
      await server().kill();
      try {
        await expectUnavailableWithin(2_000, () =>
          RedisIdempotencyStore.connect(server().url, { connectTimeoutMs: 500 }),
        );
      } finally {
        await server().restart();
      }
    },
  );
});

describe.skipIf(!redis)('clear', () => {
  it("deletes this store's records and nothing outside its prefix", async () => {
    // Glob characters in the prefix must match only themselves, never a neighbour's keys.
    const store = await openStore({ keyPrefix: `${prefix}[ab]*:` });
    const ids = [newId(), newId(), newId()];
    for (const id of ids) await claimTicket(store, id);
    const neighbours = [`${prefix}a-other:${randomUUID()}`, `${prefix}ledger:balance`];
    for (const key of neighbours) await server().admin.set(key, 'keep');

    await store.clear();

    for (const id of ids) expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    expect(await server().admin.exists(neighbours)).toBe(neighbours.length);
  });
});

describe.skipIf(!redis)('key names', () => {
  it("refuses a key prefix with a brace, which would take over every key's hash tag", async () => {
    const client = await openClient();
    for (const keyPrefix of ['app{x}:', 'app{:', 'app}:']) {
      expect(() => new RedisIdempotencyStore(client, { keyPrefix })).toThrow(RangeError);
    }
  });
});

describe.skipIf(!redis)('RedisLedger: one balance for every server instance', () => {
  it('adds up charges made through two instances, each on its own connection', async () => {
    const key = `${prefix}ledger:${randomUUID()}`;
    const one = new RedisLedger(await openClient(), 0, key);
    const two = new RedisLedger(await openClient(), 0, key);
    expect(await one.balance()).toBe(0);

    expect(await one.charge(100)).toBe(100);
    expect(await two.charge(250)).toBe(350);
    await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? one : two).charge(1)));

    expect(await one.balance()).toBe(370);
    expect(await two.balance()).toBe(370);
  });

  it('takes its simulated latency before the charge commits', async () => {
    const key = `${prefix}ledger:${randomUUID()}`;
    const slow = new RedisLedger(await openClient(), 100, key);
    const observer = new RedisLedger(await openClient(), 0, key);

    const charging = slow.charge(100);
    expect(await observer.balance()).toBe(0);

    expect(await charging).toBe(100);
    expect(await observer.balance()).toBe(100);
  });

  it('reset zeroes the balance every instance sees', async () => {
    const key = `${prefix}ledger:${randomUUID()}`;
    const one = new RedisLedger(await openClient(), 0, key);
    const two = new RedisLedger(await openClient(), 0, key);
    await one.charge(500);

    await two.reset();

    expect(await one.balance()).toBe(0);
    expect(await one.charge(1)).toBe(1);
  });
});

/** The commands this file's Redis received, naming this file's keys, while `action` ran. */
function commandsDuring<T>(action: () => Promise<T>) {
  return commandsDuringOn([server().admin], prefix, action);
}

async function expectUnavailableWithin(ms: number, action: () => Promise<unknown>): Promise<void> {
  const started = performance.now();
  await expect(action()).rejects.toBeInstanceOf(StoreUnavailableError);
  expect(performance.now() - started).toBeLessThan(ms);
}
