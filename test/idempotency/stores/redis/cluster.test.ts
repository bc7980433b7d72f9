// The Redis store on a Redis Cluster: three masters on loopback, started by the test. Every
// script's keys share a slot, scopes spread over the masters, a claim stays atomic, a decision
// costs the round trips it costs on one Redis, and a master killed under a stream of keyed
// calls fails its own keys closed at once, comes back by itself, and executes nothing twice.

import { randomUUID } from 'node:crypto';
import {
  INTERNAL_ERROR,
  type RecordId,
  type StoredResponse,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { RedisIdempotencyStore, type RedisStoreOptions, redisKeysOf } from 'mcp-request-idempotency/redis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { sleep, waitUntil } from '../../../../demo/processes/bounds.js';
import { ERAS } from '../../../../demo/processes/launch.js';
import {
  REDIS_CLUSTER_SKIP_REASON,
  startRedisCluster,
  type TestRedisCluster,
} from '../../../../demo/processes/redis-cluster.js';
import { commandsDuring } from '../../../../demo/processes/redis-commands.js';
import { type TestRedis, uniqueKeyPrefix } from '../../../../demo/processes/redis-server.js';
import { MemoryLedger } from '../../../../ledger.js';
import { connectHttp } from '../../../support/http.js';
import { connectInProcess, type InProcessConnection } from '../../../support/in-process.js';
import { type Attempt, chargeEach, type Operation } from '../../../support/keyed-stream.js';
import { describeSepCases } from '../../../support/sep-cases.js';
import { expectUnavailableWithin, replayOf } from '../../../support/store-fixtures.js';
import { describeTwoInstances } from '../../../support/two-instances.js';

// Persistent (every write fsynced before it is answered): a master killed and restarted keeps
// the records it acknowledged, so "nothing executed twice" can be checked across its crash.
const cluster = await startRedisCluster({ appendOnly: true });
if (!cluster) console.warn(REDIS_CLUSTER_SKIP_REASON);
afterAll(async () => {
  await cluster?.stop();
});

function servers(): TestRedisCluster {
  if (!cluster) throw new Error('unreachable: these tests are skipped without a cluster');
  return cluster;
}

const prefix = uniqueKeyPrefix('cluster');
const LEASE_MS = 120_000;
const RETENTION_MS = 300_000;
const FINGERPRINT = 'fingerprint-of-charge_guarded(100)';
const OTHER_FINGERPRINT = 'fingerprint-of-charge_guarded(999)';
const RESULT: StoredResponse = { result: { content: [{ type: 'text', text: 'Charged 100.' }] } };

const stores: RedisIdempotencyStore[] = [];

/** A store with its own cluster connection, as each server instance has. */
async function openStore(options: RedisStoreOptions = {}): Promise<RedisIdempotencyStore> {
  const store = await RedisIdempotencyStore.connectCluster(servers().urls, { keyPrefix: prefix, ...options });
  stores.push(store);
  return store;
}

afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

const newId = (scope: string): RecordId => ({ scope, idempotencyKey: randomUUID() });

/** The master that holds a scope's records (all of them: the scope is the hash tag). */
function masterOf(scope: string): Promise<TestRedis> {
  return servers().nodeOf(redisKeysOf(prefix, newId(scope))[0]);
}

/** One scope per master, named `${label}-N`: the first names that land on each. */
async function scopePerMaster(label: string): Promise<string[]> {
  const found = new Map<string, string>();
  for (let n = 0; found.size < servers().nodes.length; n++) {
    if (n === 1_000) throw new Error('no scope for some master in 1,000 names');
    const scope = `${label}-${n}`;
    const { url } = await masterOf(scope);
    if (!found.has(url)) found.set(url, scope);
  }
  return servers().nodes.map(({ url }) => found.get(url) ?? '');
}

describe.skipIf(!cluster)('keys: one slot per scope, the scopes spread over the masters', () => {
  it('keeps a record, its scope index and its sizes in one slot, whatever braces the scope holds', async () => {
    const store = await openStore();
    const admin = servers().nodes[0]?.admin;
    if (!admin) throw new Error('unreachable');
    for (const scope of ['alice', 'a}b', '{x}', '}{', '{}', '', 'principal:{bob}:{{']) {
      const id = newId(scope);
      const slots = await Promise.all(redisKeysOf(prefix, id).map((key) => admin.clusterKeySlot(key)));
      expect(new Set(slots).size, `slots of scope ${JSON.stringify(scope)}`).toBe(1);

      // Each script runs (a key in another slot would be refused with CROSSSLOT), and replays.
      const claim = await store.claim(id, FINGERPRINT, LEASE_MS);
      if (claim.state !== 'claimed') throw new Error(`expected a claim, got ${claim.state}`);
      expect(await store.renew(claim.ticket, LEASE_MS)).toBe(true);
      expect(await store.complete(claim.ticket, RESULT, RETENTION_MS)).toBe(true);
      expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
    }
  });

  it('writes the records of 30 scopes to all three masters, each record on the master of its slot', async () => {
    const store = await openStore();
    const holders = new Map<string, number>();
    for (let n = 0; n < 30; n++) {
      const id = newId(`caller-${n}`);
      expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      const [record] = redisKeysOf(prefix, id);
      const master = await servers().nodeOf(record);
      // Asked of that master alone: the record is really there, not behind a redirect.
      expect(await master.admin.exists(record)).toBe(1);
      holders.set(master.url, (holders.get(master.url) ?? 0) + 1);
    }
    expect(holders.size).toBe(3);
    console.info(`30 scopes' records per master: ${[...holders.values()].join(', ')}`);
  });
});

describe.skipIf(!cluster)('claim is atomic across instances on a cluster', () => {
  it('of 40 concurrent claims of one key from two instances, exactly one is claimed, on every master', async () => {
    const [one, two] = await Promise.all([openStore(), openStore()]);
    for (const scope of await scopePerMaster('atomic')) {
      const id = newId(scope);

      const claims = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          (i % 2 === 0 ? one : two).claim(id, `fingerprint-${i}`, LEASE_MS),
        ),
      );

      const winners = claims.flatMap((claim) => (claim.state === 'claimed' ? [claim.ticket] : []));
      expect(winners).toHaveLength(1);
      // Everyone else is told the key is held, and by whom (the winner's fingerprint).
      expect(claims.filter((claim) => claim.state !== 'claimed')).toStrictEqual(
        Array(39).fill({ state: 'inProgress', fingerprint: winners[0]?.fingerprint }),
      );
    }
  });
});

