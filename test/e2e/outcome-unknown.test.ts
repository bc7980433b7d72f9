// An operation whose outcome the server cannot tell, end to end: the payment provider (a process
// of its own) slower than the server's own retries toward it, the server's guard, the project's
// client, and the application's retry. The server's tool gives up on the provider without knowing
// whether it committed: its answer records nothing and says so in a form a client reads; the
// client retries it under the same key, and when its policy gives up it hands the key back. The
// application's retry under that key is the same operation: the provider commits once. (The
// control: an application that retries under a new key is charged twice, as it was before the
// answer was marked.) The MCP server runs in this process so that its provider window can be short; the
// provider is a real process on loopback, reached over HTTP.

import { randomUUID } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/client';
import {
  createToolCallGuard,
  currentExecution,
  IdempotencyErrorType,
  idempotencyErrorCode,
  idempotencyErrorOf,
  JsonRpcError,
  MemoryIdempotencyStore,
  OUTCOME_META_KEY,
  outcomeUnknownOf,
} from 'mcp-request-idempotency';
import {
  type Attempt,
  callTool,
  discoverCapabilities,
  IdempotentClient,
  OutcomeUnknownError,
} from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProviderLedger } from '../../demo/hosting/ledgers/provider.js';
import { sleep, waitUntil } from '../../demo/processes/bounds.js';
import { connectHttpClient, ERAS, startHttpInstance } from '../../demo/processes/launch.js';
import {
  PROVIDER_IMPLEMENTATIONS,
  type ProviderImplementation,
  type ProviderProcess,
  startProviderProcess,
} from '../../demo/processes/payment-provider.js';
import { MemoryLedger } from '../../ledger.js';
import { connectInProcess, type InProcessConnection } from '../support/in-process.js';
import { errorFrom, textOf } from '../support/sep-cases.js';

const CHARGE = { name: 'charge_guarded', arguments: { amount: 100 } };
const CHARGED = 'Charged 100. New balance: 100';
/** The server waits this long for one provider answer… */
const PROVIDER_TIMEOUT_MS = 200;
/** …and retries a 409 (the key still in use) for this long after the first: a short window, for the test. */
const IN_PROGRESS_WINDOW_MS = 300;
/** The provider's first charge takes this long: past the server's patience, so its outcome is unknown. */
const SLOW_COMMIT_MS = 3_000;

/** The demo server in this process, charging `provider` through the server's own retrying client. */
function serverCharging(provider: ProviderProcess, inProgressWindowMs = IN_PROGRESS_WINDOW_MS) {
  const ledger = new ProviderLedger(new URL(provider.url), {
    timeoutMs: PROVIDER_TIMEOUT_MS,
    inProgressWindowMs,
    baseDelayMs: 10,
    // Caps the provider's `Retry-After: 1` too, so the window holds several retries.
    maxDelayMs: 50,
  });
  return connectInProcess({ store: new MemoryIdempotencyStore(), ledger, entry: 'http' });
}

/**
 * An IdempotentClient on `server`, patient enough per attempt, quick to give up in all: its two
 * attempts (each the server's timeout and window, some 0.6 s) end well before the slow commit.
 */
async function shopOn(server: InProcessConnection, attempts: Attempt[]): Promise<IdempotentClient> {
  return new IdempotentClient(server.client, await discoverCapabilities(server.client), {
    timeoutMs: 10_000,
    maxAttempts: 2,
    initialBackoffMs: 50,
    maxBackoffMs: 100,
    onAttempt: (attempt) => attempts.push(attempt),
    onWarning: (warning) => {
      throw new Error(`unexpected warning: ${warning}`);
    },
  });
}

/** The application: the charge failed without a settled answer; it tries again later under `key`. */
async function retryLater(shop: IdempotentClient, key: string | undefined): Promise<CallToolResult> {
  for (let tries = 1; ; tries += 1) {
    try {
      return await shop.callTool(
        CHARGE.name,
        CHARGE.arguments,
        key === undefined ? {} : { idempotencyKey: key },
      );
    } catch (error) {
      if (!(error instanceof OutcomeUnknownError) || tries >= 5) throw error;
      await sleep(500);
    }
  }
}

