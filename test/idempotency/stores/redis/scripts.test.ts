// The Redis store sends its scripts by digest (EVALSHA) and whole only when Redis has forgotten
// them. A Redis forgets every script on a restart, a failover to a replica that never ran them,
// or SCRIPT FLUSH: then no call may fail, none may execute twice, and the store must learn the
// script again in one round trip, on one Redis and on every master of a cluster.

import { randomUUID } from 'node:crypto';
import type { RecordId } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { RedisIdempotencyStore } from 'mcp-request-idempotency/redis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { REDIS_CLUSTER_SKIP_REASON, startRedisCluster } from '../../../../demo/processes/redis-cluster.js';
import { commandsDuring } from '../../../../demo/processes/redis-commands.js';
import {
  REDIS_SKIP_REASON,
  startRedis,
  type TestRedis,
  uniqueKeyPrefix,
} from '../../../../demo/processes/redis-server.js';
import { MemoryLedger } from '../../../../ledger.js';
import { connectInProcess } from '../../../support/in-process.js';
import { FINGERPRINT, LEASE_MS, RESULT, RETENTION_MS, replayOf } from '../../../support/store-fixtures.js';

const redis = await startRedis();
if (!redis) console.warn(REDIS_SKIP_REASON);
const cluster = await startRedisCluster();
if (!cluster) console.warn(REDIS_CLUSTER_SKIP_REASON);
afterAll(async () => {
  await redis?.stop();
  await cluster?.stop();
});

const prefix = uniqueKeyPrefix('redis-scripts');
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function flushScripts(nodes: readonly TestRedis[]): Promise<void> {
  for (const node of nodes) await node.admin.scriptFlush();
}

/**
 * A claim and its record with every script flushed before each, then the retry: what each step
 * sent, as the nodes received it, and what the retry found.
 */
async function firstExecutionThenRetry(store: RedisIdempotencyStore, nodes: readonly TestRedis[]) {
  const id: RecordId = { scope: 'alice', idempotencyKey: randomUUID() };
  const admins = nodes.map((node) => node.admin);
  const sent = <T>(action: () => Promise<T>) =>
    commandsDuring(admins, prefix, async () => {
      await flushScripts(nodes);
      return action();
    });
  const claimed = await sent(() => store.claim(id, FINGERPRINT, LEASE_MS));
  const claim = claimed.value;
  if (claim.state !== 'claimed') throw new Error(`expected a claim, got ${claim.state}`);
  const completed = await sent(() => store.complete(claim.ticket, RESULT, RETENTION_MS));
  const retried = await sent(() => store.claim(id, FINGERPRINT, LEASE_MS));
  // Redis has the scripts again: the next call sends only their digests.
  const after = await commandsDuring(admins, prefix, () => store.claim(id, FINGERPRINT, LEASE_MS));
  return { claimed, completed, retried, after };
}

describe.skipIf(!redis)('one Redis that forgets its scripts (SCRIPT FLUSH)', () => {
  const server = () => {
    if (!redis) throw new Error('unreachable: skipped without Redis');
    return redis;
  };

  it('answers every call, the forgotten script sent whole once, and replays the record', async () => {
    const store = await RedisIdempotencyStore.connect(server().url, { keyPrefix: prefix });
    cleanups.push(() => store.close());
    const { claimed, completed, retried, after } = await firstExecutionThenRetry(store, [server()]);
    expect(claimed.commands).toStrictEqual(['EVALSHA', 'EVAL']);
    expect(completed).toMatchObject({ commands: ['EVALSHA', 'EVAL'], value: true });
    expect(retried).toMatchObject({ commands: ['EVALSHA', 'EVAL'], value: { state: 'completed' } });
    expect(retried.value).toStrictEqual(replayOf(RESULT));
    expect(after).toMatchObject({ commands: ['EVALSHA'], value: { state: 'completed' } });
  });

  it('a keyed charge retried after each flush executes once and replays the same result', async () => {
    const store = await RedisIdempotencyStore.connect(server().url, { keyPrefix: prefix });
    cleanups.push(() => store.close());
    const ledger = new MemoryLedger();
    const connection = await connectInProcess({ store, ledger, scope: 'principal:alice' });
    cleanups.push(() => connection.close());
    const idempotencyKey = randomUUID();
    const charge = () =>
      callTool(connection.client, { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey });
    await flushScripts([server()]);
    const first = await charge();
    await flushScripts([server()]);
    const retry = await charge();
    expect(retry).toStrictEqual(first);
    expect(await ledger.balance()).toBe(100);
  });
});

describe.skipIf(!cluster)('a cluster whose masters forget their scripts (SCRIPT FLUSH on each)', () => {
  it('answers every call on the master that serves its key, the script sent whole once there', async () => {
    if (!cluster) throw new Error('unreachable: skipped without a cluster');
    const store = await RedisIdempotencyStore.connectCluster(cluster.urls, { keyPrefix: prefix });
    cleanups.push(() => store.close());
    const { claimed, completed, retried, after } = await firstExecutionThenRetry(store, cluster.nodes);
    expect(claimed.commands).toStrictEqual(['EVALSHA', 'EVAL']);
    // Both went to one master: the one that serves the scope's slot.
    expect(claimed.perNode.filter((sent) => sent.length > 0)).toHaveLength(1);
    expect(completed).toMatchObject({ commands: ['EVALSHA', 'EVAL'], value: true });
    expect(retried.value).toStrictEqual(replayOf(RESULT));
    expect(after).toMatchObject({ commands: ['EVALSHA'], value: { state: 'completed' } });
  });
});
