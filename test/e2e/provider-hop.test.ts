// The other hop: the server's call to the payment provider, faulted at each point between the
// provider's commit and the MCP client's answer, on a memory store that loses its records with
// its process and on two HTTP instances sharing Redis; with the provider key carried, and
// without it (`--provider-keys none`) to show the window it closes. The provider's commit log is
// the judge: where the key is carried, each MCP operation is committed exactly once.

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import {
  IdempotencyErrorType,
  idempotencyErrorOf,
  runExecution,
  ToolExecution,
} from 'mcp-request-idempotency';
import { callTool, type KeyedToolCall } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderLedger } from '../../demo/hosting/ledgers/provider.js';
import { sleep, waitUntil } from '../../demo/processes/bounds.js';
import {
  connectToServer,
  type DecisionLine,
  logCaughtUp,
  type ServerConnection,
} from '../../demo/processes/launch.js';
import {
  type FaultSpec,
  PROVIDER_IMPLEMENTATIONS,
  type ProviderImplementation,
  type ProviderProcess,
  startProviderProcess,
} from '../../demo/processes/payment-provider.js';
import { uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import { CHARGE_LIMIT, declineMessage } from '../../ledger.js';
import { redisForFile } from '../support/backends.js';
import { connectHttpClient, startHttpInstance } from '../support/http.js';
import { textOf } from '../support/sep-cases.js';

const redis = await redisForFile();

/** Short, so a retry after a killed instance waits a second, not the two-minute default. */
const LEASE_MS = 1_000;
/** How long the client waits for an answer in the "answer lost after the record" case. */
const IMPATIENT_MS = 150;
const CHARGED = 'Charged 100. New balance: 100';
/**
 * A fault case starts two or three servers, kills one and may wait out a lease: about 10 s on a
 * busy 2-core machine. Its bound leaves room beyond that, for a machine busier still.
 */
const FAULT_CASE_MS = 90_000;

/** Where the keyed call runs first, and where its retry goes. */
interface Deployment {
  /** The keyed call on the server it reaches first. */
  call(params: KeyedToolCall, timeoutMs?: number): Promise<CallToolResult>;
  /** That server's guard decisions. */
  decisions(): Promise<DecisionLine[]>;
  /** That server's process, to freeze. */
  pid: number;
  /** SIGKILL of that server. */
  kill(): Promise<void>;
  /** The same call on a fresh server (a restarted process, or the other instance). */
  retry(params: KeyedToolCall): Promise<CallToolResult>;
  close(): Promise<void>;
}

type Keys = 'derived' | 'none';

/** One process over stdio with a memory store; its retry reaches a new process, whose store is empty. */
async function memoryRestarted(provider: ProviderProcess, keys: Keys): Promise<Deployment> {
  const args = ['--provider-url', provider.url, '--provider-keys', keys];
  const first = await connectToServer(args);
  const later: ServerConnection[] = [];
  return {
    call: (params, timeoutMs) => callTool(first.client, params, timeoutMs ? { timeout: timeoutMs } : {}),
    decisions: () => first.decisions(),
    pid: first.pid,
    kill: () => first.kill(),
    retry: async (params) => {
      const fresh = await connectToServer(args);
      later.push(fresh);
      return callTool(fresh.client, params);
    },
    close: async () => {
      await Promise.allSettled([first.close(), ...later.map((c) => c.close())]);
    },
  };
}

/** Two stateless HTTP instances on one Redis: the call reaches A, its retry B. */
async function twoInstancesOnRedis(provider: ProviderProcess, keys: Keys): Promise<Deployment> {
  if (!redis) throw new Error('unreachable: skipped without Redis');
  const prefix = uniqueKeyPrefix('hop');
  const args = [
    ...['--store', 'redis', '--redis-url', redis.url, '--redis-prefix', prefix],
    ...['--in-progress-lease-ms', String(LEASE_MS), '--provider-url', provider.url, '--provider-keys', keys],
  ];
  const [a, b] = await Promise.all([startHttpInstance(args), startHttpInstance(args)]);
  const [viaA, viaB] = await Promise.all([connectHttpClient(a.url), connectHttpClient(b.url)]);
  const clients: Client[] = [viaA, viaB];
  return {
    call: (params, timeoutMs) => callTool(viaA, params, timeoutMs ? { timeout: timeoutMs } : {}),
    decisions: () => a.decisions(),
    pid: a.pid,
    kill: () => a.kill(),
    // B answers in progress while A's claim holds the key: until A's lease runs out if A died.
    retry: async (params) => {
      const deadline = performance.now() + 10 * LEASE_MS;
      for (;;) {
        try {
          return await callTool(viaB, params);
        } catch (error) {
          const type = idempotencyErrorOf(error)?.type;
          if (type !== IdempotencyErrorType.inProgress || performance.now() > deadline) throw error;
          await sleep(100);
        }
      }
    },
    close: async () => {
      await Promise.allSettled(clients.map((c) => c.close()));
      await Promise.allSettled([a.stop(), b.stop()]);
      await redis.flush(prefix);
    },
  };
}

/**
 * A fault at one point of the call. `run` makes the call happen through it and resolves to the
 * answer the client finally holds; `withoutKeys` is how many commits the provider makes when the
 * server sends it no key (the window open), where it makes one with the key carried.
 */
interface FaultPoint {
  point: string;
  withoutKeys: number;
  run(provider: ProviderProcess, deployment: Deployment, params: KeyedToolCall): Promise<CallToolResult>;
}

/** A point where the call itself meets the fault: the provider answers it with `fault`. */
const callThrough =
  (fault: FaultSpec['fault']): FaultPoint['run'] =>
  async (provider, deployment, params) => {
    await provider.queueFault({ path: '/charges', fault });
    return deployment.call(params);
  };

/**
 * Makes the call, the provider committing it and holding its answer: resolves once the commit is
 * held, with the call still open (`lost`: undefined where the server dies first).
 */
async function heldAfterCommit(
  provider: ProviderProcess,
  deployment: Deployment,
  params: KeyedToolCall,
): Promise<{ lost: Promise<CallToolResult | undefined> }> {
  await provider.queueFault({ path: '/charges', fault: 'hold-after-commit' });
  const lost = deployment.call(params).catch(() => undefined);
  await waitUntil(async () => (await provider.held()) === 1);
  return { lost };
}

const POINTS: FaultPoint[] = [
  {
    point: 'before the provider commits (a 502 from its edge)',
    withoutKeys: 1,
    run: callThrough('502-before-commit'),
  },
  {
    point: 'after the provider commits, before it answers (the socket reset)',
    withoutKeys: 2,
    run: callThrough('drop-after-commit'),
  },
  {
    point: 'after the provider commits, before it answers (a 502 from its edge)',
    withoutKeys: 2,
    run: callThrough('502-after-commit'),
  },
  {
    point: "after the provider commits, the server killed while the provider's answer is on its way",
    withoutKeys: 2,
    async run(provider, deployment, params) {
      const { lost } = await heldAfterCommit(provider, deployment, params);
      await deployment.kill();
      await lost;
      await provider.release();
      return deployment.retry(params);
    },
  },
  {
    // The provider's answer reaches the server's socket, and the server never reads it: frozen
    // (SIGSTOP) before the provider answers, killed after.
    point: 'after the provider answers, before the record is written (the server frozen, then killed)',
    withoutKeys: 2,
    async run(provider, deployment, params) {
      const { lost } = await heldAfterCommit(provider, deployment, params);
      process.kill(deployment.pid, 'SIGSTOP');
      await provider.release();
      await deployment.kill();
      await lost;
      return deployment.retry(params);
    },
  },
  {
    point: 'after the record is written, before the MCP client reads its answer (the server then killed)',
    withoutKeys: 2, // memory: the record dies with the process; Redis replays it (see below)
    async run(provider, deployment, params) {
      await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: 3 * IMPATIENT_MS });
      await deployment.call(params, IMPATIENT_MS).catch(() => undefined);
      await waitUntil(async () => (await deployment.decisions()).some((d) => d.decision === 'executed'));
      await deployment.kill();
      return deployment.retry(params);
    },
  },
];