describe.skipIf(!cluster)('round trips on a cluster, as every master receives them (MONITOR)', () => {
  it('costs one command per claim and per complete, all on the master of the scope: a first execution two, any other answer one', async () => {
    const store = await openStore();
    const id = newId('alice');
    const nodes = servers().nodes;
    const owner = nodes.indexOf(await masterOf('alice'));
    const onOwner = (commands: string[]) => nodes.map((_, i) => (i === owner ? commands : []));
    const seen = <T>(action: () => Promise<T>) =>
      commandsDuring(
        nodes.map((node) => node.admin),
        prefix,
        action,
      );
    const claim = (fingerprint = FINGERPRINT) => store.claim(id, fingerprint, LEASE_MS);

    const first = await seen(() => claim());
    expect(first).toMatchObject({ perNode: onOwner(['EVALSHA']), value: { state: 'claimed' } });
    const inProgress = await seen(() => claim());
    expect(inProgress).toMatchObject({ perNode: onOwner(['EVALSHA']), value: { state: 'inProgress' } });
    if (first.value.state !== 'claimed') throw new Error('unreachable');
    const { ticket } = first.value;
    const complete = await seen(() => store.complete(ticket, RESULT, RETENTION_MS));
    expect(complete.perNode).toStrictEqual(onOwner(['EVALSHA']));
    const replay = await seen(() => claim());
    expect(replay).toMatchObject({ perNode: onOwner(['EVALSHA']), value: { state: 'completed' } });
    const conflict = await seen(() => claim(OTHER_FINGERPRINT));
    expect(conflict).toMatchObject({
      perNode: onOwner(['EVALSHA']),
      value: { state: 'completed', fingerprint: FINGERPRINT },
    });
  });
});

describe.skipIf(!cluster)('clear on a cluster', () => {
  it("deletes this store's records on every master, and nothing outside its prefix", async () => {
    const store = await openStore();
    const ids = (await scopePerMaster('clear')).flatMap((scope) => [newId(scope), newId(scope)]);
    for (const id of ids) expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    // A neighbour on each master: a key under another prefix, in the slot of one of the records.
    const neighbours = await Promise.all(
      ids.map(async (id) => {
        const [record] = redisKeysOf(prefix, id);
        const key = `${prefix.slice(0, -1)}-neighbour:${record.slice(prefix.length)}`;
        const master = await servers().nodeOf(key);
        await master.admin.set(key, 'keep');
        return { key, master };
      }),
    );
    expect(new Set(neighbours.map(({ master }) => master.url)).size).toBe(3);

    await store.clear();

    for (const id of ids) expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    for (const { key, master } of neighbours) expect(await master.admin.get(key)).toBe('keep');
  });
});