function describeUnknownOutcome(implementation: ProviderImplementation): void {
  describe(`an outcome the server cannot tell (${implementation.name})`, () => {
    let provider: ProviderProcess;
    beforeAll(async () => {
      provider = await startProviderProcess(implementation.command);
    });
    afterAll(async () => {
      await provider?.stop();
    });

    /** The server on the provider, reset, whose next commit takes `commitMs`. */
    async function serverWithSlowCommit(commitMs = SLOW_COMMIT_MS, inProgressWindowMs?: number) {
      await provider.reset();
      await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: commitMs });
      return serverCharging(provider, inProgressWindowMs);
    }

    it('is answered as a tool error that says so in _meta, records nothing, and the retry under the key is the charge', async () => {
      const server = await serverWithSlowCommit();
      try {
        const idempotencyKey = randomUUID();
        const first = await callTool(server.client, { ...CHARGE, idempotencyKey });
        // What a person or a model reads is the tool's own answer, as before…
        expect(first.isError).toBe(true);
        expect(textOf(first)).toContain('whether it committed is unknown');
        // …and what a program reads is the marker.
        expect(first._meta?.[OUTCOME_META_KEY]).toStrictEqual({
          type: IdempotencyErrorType.outcomeUnknown,
          idempotencyKey,
        });
        expect(outcomeUnknownOf(first)).toStrictEqual({ idempotencyKey });
        expect(server.decisions.map((d) => d.decision)).toStrictEqual(['unrecorded']);
        await waitUntil(async () => (await provider.commits()).length === 1, 10_000);
        const retry = await callTool(server.client, { ...CHARGE, idempotencyKey });
        expect(textOf(retry)).toBe(CHARGED);
        expect(outcomeUnknownOf(retry)).toBeUndefined();
        expect(await provider.commits()).toHaveLength(1);
      } finally {
        await server.close();
      }
    }, 30_000);

    it("is retried by IdempotentClient under its key, which it hands back when it gives up: the application's retry under it charges once", async () => {
      const server = await serverWithSlowCommit();
      const attempts: Attempt[] = [];
      try {
        const shop = await shopOn(server, attempts);
        const error = await errorFrom(shop.callTool(CHARGE.name, CHARGE.arguments));
        if (!(error instanceof OutcomeUnknownError)) throw error;
        // Every attempt carried the one key, each answered "unknown", and the key came back.
        expect(attempts.map((a) => a.outcome)).toStrictEqual(['outcomeUnknown', 'outcomeUnknown']);
        expect(new Set(attempts.map((a) => a.idempotencyKey))).toStrictEqual(new Set([error.idempotencyKey]));
        expect(error.message).toContain(error.idempotencyKey);
        expect(error.result?.isError).toBe(true);
        // The application's retry, under the key it was handed: the provider replays the charge.
        const charged = await retryLater(shop, error.idempotencyKey);
        expect(textOf(charged)).toBe(CHARGED);
        const commits = await provider.commits();
        expect(commits.map((c) => c.amount)).toStrictEqual([100]);
        expect(commits[0]?.idempotencyKey).toMatch(/^mcp_/);
        expect(await provider.balance()).toBe(100);
        const decided = server.decisions.map((d) => d.decision);
        expect(decided.at(-1)).toBe('executed');
        expect(decided.slice(0, -1).every((d) => d === 'unrecorded' || d === 'inProgress')).toBe(true);
      } finally {
        await server.close();
      }
    }, 30_000);

    it('is charged twice by an application that retries under a new key (the control)', async () => {
      const server = await serverWithSlowCommit();
      try {
        const shop = await shopOn(server, []);
        const error = await errorFrom(shop.callTool(CHARGE.name, CHARGE.arguments));
        expect(error).toBeInstanceOf(OutcomeUnknownError);
        await retryLater(shop, undefined);
        await waitUntil(async () => (await provider.commits()).length === 2, 10_000);
        expect(await provider.balance()).toBe(200);
      } finally {
        await server.close();
      }
    }, 30_000);

    it("rides out a provider slower than its timeout by itself, within the provider's in-progress window: one answer, one charge", async () => {
      const server = await serverWithSlowCommit(5 * PROVIDER_TIMEOUT_MS, 10 * PROVIDER_TIMEOUT_MS);
      try {
        const answer = await callTool(server.client, { ...CHARGE, idempotencyKey: randomUUID() });
        expect(textOf(answer)).toBe(CHARGED);
        expect(server.decisions.map((d) => d.decision)).toStrictEqual(['executed']);
        expect(await provider.commits()).toHaveLength(1);
      } finally {
        await server.close();
      }
    }, 30_000);
  });
}

