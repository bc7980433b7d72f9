// A horizontally scaled, stateless deployment: server instances sharing one Redis, a client
// whose retry lands on whichever instance the load balancer picks. The SEP's MUST for such
// deployments is a shared store; these tests show what it buys. (The same two-instance
// scenario runs on a Redis Cluster in test/idempotency/stores/redis/cluster.test.ts.)

import { randomUUID } from 'node:crypto';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERAS } from '../../demo/processes/launch.js';
import { REDIS_SKIP_REASON, type TestRedis, uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import { redisForFile } from '../support/backends.js';
import { connectHttp, connectHttpClient, type HttpInstance, startHttpInstance } from '../support/http.js';
import { describeSepCases, textOf } from '../support/sep-cases.js';
import { describeTwoInstances } from '../support/two-instances.js';

const redis = await redisForFile();

function server(): TestRedis {
  if (!redis) throw new Error(REDIS_SKIP_REASON);
  return redis;
}

function redisArgs(prefix: string): string[] {
  return ['--store', 'redis', '--redis-url', server().url, '--redis-prefix', prefix];
}

describe.skipIf(!redis)('SEP cases with the Redis store', () => {
  // Every connection gets a prefix of its own: its own records and its own ledger.
  for (const era of ERAS) {
    describeSepCases(
      `stateless HTTP, ${era}, with the Redis store`,
      (args) => connectHttp([...args, ...redisArgs(uniqueKeyPrefix('sep'))], era),
      { transport: 'http', recordCap: false },
    );
  }
});

describeTwoInstances('one Redis', redis && { args: redisArgs, admins: () => [redis.admin] });

describe.skipIf(!redis)('a charge that outlives its lease, on two instances sharing one Redis', () => {
  const LEASE_MS = 400;
  let a: HttpInstance;
  let b: HttpInstance;
  beforeAll(async () => {
    const args = [
      ...redisArgs(uniqueKeyPrefix('lease')),
      ...['--in-progress-lease-ms', String(LEASE_MS), '--charge-latency-ms', String(3 * LEASE_MS)],
    ];
    [a, b] = await Promise.all([startHttpInstance(args), startHttpInstance(args)]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('keeps its claim while instance A runs it: the retry on B after two leases is in progress, then replays', async () => {
    const [viaA, viaB] = await Promise.all([connectHttpClient(a.url), connectHttpClient(b.url)]);
    try {
      const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
      const original = callTool(viaA, call);
      await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS + 100));
      const retry = await callTool(viaB, call).catch((error: unknown) => error);
      expect(idempotencyErrorOf(retry)?.type).toBe(IdempotencyErrorType.inProgress);
      const first = await original;
      expect(await callTool(viaB, call)).toStrictEqual(first);
      expect(textOf(first)).toBe('Charged 100. New balance: 100');
      const decided = [...(await a.decisions()), ...(await b.decisions())].filter(
        (d) => d.idempotencyKey === call.idempotencyKey,
      );
      expect(decided.filter((d) => d.decision === 'executed')).toHaveLength(1);
    } finally {
      await Promise.all([viaA.close(), viaB.close()]);
    }
  });
});