describe.skipIf(!cluster)('fail closed: a master hung or down never means executing without a record', () => {
  it('fails a claim on a hung master within the command bound, while the other masters answer, and holds the key once it wakes', async () => {
    const store = await openStore({ commandTimeoutMs: 500 });
    const [hungScope, ...otherScopes] = await scopePerMaster('hung');
    if (!hungScope) throw new Error('unreachable');
    const hung = await masterOf(hungScope);
    const id = newId(hungScope);
    hung.freeze();
    try {
      const started = performance.now();
      await expect(store.claim(id, FINGERPRINT, LEASE_MS)).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(performance.now() - started).toBeLessThan(1_500);
      for (const scope of otherScopes) {
        expect((await store.claim(newId(scope), FINGERPRINT, LEASE_MS)).state).toBe('claimed');
      }
    } finally {
      hung.thaw();
    }

    // The timed-out claim still ran once the master woke: the key is held, never executed twice.
    expect(await store.claim(id, FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'inProgress',
      fingerprint: FINGERPRINT,
    });
  });

  it('refuses rediss:// seeds, whose TLS would not reach the nodes the client discovers', async () => {
    await expect(RedisIdempotencyStore.connectCluster(['rediss://127.0.0.1:6379'])).rejects.toThrow(
      RangeError,
    );
  });

  it('refuses to connect, within the connect timeout, while a master is down', async () => {
    const [down] = servers().nodes;
    if (!down) throw new Error('unreachable');
    await down.kill();
    try {
      // Refused, not hung: a bound ten times the timeout, so that only a hang reaches it on a busy
      // machine (the seeds are tried in turn, each within the timeout).
      await expectUnavailableWithin(5_000, () =>
        RedisIdempotencyStore.connectCluster(servers().urls, { connectTimeoutMs: 500 }),
      );
    } finally {
      await down.restart();
    }
  });
});

// --- A master dies under a stream of keyed calls ---

/** An operation of the stream, made by one caller (one scope, so on one master). */
interface ScopedOperation extends Operation {
  scope: string;
}