const DEPLOYMENTS = [
  { name: 'a memory store, the server restarted', open: memoryRestarted, redis: false },
  { name: 'two instances on Redis', open: twoInstancesOnRedis, redis: true },
];

function describeHop(implementation: ProviderImplementation, keysChoices: Keys[]): void {
  describe(`the hop to the provider (${implementation.name})`, () => {
    let provider: ProviderProcess;
    beforeAll(async () => {
      provider = await startProviderProcess(implementation.command);
    });
    afterAll(async () => {
      await provider?.stop();
    });

    for (const deployment of DEPLOYMENTS)
      describe.skipIf(deployment.redis && !redis?.owned)(deployment.name, () => {
        for (const fault of POINTS) {
          for (const keys of keysChoices) {
            // On Redis, a record written before the answer was lost is replayed by B: one commit either way.
            const replayedFromStore = deployment.redis && fault.point.startsWith('after the record');
            const expected = keys === 'derived' || replayedFromStore ? 1 : fault.withoutKeys;
            const how = keys === 'derived' ? 'with the provider key carried' : 'with no provider key';
            it(
              `${fault.point}: ${expected === 1 ? 'one charge' : `${expected} charges`} ${how}`,
              async () => {
                await provider.reset();
                const running = await deployment.open(provider, keys);
                try {
                  const params = {
                    name: 'charge_guarded',
                    arguments: { amount: 100 },
                    idempotencyKey: randomUUID(),
                  };
                  const answer = await fault.run(provider, running, params);
                  const commits = await provider.commits();
                  expect(commits.map((c) => c.amount)).toEqual(Array(expected).fill(100));
                  if (keys === 'derived') {
                    // The answer it would have got had nothing failed.
                    expect(textOf(answer)).toBe(CHARGED);
                    expect(commits[0]?.idempotencyKey).toMatch(/^mcp_/);
                  } else {
                    expect(commits.every((c) => c.idempotencyKey === null)).toBe(true);
                  }
                  expect(await provider.balance()).toBe(100 * expected);
                } finally {
                  await running.close();
                }
              },
              FAULT_CASE_MS,
            );
          }
        }
      });
  });
}

