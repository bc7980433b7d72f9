// --- Multi-round-trip calls (2026-07-28) under an idempotency key, end to end ---
//
// `refund_order` asks before it acts: its opening round answers `input_required`, and only the
// continuation that carries a yes refunds. The SEP leaves continuations out of its scope; these
// tests hold the guard to the project's rules for them (packages/idempotency/core/guard.ts, `settlementOf`),
// over real transports: a spawned stdio server, a stateless HTTP instance, and two HTTP
// instances sharing Redis, where the continuation lands on the other instance.

import { randomBytes, randomUUID } from 'node:crypto';
import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import { SdkError, SdkErrorCode } from '@modelcontextprotocol/client';
import {
  IdempotencyErrorType,
  type IdempotencyStore,
  INVALID_PARAMS,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
  MISSING_CLIENT_CAPABILITY,
} from 'mcp-request-idempotency';
import { callTool, LEGACY_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RefundState } from '../../demo/hosting/refund-tool.js';
import { requestStateCodec } from '../../demo/hosting/request-state.js';
import { waitUntil } from '../../demo/processes/bounds.js';
import {
  type AskUser,
  balanceOf,
  connectHttpClient,
  connectToServer,
  type DecisionLine,
  resetLedger,
  startHttpInstance,
} from '../../demo/processes/launch.js';
import {
  REDIS_SKIP_REASON,
  startRedis,
  type TestRedis,
  uniqueKeyPrefix,
} from '../../demo/processes/redis-server.js';
import { connectInProcess, ManualClock } from '../support/in-process.js';
import { type Answer, round } from '../support/rounds.js';

const REFUND = { name: 'refund_order', arguments: { orderId: 'A-1001', amount: 4200 } };
/** Slow enough for a second continuation to arrive while the first still refunds. */
const REFUND_LATENCY_MS = 300;

const YES = { confirm: { action: 'accept', content: { confirm: true } } };
/** How a continuation is refused before anything runs, by the SDK's verifier or by the guard. */
const REFUSAL = { code: INVALID_PARAMS, data: { reason: 'invalid_request_state' } };
const NO = { confirm: { action: 'accept', content: { confirm: false } } };

function opening(idempotencyKey: string, args: Record<string, unknown> = REFUND.arguments) {
  return { name: REFUND.name, arguments: args, idempotencyKey };
}

function continuation(
  idempotencyKey: string,
  requestState: unknown,
  inputResponses: unknown = YES,
  args: Record<string, unknown> = REFUND.arguments,
) {
  return { ...opening(idempotencyKey, args), inputResponses, requestState };
}

function requestStateOf(answer: Answer): string {
  const state = answer.result?.requestState;
  if (answer.result?.resultType !== 'input_required' || typeof state !== 'string') {
    throw new Error(`expected input_required with a requestState, got ${JSON.stringify(answer)}`);
  }
  return state;
}

function refundedBy(answer: Answer): unknown {
  return (answer.result?.structuredContent as { refunded?: unknown } | undefined)?.refunded;
}

/** A deployment under test: where opening rounds go, where continuations go, and its decision log. */
interface Target {
  opens: Client;
  continues: Client;
  decisions(): Promise<string[]>;
  close(): Promise<void>;
}

/** What the guard decided, in the order of the log's lines. */
function decisionWords(lines: DecisionLine[]): string[] {
  return lines.map((line) => String(line.decision));
}

