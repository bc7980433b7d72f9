// Two stateless HTTP instances sharing one store, written once and run against one Redis, a
// Redis Cluster and one Postgres: a client whose retry lands on whichever instance the load
// balancer picks. The SEP's MUST for such deployments is a shared store; this is what it buys.

import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import type { RedisClientType } from '@redis/client';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { balanceOf, ERAS, postModern, resetLedger } from '../../demo/processes/launch.js';
import { commandsDuring } from '../../demo/processes/redis-commands.js';
import { uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import { jsonRpcText } from './hostile.js';
import { connectHttpClient, type HttpInstance, startHttpInstance } from './http.js';
import { textOf } from './sep-cases.js';

/** Where the instances keep their records and their ledger: one Redis, or a Redis Cluster. */
export interface SharedRedis {
  /** The server options that point an instance at it, every key under `prefix`. */
  args(prefix: string): string[];
  /** An admin connection to each node that holds keys (the one Redis, or every master). */
  admins(): RedisClientType[];
}

/** Where the instances keep their records and their ledger, whatever the store. */
export interface SharedStore {
  /** A key or table prefix of its own, for this describe's records and ledger. */
  prefix: string;
  /** The server options that point an instance at it, everything under `prefix`. */
  args(prefix: string): string[];
  /**
   * What the guard (and a tool writing in its record's transaction) sent the store while
   * `action` ran, one list of commands per node; undefined where it cannot be watched.
   */
  roundTrips?<T>(prefix: string, action: () => Promise<T>): Promise<{ perNode: string[][]; value: T }>;
  /** What those lists hold for a keyed charge's first execution, and for its replay. */
  cost: { firstExecution: string[]; replay: string[] };
}

const CHARGE_MS = 400;

/** Skipped, as the file's other Redis tests are, when `redis` is undefined. */
export function describeTwoInstances(where: string, redis: SharedRedis | undefined): void {
  describeTwoInstancesOn(
    where,
    redis && {
      prefix: uniqueKeyPrefix('scale'),
      args: (prefix) => redis.args(prefix),
      roundTrips: async (prefix, action) => commandsDuring(redis.admins(), `${prefix}idem:`, action),
      // claim and complete, then one claim that finds the record: each an EVALSHA.
      cost: { firstExecution: ['EVALSHA', 'EVALSHA'], replay: ['EVALSHA'] },
    },
  );
}

/** Skipped, as the file's other tests of that store are, when `store` is undefined. */
export function describeTwoInstancesOn(where: string, store: SharedStore | undefined): void {
  describe.skipIf(!store)(`two instances sharing ${where}`, () => {
    const shared = () => {
      if (!store) throw new Error('unreachable: skipped without a shared store');
      return store;
    };
    const tokens = { alice: 'token-a', aliceReadOnly: 'token-r', bob: 'token-b' };
    const prefix = store?.prefix ?? '';
    let a: HttpInstance;
    let b: HttpInstance;
    let clients: Client[] = [];
    const connect = async (instance: HttpInstance, token: string) => {
      const client = await connectHttpClient(instance.url, { token });
      clients.push(client);
      return client;
    };

    beforeAll(async () => {
      const env = {
        DEMO_BEARER_TOKENS: `alice:${tokens.alice}:charge+refund+read+admin,alice:${tokens.aliceReadOnly}:read,bob:${tokens.bob}`,
      };
      const args = [...shared().args(prefix), '--charge-latency-ms', String(CHARGE_MS)];
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

    const executions = async (key: string) =>
      [...(await a.decisions()), ...(await b.decisions())].filter(
        (d) => d.idempotencyKey === key && d.decision === 'executed',
      ).length;

    it('replays on instance B the response instance A recorded', async () => {
      const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
      const first = await callTool(await connect(a, tokens.alice), call);
      const retry = await callTool(await connect(b, tokens.alice), call);
      expect(retry).toStrictEqual(first);
      expect(await executions(call.idempotencyKey)).toBe(1);
      expect(await balanceOf(await connect(b, tokens.alice))).toBe(100);
    });

    const cost = store?.cost ?? { firstExecution: [], replay: [] };
    it.skipIf(!store?.roundTrips)(
      `sends the store ${cost.firstExecution.length} commands for a first execution, ` +
        `${cost.replay.length} for the replay on the other instance, all on one node`,
      async () => {
        const [viaA, viaB] = [await connect(a, tokens.alice), await connect(b, tokens.alice)];
        const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
        const roundTrips = (action: () => Promise<unknown>) => {
          const watch = shared().roundTrips;
          if (!watch) throw new Error('unreachable: skipped where round trips cannot be watched');
          return watch(prefix, action);
        };

        const first = await roundTrips(() => callTool(viaA, call));
        const replay = await roundTrips(() => callTool(viaB, call));

        // All on the node of alice's scope, and nothing on any other node.
        expect(first.perNode.flat()).toStrictEqual(cost.firstExecution);
        expect(replay.perNode.flat()).toStrictEqual(cost.replay);
        const owner = first.perNode.findIndex((commands) => commands.length > 0);
        expect(replay.perNode[owner]).toStrictEqual(cost.replay);
        expect(replay.value).toStrictEqual(first.value);
        expect(await balanceOf(viaB)).toBe(100);
      },
    );

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
      expect(await executions(call.idempotencyKey)).toBe(1);
      expect(await balanceOf(viaB)).toBe(100);
      console.info(
        `20 concurrent duplicates on ${where}: ${await executions(call.idempotencyKey)} execution, ` +
          `${results.length} answered with the charge, ${errors.length} in progress`,
      );
    });

    // SEP: "A replayed response MUST still be subject to whatever authorization check would
    // ordinarily govern access to it." Alice's scope changes between her call on A and her retry on B.
    describe.each(ERAS)('authorization at replay time, %s', (era) => {
      const send = (instance: HttpInstance, token: string, params: Record<string, unknown>) => {
        const authorization = `Bearer ${token}`;
        if (era === MODERN_PROTOCOL_VERSION) {
          return postModern(instance.url, { id: 1, method: 'tools/call', params }, undefined, {
            authorization,
          });
        }
        return fetch(instance.url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            authorization,
          },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
        });
      };

      it('refuses her retry on B with a token that may only read; the one that may charge still replays', async () => {
        const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
        const charged = JSON.parse(await jsonRpcText(await send(a, tokens.alice, params)));
        expect(charged.result.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
        const refused = await send(b, tokens.aliceReadOnly, params);
        expect(refused.status).toBe(403);
        expect(refused.headers.get('www-authenticate')).toMatch(/^Bearer error="insufficient_scope"/);
        expect(await refused.text()).not.toContain('Charged');
        expect(await executions(params.idempotencyKey)).toBe(1);
        const replayed = JSON.parse(await jsonRpcText(await send(b, tokens.alice, params)));
        expect(replayed.result).toStrictEqual(charged.result);
        expect(await balanceOf(await connect(a, tokens.alice))).toBe(100);
      });
    });

    it('keeps each principal’s records apart across instances', async () => {
      const key = randomUUID();
      const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
      const alice = await callTool(await connect(a, tokens.alice), call);
      const bob = await callTool(await connect(b, tokens.bob), { ...call, arguments: { amount: 7 } });
      expect(textOf(alice)).toBe('Charged 100. New balance: 100');
      expect(textOf(bob)).toBe('Charged 7. New balance: 107');
      expect(await callTool(await connect(b, tokens.alice), call)).toStrictEqual(alice);
      expect(
        await callTool(await connect(a, tokens.bob), { ...call, arguments: { amount: 7 } }),
      ).toStrictEqual(bob);
      expect(await balanceOf(await connect(a, tokens.bob))).toBe(107);
    });
  });
}