// The project's provider, with and without the key; every other implementation with the key
// carried (the window without it is the server's, whoever the provider is).
const [own, ...others] = PROVIDER_IMPLEMENTATIONS;
if (own) describeHop(own, ['derived', 'none']);
for (const other of others) describeHop(other, ['derived']);

// --- A call without an MCP key, and providers that misbehave ---

function describeHostile(implementation: ProviderImplementation): void {
  describe(`a provider that misbehaves (${implementation.name}), over stdio`, () => {
    let provider: ProviderProcess;
    let server: ServerConnection;
    beforeAll(async () => {
      provider = await startProviderProcess(implementation.command);
      // An attempt may take 300 ms: the slow provider below takes longer.
      server = await connectToServer(['--provider-url', provider.url, '--provider-timeout-ms', '300']);
    });
    afterAll(async () => {
      await server?.close();
      await provider?.stop();
    });
    const keyedCharge = (): KeyedToolCall => ({
      name: 'charge_guarded',
      arguments: { amount: 100 },
      idempotencyKey: randomUUID(),
    });
    const decisionsOf = async (key: string) =>
      (await server.decisions()).filter((d) => d.idempotencyKey === key).map((d) => d.decision);

    it('charges a call without an MCP key once when its answer is lost: the execution has a key of its own', async () => {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: 'drop-after-commit' });
      const answer = await callTool(server.client, { name: 'charge_unguarded', arguments: { amount: 100 } });
      expect(textOf(answer)).toBe(CHARGED);
      const commits = await provider.commits();
      expect(commits).toHaveLength(1);
      expect(commits[0]?.idempotencyKey).toMatch(/^mcp_/);
    });

    it('answers an unreadable 200 with a tool error, records nothing, and the retry gets the real charge', async () => {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: 'garbage-after-commit' });
      const call = keyedCharge();
      const first = await callTool(server.client, call);
      expect(first.isError).toBe(true);
      expect(textOf(first)).toContain('whether it committed is unknown');
      const retry = await callTool(server.client, call);
      expect(textOf(retry)).toBe(CHARGED);
      expect(await provider.commits()).toHaveLength(1);
      expect(await decisionsOf(call.idempotencyKey)).toEqual(['unrecorded', 'executed']);
    });

    it('waits out a slow provider: the timed-out attempt is retried with the same key, met with 409, then replayed', async () => {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: 800 });
      const answer = await callTool(server.client, keyedCharge());
      expect(textOf(answer)).toBe(CHARGED);
      expect(await provider.commits()).toHaveLength(1);
    });

    it('answers a 500 with a tool error and records nothing: the retry executes once', async () => {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: '500-before-commit' });
      const call = keyedCharge();
      expect((await callTool(server.client, call)).isError).toBe(true);
      expect(await provider.commits()).toHaveLength(0);
      expect(textOf(await callTool(server.client, call))).toBe(CHARGED);
      expect(await provider.commits()).toHaveLength(1);
    });

    it('answers a 422 (a derived key that met other parameters) with a clear tool error, never retried, and records it', async () => {
      await provider.reset();
      const call = keyedCharge();
      expect(textOf(await callTool(server.client, call))).toBe(CHARGED);
      // The same MCP key with other arguments, on a server that no longer holds its record.
      const fresh = await connectToServer(['--provider-url', provider.url]);
      try {
        const other = { ...call, arguments: { amount: 250 } };
        const answer = await callTool(fresh.client, other);
        expect(answer.isError).toBe(true);
        expect(textOf(answer)).toContain('422 idempotency_key_mismatch');
        await logCaughtUp();
        expect(fresh.stderrLines.some((line) => line.includes('"event":"provider"'))).toBe(false);
        expect(await callTool(fresh.client, other)).toEqual(answer);
        expect((await provider.commits()).map((c) => c.amount)).toEqual([100]);
      } finally {
        await fresh.close();
      }
    });
  });

  describe(`a provider that declines (${implementation.name}), over stdio`, () => {
    let provider: ProviderProcess;
    let server: ServerConnection;
    beforeAll(async () => {
      provider = await startProviderProcess(implementation.command);
      server = await connectToServer(['--provider-url', provider.url]);
    });
    afterAll(async () => {
      await server?.close();
      await provider?.stop();
    });
    const over = CHARGE_LIMIT + 1;

    it('answers the decline as an error result the guard records; a server without the record gets the same number from the provider, a call without a key the next', async () => {
      const call: KeyedToolCall = {
        name: 'charge_guarded',
        arguments: { amount: over },
        idempotencyKey: randomUUID(),
      };
      const first = await callTool(server.client, call);
      expect(first).toMatchObject({
        isError: true,
        content: [{ type: 'text', text: declineMessage(over, CHARGE_LIMIT, 1) }],
      });
      expect(await callTool(server.client, call)).toEqual(first);
      // A server that never saw the call derives the same provider key: the provider replays its decline.
      const fresh = await connectToServer(['--provider-url', provider.url]);
      try {
        expect(await callTool(fresh.client, call)).toEqual(first);
      } finally {
        await fresh.close();
      }
      const unkeyed = await callTool(server.client, {
        name: 'charge_unguarded',
        arguments: { amount: over },
      });
      expect(textOf(unkeyed)).toBe(declineMessage(over, CHARGE_LIMIT, 2));
      expect(await provider.commits()).toEqual([]);
    });
  });

  describe(`a provider that is gone (${implementation.name})`, () => {
    it('answers a tool error after its bounded attempts, records nothing, and the retry tries again', async () => {
      const provider = await startProviderProcess(implementation.command);
      const server = await connectToServer(['--provider-url', provider.url, '--provider-timeout-ms', '300']);
      try {
        await provider.kill();
        const call: KeyedToolCall = {
          name: 'charge_guarded',
          arguments: { amount: 100 },
          idempotencyKey: randomUUID(),
        };
        const first = await callTool(server.client, call);
        expect(first.isError).toBe(true);
        expect(textOf(first)).toMatch(/did not answer after 4 attempt\(s\) \(last: ECONNREFUSED\)/);
        await logCaughtUp();
        const retries = server.stderrLines.filter((line) => line.includes('"event":"provider"'));
        expect(retries).toHaveLength(3);
        await callTool(server.client, call);
        expect((await server.decisions()).map((d) => d.decision)).toEqual(['unrecorded', 'unrecorded']);
      } finally {
        await server.close();
        await provider.stop();
      }
    });
  });
}

for (const implementation of PROVIDER_IMPLEMENTATIONS) describeHostile(implementation);

describe('a provider whose 200 leaves out what it committed', () => {
  it('is an unknown outcome, not a failure to record: the guard is told, and nothing is retried in the loop', async () => {
    let requests = 0;
    const server = createServer((_request, response) => {
      requests += 1;
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"ch_1","amount":100}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the stand-in provider has no port');
    const { port } = address;
    try {
      const ledger = new ProviderLedger(new URL(`http://127.0.0.1:${port}`));
      const execution = new ToolExecution('local', 'charge_guarded', randomUUID());
      const charge = runExecution(execution, () =>
        ledger.charge(100, { idempotencyKey: execution.providerKey('charge') }),
      );
      await expect(charge).rejects.toThrow(/whether it committed is unknown/);
      expect(execution.outcomeUnknown).toMatch(/an unreadable 200/);
      expect(requests).toBe(1);
    } finally {
      server.close();
    }
  });
});