function describeContinuationRules(label: string, start: () => Promise<Target | undefined>): void {
  describe(`continuations of a keyed refund, ${label}`, () => {
    let target: Target | undefined;
    beforeAll(async () => {
      target = await start();
    }, 30_000);
    afterAll(async () => {
      await target?.close();
    });

    /**
     * Runs `body` against a reset ledger; then, given `decided`, expects the decision log to have
     * gained exactly those lines (waiting for them: the log is a pipe of its own, and may trail the answers).
     */
    async function scenario(body: (t: Target) => Promise<void>, decided?: string[]): Promise<void> {
      const t = target;
      if (!t) throw new Error(REDIS_SKIP_REASON);
      await resetLedger(t.opens);
      const before = (await t.decisions()).length;
      await body(t);
      if (!decided) return;
      await waitUntil(async () => (await t.decisions()).length - before >= decided.length).catch(() => {});
      expect((await t.decisions()).slice(before)).toStrictEqual(decided);
    }

    it('asks first and refunds nothing; a repeat of the opening round is asked again without running the tool', async () => {
      const key = randomUUID();
      await scenario(
        async ({ opens }) => {
          const first = await round(opens, opening(key));
          const repeat = await round(opens, opening(key));
          expect(first.result?.inputRequests).toMatchObject({
            confirm: { method: 'elicitation/create', params: { message: 'Refund 4200 to order A-1001?' } },
          });
          expect(repeat).toStrictEqual(first);
          expect(await balanceOf(opens)).toBe(0);
        },
        ['awaitingInput', 'replayed'],
      );
    });

    it('runs the continuation once; its answer is final, replayed to a repeat of either round', async () => {
      const key = randomUUID();
      await scenario(
        async ({ opens, continues }) => {
          const state = requestStateOf(await round(opens, opening(key)));
          const refunded = await round(continues, continuation(key, state));
          expect(refundedBy(refunded)).toBe(4200);
          expect(await round(continues, continuation(key, state))).toStrictEqual(refunded);
          expect(await round(opens, opening(key))).toStrictEqual(refunded);
          expect(await balanceOf(opens)).toBe(-4200);
        },
        ['awaitingInput', 'executed', 'replayed', 'replayed'],
      );
    });

    it('records a no as final too: nothing refunded, then or on a retry', async () => {
      const key = randomUUID();
      await scenario(async ({ opens, continues }) => {
        const state = requestStateOf(await round(opens, opening(key)));
        const declined = await round(continues, continuation(key, state, NO));
        expect(refundedBy(declined)).toBe(0);
        expect(await round(continues, continuation(key, state, YES))).toStrictEqual(declined);
        expect(await balanceOf(opens)).toBe(0);
      });
    });

    it('rejects other arguments under the key as a conflict, opening round or continuation', async () => {
      const key = randomUUID();
      await scenario(async ({ opens, continues }) => {
        const state = requestStateOf(await round(opens, opening(key)));
        const other = { orderId: 'A-1001', amount: 1 };
        for (const answer of [
          await round(opens, opening(key, other)),
          await round(continues, continuation(key, state, YES, other)),
        ]) {
          expect(idempotencyErrorOf(answer.error)?.type).toBe(IdempotencyErrorType.conflict);
        }
        expect(await balanceOf(opens)).toBe(0);
        // The key still awaits its own continuation.
        expect(refundedBy(await round(continues, continuation(key, state)))).toBe(4200);
      });
    });

    it('answers a second continuation in progress while the first still refunds', async () => {
      const key = randomUUID();
      await scenario(async ({ opens, continues }) => {
        const state = requestStateOf(await round(opens, opening(key)));
        const [a, b] = await Promise.all([
          round(continues, continuation(key, state)),
          round(opens, continuation(key, state)),
        ]);
        const refunded = [a, b].filter((answer) => refundedBy(answer) === 4200);
        const told = [a, b].filter(
          (answer) => idempotencyErrorOf(answer.error)?.type === IdempotencyErrorType.inProgress,
        );
        expect([refunded.length, told.length]).toStrictEqual([1, 1]);
        expect(await balanceOf(opens)).toBe(-4200);
      });
    });

    it('records nothing for a forged requestState: the key still awaits its real continuation', async () => {
      const key = randomUUID();
      await scenario(
        async ({ opens, continues }) => {
          const state = requestStateOf(await round(opens, opening(key)));
          const forged = `${state.slice(0, -4)}AAAA`;
          const refused = await round(continues, continuation(key, forged));
          expect(refused.error).toMatchObject({
            code: INVALID_PARAMS,
            data: { reason: 'invalid_request_state' },
          });
          expect(await round(opens, opening(key))).toMatchObject({ result: { requestState: state } });
          expect(refundedBy(await round(continues, continuation(key, state)))).toBe(4200);
          expect(await balanceOf(opens)).toBe(-4200);
        },
        ['awaitingInput', 'continuationRefused', 'replayed', 'executed'],
      );
    });

    it('asks again for an answer it cannot use, refunding nothing, and refunds on a usable one', async () => {
      const key = randomUUID();
      await scenario(
        async ({ opens, continues }) => {
          const state = requestStateOf(await round(opens, opening(key)));
          for (const inputResponses of [
            {},
            { confirm: { action: 'accept', content: { confirm: 'yes' } } },
            { confirm: { method: 'elicitation/create', result: YES.confirm } },
          ]) {
            const asked = await round(continues, continuation(key, state, inputResponses));
            expect(asked.result?.inputRequests).toMatchObject({
              confirm: { params: { message: 'That answer could not be used. Refund 4200 to order A-1001?' } },
            });
          }
          expect(await balanceOf(opens)).toBe(0);
          expect(refundedBy(await round(continues, continuation(key, state)))).toBe(4200);
          expect(await balanceOf(opens)).toBe(-4200);
        },
        [...Array(4).fill('awaitingInput'), 'executed'],
      );
    });

    it("honours a confirmation only under its own key, once: another refund's state is refused before the tool runs", async () => {
      const key = randomUUID();
      await scenario(
        async ({ opens, continues }) => {
          const state = requestStateOf(await round(opens, opening(key)));
          const other = requestStateOf(
            await round(opens, opening(randomUUID(), { orderId: 'B-2002', amount: 1 })),
          );
          expect((await round(continues, continuation(key, other))).error).toMatchObject(REFUSAL);
          expect(await balanceOf(opens)).toBe(0);
          expect(refundedBy(await round(continues, continuation(key, state)))).toBe(4200);
          expect(await balanceOf(opens)).toBe(-4200);
        },
        ['awaitingInput', 'awaitingInput', 'continuationRefused', 'executed'],
      );
    });

    it('refunds once for one confirmation replayed under a fresh key, under a key awaiting its own, and with no key', async () => {
      const key = randomUUID();
      const awaitingItsOwn = randomUUID();
      await scenario(
        async ({ opens, continues }) => {
          const state = requestStateOf(await round(opens, opening(key)));
          const own = requestStateOf(await round(opens, opening(awaitingItsOwn)));
          const elsewhere = async () => {
            // A key that never asked: refused by the guard, nothing run, and no record left behind.
            const fresh = randomUUID();
            expect((await round(continues, continuation(fresh, state))).error).toMatchObject(REFUSAL);
            expect((await round(opens, opening(fresh))).result).toMatchObject({
              resultType: 'input_required',
            });
            // A key that asked its own question: the state is bound to the key that minted it.
            expect((await round(continues, continuation(awaitingItsOwn, state))).error).toMatchObject(
              REFUSAL,
            );
            // No key at all: the same binding refuses it (an unkeyed call has no decision to log).
            const { idempotencyKey: _none, ...unkeyed } = continuation(key, state);
            expect((await round(continues, unkeyed)).error).toMatchObject(REFUSAL);
          };
          await elsewhere();
          expect(await balanceOf(opens)).toBe(0);
          const refunded = await round(continues, continuation(key, state));
          expect(refundedBy(refunded)).toBe(4200);
          await elsewhere();
          expect(await round(continues, continuation(key, state))).toStrictEqual(refunded);
          // The other key still awaits its own answer to its own question.
          expect(refundedBy(await round(continues, continuation(awaitingItsOwn, own, NO)))).toBe(0);
          expect(await balanceOf(opens)).toBe(-4200);
        },
        [
          ...['awaitingInput', 'awaitingInput'],
          ...['continuationRefused', 'awaitingInput', 'continuationRefused'],
          'executed',
          ...['continuationRefused', 'awaitingInput', 'continuationRefused'],
          ...['replayed', 'executed'],
        ],
      );
    });
  });
}

