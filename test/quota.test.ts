// A quota per caller: the SEP's "Servers SHOULD apply rate limits and quotas to the records".
// One caller past its own quota is refused with its own error, nothing executed; every other
// caller's keys go on as before. The memory store and the Redis store give the same answers.

import { randomUUID } from 'node:crypto';
import type { IdempotencyStore, RecordId, StoredResponse } from 'mcp-request-idempotency';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { RedisIdempotencyStore } from 'mcp-request-idempotency/redis';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../processes/in-process.js';
import { REDIS_SKIP_REASON, startRedis, uniqueKeyPrefix, waitUntil } from '../processes/redis.js';
import { jsonRpcText } from './support/hostile.js';
import { type HttpInstance, startHttpInstance } from './support/http.js';

const redis = await startRedis();
if (!redis) console.warn(REDIS_SKIP_REASON);
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closers.splice(0)) await close();
  await redis?.stop();
});

const QUOTA = 3;
const LEASE_MS = 120_000;
/** Short enough to watch records expire on their own within a test, in Redis too. */
const RETENTION_MS = 300;
const RESULT: StoredResponse = { result: { content: [{ type: 'text', text: 'ok' }] } };
const alice = (): RecordId => ({ scope: 'principal:alice', idempotencyKey: randomUUID() });
const bob = (): RecordId => ({ scope: 'principal:bob', idempotencyKey: randomUUID() });

interface QuotaStore {
  store: IdempotencyStore;
  /** Lets every record written so far expire. */
  expireAll(): Promise<void>;
}

type OpenStore = (quota: { records: number; bytes: number }) => Promise<QuotaStore>;

const openMemory: OpenStore = async ({ records, bytes }) => {
  const clock = new ManualClock();
  const store = new MemoryIdempotencyStore({
    now: clock.now,
    maxRecordsPerScope: records,
    maxBytesPerScope: bytes,
  });
  return { store, expireAll: async () => clock.advance(LEASE_MS + RETENTION_MS) };
};

const openRedis: OpenStore = async ({ records, bytes }) => {
  if (!redis) throw new Error(REDIS_SKIP_REASON);
  const prefix = uniqueKeyPrefix('quota');
  const store = await RedisIdempotencyStore.connect(redis.url, {
    keyPrefix: prefix,
    maxRecordsPerScope: records,
    maxBytesPerScope: bytes,
  });
  closers.push(async () => {
    await store.close();
    await redis.flush(prefix);
  });
  // Redis expires the records on its own; the quota must notice without being told.
  return { store, expireAll: () => new Promise<void>((resolve) => setTimeout(resolve, RETENTION_MS + 50)) };
};

const stores: Array<[string, OpenStore]> = [['memory store', openMemory]];
if (redis) stores.push(['Redis store', openRedis]);

/** Claims and completes a fresh key of `id`'s scope, as an execution would. */
async function execute(store: IdempotencyStore, id: RecordId, response = RESULT): Promise<string> {
  const claim = await store.claim(id, 'fingerprint', LEASE_MS);
  if (claim.state === 'claimed') await store.complete(claim.ticket, response, RETENTION_MS);
  return claim.state;
}

