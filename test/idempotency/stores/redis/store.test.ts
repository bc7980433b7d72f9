// The Redis store and ledger against a real redis-server: what only Redis can get wrong. The
// store contract every store keeps (claims, replays, leases, retention, quotas, `full` at
// `maxmemory`, failing closed while Redis hangs) is test/idempotency/stores/contract.test.ts; here, what the
// scripts cost in round trips, failing closed when Redis is stopped or paused, what a key holds,
// and the key names.

import { randomUUID } from 'node:crypto';
import { type RecordId, StoreUnavailableError } from 'mcp-request-idempotency';
import {
  closeRedis,
  connectRedis,
  type RedisClient,
  RedisIdempotencyStore,
  type RedisStoreOptions,
  redisKeysOf,
} from 'mcp-request-idempotency/redis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { RedisLedger } from '../../../../demo/hosting/ledgers/redis.js';
import { waitUntil } from '../../../../demo/processes/bounds.js';
import { commandsDuring as commandsDuringOn } from '../../../../demo/processes/redis-commands.js';
import {
  REDIS_SKIP_REASON,
  startRedis,
  type TestRedis,
  uniqueKeyPrefix,
} from '../../../../demo/processes/redis-server.js';
import { CHARGE_LIMIT, ChargeDeclined } from '../../../../ledger.js';
import {
  claimTicket,
  expectUnavailableWithin,
  FINGERPRINT,
  LEASE_MS,
  newId,
  OTHER_FINGERPRINT,
  RESULT,
  RETENTION_MS,
} from '../../../support/store-fixtures.js';

const redis = await startRedis();
if (!redis) console.warn(REDIS_SKIP_REASON);
else if (!redis.owned) {
  console.warn('Fail-closed tests skipped: they stop Redis, so need a private redis-server, not REDIS_URL');
}
const needsOwnServer = !redis?.owned;

const prefix = uniqueKeyPrefix('redis-store');

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

function keyOf(id: RecordId): string {
  return redisKeysOf(prefix, id)[0];
}

describe.skipIf(!redis)('many callers, each under its quota', () => {
  it('every key a caller adds expires with its records', async () => {
    const keyPrefix = uniqueKeyPrefix('many-callers');
    const store = await openStore({ keyPrefix });
    // Long enough that no record expires before the 200 callers' keys are counted, on a busy
    // machine too (at 300 ms, 573 of the 600 were counted there once); short enough to watch go.
    const SHORT_MS = 2_000;
    for (let n = 0; n < 200; n++) {
      const caller: RecordId = { scope: `principal:p${n}`, idempotencyKey: randomUUID() };
      const claim = await store.claim(caller, FINGERPRINT, SHORT_MS);
      if (claim.state !== 'claimed') throw new Error(claim.state);
      await store.complete(claim.ticket, RESULT, SHORT_MS);
    }
    // Every key but the store's marker (see the next test), which has no expiry.
    const keysUnder = async () =>
      (await server().admin.keys(`${keyPrefix}*`)).filter((key) => key !== `${keyPrefix}alive`).length;
    expect(await keysUnder()).toBe(600); // a record, an index and a sizes hash per caller
    // The index and sizes keys live as long as their longest lease or retention, then go.
    await waitUntil(async () => (await keysUnder()) === 0, SHORT_MS + 3_000);
  });
});

