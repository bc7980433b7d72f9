// A horizontally scaled, stateless deployment: server instances sharing one Redis, a client
// whose retry lands on whichever instance the load balancer picks. The SEP's MUST for such
// deployments is a shared store; these tests show what it buys.

import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { callTool } from '../idempotency/client.js';
import { IdempotencyErrorType, idempotencyErrorOf } from '../idempotency/index.js';
import { balanceOf, ERAS, resetLedger } from '../launch.js';
import { connectHttp, connectHttpClient, type HttpInstance, startHttpInstance } from './support/http.js';
import { REDIS_SKIP_REASON, startRedis, uniqueKeyPrefix } from './support/redis.js';
import { describeSepCases, textOf } from './support/sep-cases.js';

const redis = await startRedis();
if (!redis) console.warn(REDIS_SKIP_REASON);
afterAll(async () => {
  await redis?.stop();
});

const CHARGE_MS = 400;

function redisArgs(prefix: string): string[] {
  if (!redis) throw new Error(REDIS_SKIP_REASON);
  return ['--store', 'redis', '--redis-url', redis.url, '--redis-prefix', prefix];
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

describe.skipIf(!redis)('two instances sharing one Redis', () => {
  const tokens = { alice: 'token-a', bob: 'token-b' };
  let a: HttpInstance;
  let b: HttpInstance;
  let clients: Client[] = [];
  const connect = async (instance: HttpInstance, token: string) => {
    const client = await connectHttpClient(instance.url, { token });
    clients.push(client);
    return client;
  };

  beforeAll(async () => {
    const prefix = uniqueKeyPrefix('scale');
    const env = { DEMO_BEARER_TOKENS: `alice:${tokens.alice},bob:${tokens.bob}` };
    const args = [...redisArgs(prefix), '--charge-latency-ms', String(CHARGE_MS)];
    [a, b] = await Promise.all([startHttpInstance(args, env), startHttpInstance(args, env)]);
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all([a?.stop(), b?.stop()]);
    clients = [];
  });
  beforeEach(async () => {
    await resetLedger(await connect(a, tokens.alice));
  });

  const executions = (key: string) =>
    [...a.decisions(), ...b.decisions()].filter((d) => d.idempotencyKey === key && d.decision === 'executed')
      .length;

  it('replays on instance B the response instance A recorded', async () => {
    const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const first = await callTool(await connect(a, tokens.alice), call);
    const retry = await callTool(await connect(b, tokens.alice), call);
    expect(retry).toStrictEqual(first);
    expect(executions(call.idempotencyKey)).toBe(1);
    expect(await balanceOf(await connect(b, tokens.alice))).toBe(100);
  });

  it('executes 20 concurrent duplicates spread over both instances exactly once', async () => {
    const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const viaA = await connect(a, tokens.alice);
    const viaB = await connect(b, tokens.alice);
    const answers = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => callTool(i % 2 === 0 ? viaA : viaB, call)),
    );
    const results = answers.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const errors = answers.flatMap((r) =>
      r.status === 'rejected' ? [idempotencyErrorOf(r.reason)?.type] : [],
    );
    const executed = results.filter((r) => textOf(r) === 'Charged 100. New balance: 100');

    expect(results.length + errors.length).toBe(20);
    expect(executed.length).toBe(results.length);
    expect(errors.every((type) => type === IdempotencyErrorType.inProgress)).toBe(true);
    expect(executions(call.idempotencyKey)).toBe(1);
    expect(await balanceOf(viaB)).toBe(100);
    console.info(
      `20 concurrent duplicates: ${executions(call.idempotencyKey)} execution, ` +
        `${results.length} answered with the charge, ${errors.length} in progress`,
    );
  });

  it('keeps each principal’s records apart across instances', async () => {
    const key = randomUUID();
    const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
    const alice = await callTool(await connect(a, tokens.alice), call);
    const bob = await callTool(await connect(b, tokens.bob), { ...call, arguments: { amount: 7 } });
    expect(textOf(alice)).toBe('Charged 100. New balance: 100');
    expect(textOf(bob)).toBe('Charged 7. New balance: 107');
    expect(await callTool(await connect(b, tokens.alice), call)).toStrictEqual(alice);
    expect(await callTool(await connect(a, tokens.bob), { ...call, arguments: { amount: 7 } })).toStrictEqual(
      bob,
    );
    expect(await balanceOf(await connect(a, tokens.bob))).toBe(107);
  });
});

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
      const decided = [...a.decisions(), ...b.decisions()].filter(
        (d) => d.idempotencyKey === call.idempotencyKey,
      );
      expect(decided.filter((d) => d.decision === 'executed')).toHaveLength(1);
    } finally {
      await Promise.all([viaA.close(), viaB.close()]);
    }
  });
});