describe.each(stores)('a quota per caller, in the %s', (_, open) => {
  it('refuses a caller past its quota of records, and no other caller', async () => {
    const { store } = await open({ records: QUOTA, bytes: 1_000_000 });
    const kept = alice();
    expect(await execute(store, kept)).toBe('claimed');
    for (let i = 1; i < QUOTA; i++) expect(await execute(store, alice())).toBe('claimed');
    expect(await execute(store, alice())).toBe('quotaExceeded');
    expect(await execute(store, bob())).toBe('claimed');
    // Her stored responses still replay: a replay adds no record.
    expect((await store.claim(kept, 'fingerprint', LEASE_MS)).state).toBe('completed');
  });

  it('counts claims still in progress against the quota', async () => {
    const { store } = await open({ records: QUOTA, bytes: 1_000_000 });
    for (let i = 0; i < QUOTA; i++)
      expect((await store.claim(alice(), 'fingerprint', LEASE_MS)).state).toBe('claimed');
    expect((await store.claim(alice(), 'fingerprint', LEASE_MS)).state).toBe('quotaExceeded');
  });

  it('frees the quota as the caller’s records expire on their own', async () => {
    const { store, expireAll } = await open({ records: QUOTA, bytes: 1_000_000 });
    for (let i = 0; i < QUOTA; i++) await execute(store, alice());
    expect(await execute(store, alice())).toBe('quotaExceeded');
    await expireAll();
    await waitUntil(async () => (await execute(store, alice())) === 'claimed', 2_000);
  });

  it('refuses a caller whose stored responses reach its quota of bytes', async () => {
    const { store } = await open({ records: 100, bytes: 1_000 });
    const big: StoredResponse = { result: { content: [{ type: 'text', text: 'x'.repeat(1_200) }] } };
    expect(await execute(store, alice(), big)).toBe('claimed');
    expect(await execute(store, alice())).toBe('quotaExceeded');
    expect(await execute(store, bob())).toBe('claimed');
  });

  it('counts a key awaiting input once, through its continuations', async () => {
    const { store } = await open({ records: 2, bytes: 1_000_000 });
    const waiting = alice();
    const opening = await store.claim(waiting, 'fingerprint', LEASE_MS);
    if (opening.state !== 'claimed') throw new Error(opening.state);
    await store.awaitInput(opening.ticket, RESULT, LEASE_MS);
    expect(await execute(store, alice())).toBe('claimed');
    expect(await execute(store, alice())).toBe('quotaExceeded');
    // At her quota, her continuation still takes over its own key; refused, it gives the key back.
    const resumed = await store.claim(waiting, 'fingerprint', LEASE_MS, true);
    if (resumed.state !== 'claimed') throw new Error(resumed.state);
    expect(await store.release(resumed.ticket)).toBe(true);
    expect((await store.claim(waiting, 'fingerprint', LEASE_MS)).state).toBe('awaitingInput');
    expect(await execute(store, alice())).toBe('quotaExceeded');
  });

  it('frees the record of a refused continuation that had no key to resume', async () => {
    const { store } = await open({ records: 1, bytes: 1_000_000 });
    const claim = await store.claim(alice(), 'fingerprint', LEASE_MS, true);
    if (claim.state !== 'claimed') throw new Error(claim.state);
    expect(await execute(store, alice())).toBe('quotaExceeded');
    expect(await store.release(claim.ticket)).toBe(true);
    expect(await execute(store, alice())).toBe('claimed');
  });

  it('counts the answer that completes a resumed key instead of its question, not beside it', async () => {
    const { store } = await open({ records: 100, bytes: 1_000 });
    const sized: StoredResponse = { result: { content: [{ type: 'text', text: 'x'.repeat(550) }] } };
    const waiting = alice();
    const opening = await store.claim(waiting, 'fingerprint', LEASE_MS);
    if (opening.state !== 'claimed') throw new Error(opening.state);
    await store.awaitInput(opening.ticket, sized, LEASE_MS);
    const resumed = await store.claim(waiting, 'fingerprint', LEASE_MS, true);
    if (resumed.state !== 'claimed') throw new Error(resumed.state);
    await store.complete(resumed.ticket, sized, RETENTION_MS);
    // About 600 characters stored, not 1,200: she is still under her 1,000, until the next 600.
    expect(await execute(store, alice(), sized)).toBe('claimed');
    expect(await execute(store, alice())).toBe('quotaExceeded');
  });

  it('forgets the quota with the records when the store is cleared', async () => {
    const { store } = await open({ records: 1, bytes: 1_000_000 });
    await execute(store, alice());
    expect(await execute(store, alice())).toBe('quotaExceeded');
    await store.clear();
    expect(await execute(store, alice())).toBe('claimed');
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

  it.skipIf(!redis)('in Redis: every key a caller adds expires with its records', async () => {
    if (!redis) return;
    const prefix = uniqueKeyPrefix('many-callers');
    const store = await RedisIdempotencyStore.connect(redis.url, { keyPrefix: prefix });
    closers.push(() => store.close());
    const SHORT_MS = 300;
    for (let n = 0; n < 200; n++) {
      const claim = await store.claim(principal(n), 'fingerprint', SHORT_MS);
      if (claim.state !== 'claimed') throw new Error(claim.state);
      await store.complete(claim.ticket, RESULT, SHORT_MS);
    }
    const keysUnder = async () => (await redis.admin.keys(`${prefix}*`)).length;
    expect(await keysUnder()).toBe(600); // a record, an index and a sizes hash per caller
    // The index and sizes keys live as long as their longest lease or retention, then go.
    await waitUntil(async () => (await keysUnder()) === 0, 3_000);
  });
});

describe('a quota per caller, over HTTP', () => {
  let server: HttpInstance;
  const call = (token: string, params: Record<string, unknown>) =>
    fetch(server.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${token}`,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
    }).then(async (response) => JSON.parse(await jsonRpcText(response)));
  const charge = (amount: number) => ({
    name: 'charge_guarded',
    arguments: { amount },
    idempotencyKey: randomUUID(),
  });

  it('refuses alice’s keyed charge past her quota with its own error, charging nothing, while bob charges and replays', async () => {
    server = await startHttpInstance(['--max-records', '100', '--max-records-per-caller', String(QUOTA)], {
      DEMO_BEARER_TOKENS: 'alice:token-a,bob:token-b',
    });
    closers.push(() => server.stop());
    for (let i = 0; i < QUOTA; i++) expect((await call('token-a', charge(1))).result).toBeDefined();
    const refused = await call('token-a', charge(1));
    expect(idempotencyErrorOf(refused.error)).toMatchObject({
      code: INTERNAL_ERROR,
      type: IdempotencyErrorType.quotaExceeded,
    });
    const balance = await call('token-a', { name: 'get_balance', arguments: {} });
    expect(balance.result.structuredContent.balance).toBe(QUOTA);
    const bobs = charge(7);
    const first = await call('token-b', bobs);
    expect(first.result.structuredContent).toStrictEqual({ charged: 7, balance: QUOTA + 7 });
    expect(await call('token-b', bobs)).toStrictEqual(first);
    const logged = server.decisions().filter((d) => d.decision === 'quotaExceeded');
    expect(logged.map((d) => d.scope)).toStrictEqual(['principal:alice']);
  });
});