describe.skipIf(!redis)('round trips, as Redis receives them (MONITOR)', () => {
  it('costs one command per claim and per complete: a first execution two, any other answer one', async () => {
    const store = await openStore();
    const id = newId();
    const claim = (fingerprint = FINGERPRINT) => store.claim(id, fingerprint, LEASE_MS);

    const first = await commandsDuring(() => claim());
    expect(first).toMatchObject({ commands: ['EVALSHA'], value: { state: 'claimed' } });
    const inProgress = await commandsDuring(() => claim());
    expect(inProgress).toMatchObject({ commands: ['EVALSHA'], value: { state: 'inProgress' } });
    if (first.value.state !== 'claimed') throw new Error('unreachable');
    const { ticket } = first.value;
    const complete = await commandsDuring(() => store.complete(ticket, RESULT, RETENTION_MS));
    expect(complete.commands).toStrictEqual(['EVALSHA']);
    const replay = await commandsDuring(() => claim());
    expect(replay).toMatchObject({ commands: ['EVALSHA'], value: { state: 'completed' } });
    // Other arguments under the key: the guard's conflict, from the same single script.
    const conflict = await commandsDuring(() => claim(OTHER_FINGERPRINT));
    expect(conflict).toMatchObject({
      commands: ['EVALSHA'],
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
    expect([opening.commands, asked.commands]).toStrictEqual([['EVALSHA'], ['EVALSHA']]);
    const repeat = await commandsDuring(() => store.claim(id, FINGERPRINT, LEASE_MS));
    expect(repeat).toMatchObject({ commands: ['EVALSHA'], value: { state: 'awaitingInput' } });
    const resumed = await commandsDuring(() => store.claim(id, FINGERPRINT, LEASE_MS, true));
    const resumedClaim = resumed.value;
    if (resumedClaim.state !== 'claimed') throw new Error(resumedClaim.state);
    const released = await commandsDuring(() => store.release(resumedClaim.ticket));
    expect([resumed.commands, released.commands]).toStrictEqual([['EVALSHA'], ['EVALSHA']]);
    const again = await store.claim(id, FINGERPRINT, LEASE_MS, true);
    if (again.state !== 'claimed') throw new Error(again.state);
    const completed = await commandsDuring(() => store.complete(again.ticket, RESULT, RETENTION_MS));
    expect(completed.commands).toStrictEqual(['EVALSHA']);
    expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toMatchObject({ state: 'completed' });
  });
});

describe.skipIf(!redis)('fail closed: an unreachable Redis never means executing without a record', () => {
  it.skipIf(needsOwnServer)(
    'rejects claim and complete with StoreUnavailableError within 2 s while Redis is down, and recovers by itself',
    async () => {
      // A prefix of its own: Redis comes back empty, which this store's marker will remember.
      const store = await openStore({ keyPrefix: uniqueKeyPrefix('redis-restart') });
      const ticket = await claimTicket(store, newId());
      await server().kill();
      try {
        await expectUnavailableWithin(2_000, () => store.claim(newId(), FINGERPRINT, LEASE_MS));
        await expectUnavailableWithin(2_000, () => store.complete(ticket, RESULT, RETENTION_MS));
      } finally {
        await server().restart();
      }

      // The same instance, no reconnect call: node-redis reconnects in the background. Redis
      // came back without its data (no persistence here), so new keys fail closed for one lease
      // of the claim asking (short here), then are served.
      const SHORT_LEASE_MS = 500;
      let refusal: unknown;
      await waitUntil(async () => {
        try {
          return (await store.claim(newId(), FINGERPRINT, SHORT_LEASE_MS)).state === 'claimed';
        } catch (error) {
          refusal = error;
          return false;
        }
      });
      expect(String(refusal)).toMatch(/Redis lost this store's records/);
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

describe.skipIf(!redis)('options', () => {
  it('refuses a command bound that is no positive whole number of ms, and checks a shared client’s store alike', async () => {
    for (const bad of [0, -1, Number.NaN, 2.5]) {
      await expect(RedisIdempotencyStore.connect(server().url, { commandTimeoutMs: bad })).rejects.toThrow(
        new RangeError(`commandTimeoutMs must be a positive integer, got ${bad}`),
      );
    }
    // A store on a client someone else owns takes its options through the same checks.
    const client = await openClient();
    expect(() => new RedisIdempotencyStore(client, { maxRecordsPerScope: -1 })).toThrow(
      new RangeError('maxRecordsPerScope must be a positive integer, got -1'),
    );
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

  it('declines a charge over the limit, numbering the declines of every instance in one count', async () => {
    const key = `${prefix}ledger:${randomUUID()}`;
    const one = new RedisLedger(await openClient(), 0, key);
    const two = new RedisLedger(await openClient(), 0, key);
    await one.charge(100);

    await expect(one.charge(CHARGE_LIMIT + 1)).rejects.toThrow(
      new ChargeDeclined(CHARGE_LIMIT + 1, CHARGE_LIMIT, 1),
    );
    await expect(two.charge(CHARGE_LIMIT + 1)).rejects.toThrow(/\(decline 2\)$/);
    // Nothing was committed, and the limit itself is a charge like any other.
    expect(await two.balance()).toBe(100);
    expect(await two.charge(CHARGE_LIMIT)).toBe(CHARGE_LIMIT + 100);

    await one.reset();
    await expect(two.charge(CHARGE_LIMIT + 1)).rejects.toThrow(/\(decline 1\)$/);
  });
});

/** The commands this file's Redis received, naming this file's keys, while `action` ran. */
function commandsDuring<T>(action: () => Promise<T>) {
  return commandsDuringOn([server().admin], prefix, action);
}