const SLOW = ['--charge-latency-ms', String(REFUND_LATENCY_MS)];

/** The clients declare form elicitation, as a client that can answer the question must; in manual rounds the SDK never asks. */
const askUser: AskUser = () => Promise.reject(new Error('the rounds here are sent by hand'));

describeContinuationRules('over stdio', async () => {
  const server = await connectToServer(SLOW, { askUser });
  return {
    opens: server.client,
    continues: server.client,
    decisions: async () => decisionWords(await server.decisions()),
    close: server.close,
  };
});

describeContinuationRules('over stateless HTTP', async () => {
  const instance = await startHttpInstance(SLOW);
  const client = await connectHttpClient(instance.url, { askUser });
  return {
    opens: client,
    continues: client,
    decisions: async () => decisionWords(await instance.decisions()),
    close: async () => {
      await client.close();
      await instance.stop();
    },
  };
});

let redis: TestRedis | undefined;
afterAll(async () => {
  await redis?.stop();
});

describeContinuationRules('on two HTTP instances sharing Redis, each continuation on the other', async () => {
  redis = await startRedis();
  if (!redis) return undefined;
  const args = [
    ...SLOW,
    '--store',
    'redis',
    '--redis-url',
    redis.url,
    '--redis-prefix',
    uniqueKeyPrefix('mrtr'),
  ];
  const [a, b] = await Promise.all([startHttpInstance(args), startHttpInstance(args)]);
  const [opens, continues] = await Promise.all([
    connectHttpClient(a.url, { askUser }),
    connectHttpClient(b.url, { askUser }),
  ]);
  return {
    opens,
    continues,
    // One log in the order the calls ran: each test's calls are sequential but for the concurrent pair.
    decisions: async () => {
      const [onA, onB] = await Promise.all([a.decisions(), b.decisions()]);
      return decisionWords([...onA, ...onB].sort(byTime));
    },
    close: async () => {
      await Promise.all([opens.close(), continues.close()]);
      await Promise.all([a.stop(), b.stop()]);
    },
  };
});