describe.skipIf(!cluster)('a master killed and restarted during a stream of keyed calls', () => {
  it("fails that master's keys closed at once while the others go on, recovers by itself, and charges each key exactly once", async () => {
    // A lease short enough to end within the test: a claim that reached the master just before
    // the kill, its answer lost, holds its key until then (and was never executed).
    const STREAM_LEASE_MS = 2_000;
    const CHARGE_MS = 50;
    const PER_SCOPE = 30;
    const [victimScope, ...otherScopes] = await scopePerMaster('stream');
    if (!victimScope) throw new Error('unreachable');
    const victim = await masterOf(victimScope);
    // The provider, outside Redis: it survives the master dying, and its balance is every charge.
    const ledger = new MemoryLedger(CHARGE_MS);
    const instanceStores = [await openStore(), await openStore()];
    // Two instances (each its own cluster connection) for each scope: a caller's retry may land
    // on either.
    const instances = new Map<string, InProcessConnection[]>();
    for (const scope of [victimScope, ...otherScopes]) {
      instances.set(
        scope,
        await Promise.all(
          instanceStores.map((store) => connectInProcess({ store, ledger, scope, leaseMs: STREAM_LEASE_MS })),
        ),
      );
    }
    const operations: ScopedOperation[] = [victimScope, ...otherScopes].flatMap((scope, s) =>
      Array.from({ length: PER_SCOPE }, (_, i) => ({
        scope,
        amount: s * PER_SCOPE + i + 1,
        idempotencyKey: randomUUID(),
      })),
    );
    const attempts: Attempt<ScopedOperation>[] = [];
    const charged = (scope: string) =>
      attempts.filter((a) => a.operation.scope === scope && a.outcome === 'charged').length;

    try {
      // Two workers per scope, each retrying its operation on the scope's two instances in turn.
      const workers = [victimScope, ...otherScopes].flatMap((scope) => {
        const queue = operations.filter((op) => op.scope === scope);
        const callers = (instances.get(scope) ?? []).map((i) => i.client);
        return [chargeEach(queue, callers, 0, attempts), chargeEach(queue, callers, 1, attempts)];
      });
      await waitUntil(async () => charged(victimScope) >= PER_SCOPE / 4, 20_000);
      await victim.kill();
      const killedAt = performance.now();
      await sleep(1_000);
      const restartedAt = performance.now();
      await victim.restart(); // back once every node says cluster_state:ok
      const backAt = performance.now();
      await Promise.race([
        Promise.all(workers),
        sleep(30_000).then(() => {
          throw new Error(`stream did not finish: ${attempts.length} calls`);
        }),
      ]);

      // Fail closed, at once: every call to the dead master's scope, sent while it was down, was
      // refused long before the store's 1 s command bound, as "nothing happened, retry later".
      const down = (a: Attempt) => a.sentAt > killedAt && a.sentAt < restartedAt;
      const refusedWhileDown = attempts.filter((a) => a.operation.scope === victimScope && down(a));
      expect(refusedWhileDown.length).toBeGreaterThan(0);
      expect(refusedWhileDown.filter((a) => a.outcome !== 'storeUnavailable')).toStrictEqual([]);
      for (const refusal of refusedWhileDown) {
        expect(refusal.code).toBe(INTERNAL_ERROR);
        expect(refusal.waitedMs).toBeLessThan(500);
      }
      // The other masters went on serving their scopes meanwhile.
      const servedWhileDown = attempts.filter((a) => a.operation.scope !== victimScope && down(a));
      expect(servedWhileDown.length).toBeGreaterThan(0);
      expect(servedWhileDown.filter((a) => a.outcome === 'storeUnavailable')).toStrictEqual([]);
      // Recovery without anyone's help (the same stores, no reconnect call), as soon as the
      // restarted master takes writes again.
      const firstBack = attempts.find(
        (a) => a.operation.scope === victimScope && a.sentAt > killedAt && a.outcome === 'charged',
      );
      if (!firstBack) throw new Error("the dead master's scope was never served again");
      expect(firstBack.sentAt - restartedAt).toBeLessThan(backAt - restartedAt + 1_000);

      // Nothing lost, nothing twice: each operation charged once and answered with its own charge.
      const decisions = [...instances.values()].flat().flatMap((i) => i.decisions);
      for (const op of operations) {
        expect(JSON.parse(op.answer ?? '{}')).toMatchObject({ charged: op.amount });
        const ran = decisions.filter(
          (d) =>
            d.idempotencyKey === op.idempotencyKey &&
            (d.decision === 'executed' || d.decision === 'unrecorded'),
        );
        expect(ran, `executions of operation ${op.amount}`).toHaveLength(1);
      }
      const total = operations.reduce((sum, op) => sum + op.amount, 0);
      expect(await ledger.balance()).toBe(total);

      const refused = attempts.filter((a) => a.outcome === 'storeUnavailable');
      const slowest = (list: Attempt[]) => Math.max(...list.map((a) => a.waitedMs)).toFixed(1);
      console.info(
        `cluster stream: ${operations.length} operations in ${attempts.length} calls; ` +
          `${refused.length} failed closed, slowest ${slowest(refused)} ms (${refusedWhileDown.length} to the ` +
          `dead master's scope while it was down, slowest ${slowest(refusedWhileDown)} ms); ` +
          `${servedWhileDown.length} calls to the other masters served meanwhile; the restarted master ` +
          `took writes after ${(backAt - restartedAt).toFixed(0)} ms (cluster_state:ok on every node), its ` +
          `scope's first charge was sent ${(firstBack.sentAt - restartedAt).toFixed(0)} ms after the restart began`,
      );
    } finally {
      await victim.restart().catch(() => {});
      await Promise.all([...instances.values()].flat().map((i) => i.close()));
    }
  }, 60_000);
});

// --- Server instances on the cluster, over HTTP ---

function clusterArgs(keyPrefix: string): string[] {
  return ['--store', 'redis', '--redis-cluster', servers().urls.join(','), '--redis-prefix', keyPrefix];
}

describe.skipIf(!cluster)('SEP cases with the Redis store on a cluster', () => {
  // One era: the other only changes the wire, not a store command.
  const [era] = ERAS;
  if (era === undefined) throw new Error('unreachable');
  describeSepCases(
    `stateless HTTP, ${era}, with the Redis store on a cluster`,
    (args) => connectHttp([...args, ...clusterArgs(uniqueKeyPrefix('sep'))], era),
    { transport: 'http', recordCap: false },
  );
});

describeTwoInstances(
  'a Redis Cluster',
  cluster && { args: clusterArgs, admins: () => cluster.nodes.map((node) => node.admin) },
);