for (const implementation of PROVIDER_IMPLEMENTATIONS) describeUnknownOutcome(implementation);

// --- The marker, in either era and either form ---

/** A provider that commits, then loses its answer: the tool cannot tell what happened. */
class AnswerLostLedger extends MemoryLedger {
  override async charge(amount: number): Promise<number> {
    await super.charge(amount);
    currentExecution()?.markOutcomeUnknown('ECONNRESET');
    throw new Error('The payment provider did not answer; whether it committed is unknown.');
  }
}

describe.each(ERAS)('the marker of an unknown outcome, on %s', (era) => {
  it.each(['stdio', 'http'] as const)(
    'reaches the client through the %s entry; a call without a key is not marked',
    async (entry) => {
      const server = await connectInProcess({
        store: new MemoryIdempotencyStore(),
        ledger: new AnswerLostLedger(),
        era,
        entry,
      });
      try {
        const idempotencyKey = randomUUID();
        const keyed = await callTool(server.client, { ...CHARGE, idempotencyKey });
        expect(keyed).toMatchObject({
          isError: true,
          content: [{ type: 'text', text: expect.stringContaining('whether it committed is unknown') }],
        });
        expect(outcomeUnknownOf(keyed)).toStrictEqual({ idempotencyKey });
        // Without a key there is no record to leave open and no key to retry under: a retry is a new call.
        const unkeyed = await callTool(server.client, CHARGE);
        expect(unkeyed.isError).toBe(true);
        expect(outcomeUnknownOf(unkeyed)).toBeUndefined();
      } finally {
        await server.close();
      }
    },
  );
});

describe('the marker on a JSON-RPC error', () => {
  it('answers a dispatch that threw with an unknown outcome as idempotency_outcome_unknown, in its words, recording nothing', async () => {
    const guard = createToolCallGuard({ store: new MemoryIdempotencyStore(), providerKeyRetentionMs: 0 });
    let runs = 0;
    const dispatch = async () => {
      runs += 1;
      currentExecution()?.markOutcomeUnknown('timed out');
      throw new JsonRpcError(-32000, 'the provider timed out');
    };
    const params = { ...CHARGE, idempotencyKey: randomUUID() };
    for (const _ of [1, 2]) {
      const error = await errorFrom(guard(params, {}, dispatch));
      expect(error).toMatchObject({ message: 'the provider timed out' });
      expect(idempotencyErrorOf(error)).toStrictEqual({
        code: idempotencyErrorCode(IdempotencyErrorType.outcomeUnknown),
        type: IdempotencyErrorType.outcomeUnknown,
        idempotencyKey: params.idempotencyKey,
      });
      expect(outcomeUnknownOf(error)).toStrictEqual({ idempotencyKey: params.idempotencyKey });
    }
    expect(runs).toBe(2);
  });
});

// --- Issue 54's reproduction, rerun: the server process, its default window, IdempotentClient ---

describe('a provider that takes 6 s to commit, and a server that waits 1 s per provider request', () => {
  it('charges once, answered: the server retries the 409s for the in-progress window, not four attempts', async () => {
    const [own] = PROVIDER_IMPLEMENTATIONS;
    if (!own) throw new Error('unreachable');
    const provider = await startProviderProcess(own.command);
    const instance = await startHttpInstance([
      '--provider-url',
      provider.url,
      '--provider-timeout-ms',
      '1000',
    ]);
    const client = await connectHttpClient(instance.url);
    try {
      await provider.queueFault({ path: '/charges', fault: 'delay', delayMs: 6_000 });
      const attempts: Attempt[] = [];
      const shop = new IdempotentClient(client, await discoverCapabilities(client), {
        onAttempt: (attempt) => attempts.push(attempt),
      });
      const result = await shop.callTool(CHARGE.name, CHARGE.arguments);
      expect(textOf(result)).toBe(CHARGED);
      expect(attempts.map((a) => a.outcome)).toStrictEqual(['answered']);
      expect(await provider.commits()).toHaveLength(1);
      expect(await provider.balance()).toBe(100);
      expect((await instance.decisions()).map((d) => d.decision)).toStrictEqual(['executed']);
    } finally {
      await client.close();
      await instance.stop();
      await provider.stop();
    }
  }, 60_000);
});