function byTime(x: DecisionLine, y: DecisionLine): number {
  return String(x.time).localeCompare(String(y.time));
}

// --- What a naive guard does, and what the guard does instead ---

describe('a refund through the SDK client, which answers input_required by itself', () => {
  /** The rule the guard must not have: `input_required` recorded as the key's final answer. */
  function naive(memory: MemoryIdempotencyStore): IdempotencyStore {
    return {
      claim: (id, fingerprint, leaseMs, continuation) => memory.claim(id, fingerprint, leaseMs, continuation),
      complete: (ticket, response, ms) => memory.complete(ticket, response, ms),
      awaitInput: (ticket, response, ms) => memory.complete(ticket, response, ms),
      release: (ticket) => memory.release(ticket),
      renew: (ticket, ms) => memory.renew(ticket, ms),
      clear: () => memory.clear(),
    };
  }

  async function refundOnce(store: IdempotencyStore) {
    let asked = 0;
    const yes: AskUser = async () => {
      asked += 1;
      return { action: 'accept', content: { confirm: true } };
    };
    const connection = await connectInProcess({ store, askUser: yes });
    try {
      let result: CallToolResult | undefined;
      let error: unknown;
      try {
        result = await callTool(connection.client, { ...REFUND, idempotencyKey: randomUUID() });
      } catch (thrown) {
        error = thrown;
      }
      return { result, error, asked, balance: await connection.ledger.balance() };
    } finally {
      await connection.close();
    }
  }

  it('asks the user once and refunds once', async () => {
    const { result, asked, balance } = await refundOnce(new MemoryIdempotencyStore());
    expect(result?.structuredContent).toMatchObject({ refunded: 4200 });
    expect([asked, balance]).toStrictEqual([1, -4200]);
  });

  it('would ask again and again and refund nothing under the naive rule (the control)', async () => {
    const { error, asked, balance } = await refundOnce(naive(new MemoryIdempotencyStore()));
    expect(error).toBeInstanceOf(SdkError);
    expect((error as SdkError).code).toBe(SdkErrorCode.InputRequiredRoundsExceeded);
    expect(asked).toBeGreaterThan(1);
    expect(balance).toBe(0);
  });
});

// --- A question the client cannot be asked: refused before the tool acts, and not the key's answer ---

describe('a refund asked of a client that does not declare form elicitation', () => {
  it('is refused (-32021) and records nothing: once the client declares it, the same key asks and refunds', async () => {
    const instance = await startHttpInstance([]);
    const [unable, able] = await Promise.all([
      connectHttpClient(instance.url),
      connectHttpClient(instance.url, { askUser }),
    ]);
    try {
      const key = randomUUID();
      for (let attempt = 0; attempt < 2; attempt += 1) {
        expect((await round(unable, opening(key))).error).toMatchObject({
          code: MISSING_CLIENT_CAPABILITY,
          data: { requiredCapabilities: { elicitation: { form: {} } } },
        });
      }
      const state = requestStateOf(await round(able, opening(key)));
      expect(refundedBy(await round(able, continuation(key, state)))).toBe(4200);
      expect(await balanceOf(able)).toBe(-4200);
      const decided = (await instance.decisions()).filter((line) => line.idempotencyKey === key);
      expect(decisionWords(decided)).toStrictEqual([
        'capabilityMissing',
        'capabilityMissing',
        'awaitingInput',
        'executed',
      ]);
    } finally {
      await Promise.all([unable.close(), able.close()]);
      await instance.stop();
    }
  }, 30_000);
});

// --- 2025-11-25: the SDK asks inside the one call, for as long as the user takes ---

describe('a refund from a 2025-11-25 client, the question asked inside the call', () => {
  const LEASE_MS = 300;
  const USER_TAKES_MS = 3 * LEASE_MS;

  it('holds its claim while the user thinks past the lease: a duplicate is in progress, the refund runs once', async () => {
    let asked = 0;
    const server = await connectToServer(['--in-progress-lease-ms', String(LEASE_MS)], {
      era: LEGACY_PROTOCOL_VERSION,
      askUser: async () => {
        asked += 1;
        await new Promise((resolve) => setTimeout(resolve, USER_TAKES_MS));
        return { action: 'accept', content: { confirm: true } };
      },
    });
    try {
      const call = { ...REFUND, idempotencyKey: randomUUID() };
      const original = callTool(server.client, call);
      await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS));
      const duplicate = await callTool(server.client, call).catch((error: unknown) => error);
      expect(idempotencyErrorOf(duplicate)?.type).toBe(IdempotencyErrorType.inProgress);
      const result = await original;
      expect(result.structuredContent).toMatchObject({ refunded: 4200 });
      expect(await callTool(server.client, call)).toStrictEqual(result);
      expect([asked, await balanceOf(server.client)]).toStrictEqual([1, -4200]);
      expect(decisionWords(await server.decisions())).toStrictEqual(['inProgress', 'executed', 'replayed']);
    } finally {
      await server.close();
    }
  }, 20_000);
});

// --- Hostile continuations: each refused, nothing refunded, the key as it was ---

describe('hostile continuations', () => {
  const refusal = { code: INVALID_PARAMS, data: { reason: 'invalid_request_state' } };

  it("refuses alice's requestState on bob's call, same key: his key records nothing, hers still refunds", async () => {
    const instance = await startHttpInstance([], { DEMO_BEARER_TOKENS: 'alice:token-a,bob:token-b' });
    const [alice, bob] = await Promise.all([
      connectHttpClient(instance.url, { token: 'token-a', askUser }),
      connectHttpClient(instance.url, { token: 'token-b', askUser }),
    ]);
    try {
      const key = randomUUID();
      const state = requestStateOf(await round(alice, opening(key)));
      expect((await round(bob, continuation(key, state))).error).toMatchObject(refusal);
      // Bob's key was left free: his own opening round asks him, rather than replay an error.
      expect((await round(bob, opening(key))).result).toMatchObject({ resultType: 'input_required' });
      expect(refundedBy(await round(alice, continuation(key, state)))).toBe(4200);
      expect(await balanceOf(alice)).toBe(-4200);
    } finally {
      await Promise.all([alice.close(), bob.close()]);
      await instance.stop();
    }
  }, 30_000);

  it('refuses an expired requestState; once the key stops awaiting, the refund is asked anew', async () => {
    const clock = new ManualClock();
    const store = new MemoryIdempotencyStore({ now: clock.now });
    const connection = await connectInProcess({
      store,
      askUser,
      requestState: requestStateCodec<RefundState>(randomBytes(32), 1),
      awaitingInputRetentionMs: 1_000,
    });
    try {
      const key = randomUUID();
      const state = requestStateOf(await round(connection.client, opening(key)));
      await new Promise((resolve) => setTimeout(resolve, 2_100)); // past the state's 1 s TTL, in whole seconds
      expect((await round(connection.client, continuation(key, state))).error).toMatchObject(refusal);
      expect(await connection.ledger.balance()).toBe(0);
      clock.advance(1_000); // and past the key's wait for it
      const fresh = requestStateOf(await round(connection.client, opening(key)));
      expect(fresh).not.toBe(state);
      expect(refundedBy(await round(connection.client, continuation(key, fresh)))).toBe(4200);
      expect(connection.decisions.map((d) => d.decision)).toStrictEqual([
        'awaitingInput',
        'continuationRefused',
        'awaitingInput',
        'executed',
      ]);
    } finally {
      await connection.close();
    }
  }, 20_000);

  it('refuses a requestState of a megabyte without storing any of it', async () => {
    const store = new MemoryIdempotencyStore();
    const connection = await connectInProcess({ store, askUser });
    try {
      const key = randomUUID();
      const question = await round(connection.client, opening(key));
      const stored = store.usageOfScope('local');
      const huge = `v1.${'A'.repeat(1024 * 1024)}.AAAA`;
      expect((await round(connection.client, continuation(key, huge))).error).toMatchObject(refusal);
      expect(store.usageOfScope('local')).toStrictEqual(stored);
      expect(await round(connection.client, opening(key))).toStrictEqual(question);
      expect(await connection.ledger.balance()).toBe(0);
    } finally {
      await connection.close();
    }
  });
});
