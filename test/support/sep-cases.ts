// The SEP-3182 cases, run against every transport the server speaks.
//
// The SEP's rules are not written here: they are the checker's (`packages/checker/rules.ts`), each with
// the sentence it quotes. Every rule a client can observe runs against the demo server over raw
// JSON-RPC, as the checker runs it, and must hold; its case adds what the demo's ledger shows
// afterwards. Then what only an SDK client sees (the stored response as the SDK hands it back,
// the message as written, the retry helper), and the demo's own limits: no rule states those.

import { randomUUID } from 'node:crypto';
import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  idempotencyErrorOf,
  Messages,
} from 'mcp-request-idempotency';
import { callTool, callToolIdempotently, type KeyedToolCall } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { balanceOf, resetLedger } from '../../demo/processes/launch.js';
import { CHARGE_LIMIT } from '../../ledger.js';
import { type CheckInputs, checkRule, RULES, Run, type Status } from '../../packages/checker/rules.js';
import type { Peer } from '../../packages/checker/wire.js';

export interface Connection {
  client: Client;
  /** The same server as raw JSON-RPC, for the shared rules (over stdio, a second process like it). */
  peer: Peer;
  /** Over HTTP: a second caller, and the first caller with a token that may only read. */
  callers?: { other: Peer; forbidden: Peer };
  close(): Promise<void>;
}

/** Starts a server with these command-line options and connects to it. */
export type Connect = (serverArgs: string[]) => Promise<Connection>;

export const SLOW_CHARGE_MS = 600;

/**
 * How long a raw peer waits for any answer. Its first request waits for a spawned server to
 * start, which takes seconds on a loaded machine (the SDK client there waits without a limit).
 */
export const PEER_TIMEOUT_MS = 25_000;

export async function errorFrom(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to fail, and it succeeded');
}

export function textOf(result: CallToolResult): string {
  return result.content.map((part) => (part.type === 'text' ? part.text : '')).join('');
}

const charge = (amount: unknown, idempotencyKey: string = randomUUID()): KeyedToolCall => ({
  name: 'charge_guarded',
  arguments: { amount },
  idempotencyKey,
});

// --- The shared rules, against the demo ---

/**
 * The call every rule makes unless its case says otherwise, as `test/checker/check.test.ts` gives it to the
 * checker: two members (key order), a composed character (escapes, normalisation), which the
 * tool's schema ignores and the guard fingerprints; a charge of 1, so the balance counts executions.
 * The failing call is a charge over the limit: the ledger numbers each decline, so a stored
 * decline replayed reads otherwise than a second one.
 */
const DEMO_CALL = {
  tool: 'charge_guarded',
  arguments: { amount: 1, note: 'café' },
  errorArguments: { amount: CHARGE_LIMIT + 1 },
  otherTool: 'charge_unguarded',
};

interface RuleCase {
  rule: string;
  /** What the case varies, when it runs the rule with other inputs than the demo call's. */
  name?: string;
  inputs?: Partial<CheckInputs>;
  /** On the server whose charges take SLOW_CHARGE_MS, with a charge as the call that takes a while. */
  slow?: boolean;
  /** The ledger afterwards, when the rule holds: one per charge executed, unkeyed ones included. */
  balance: number;
  status?: Status;
  /** More than the rule's verdict: what it must have seen. */
  observed?: RegExp;
}

/** Every rule a client can observe, in the SEP's order, and what the demo's ledger shows after it. */
const RULE_CASES: RuleCase[] = [
  // The checker reads the ledger through the charge itself: two calls without a key first, then
  // one more after each scenario, so each balance counts those too.
  { rule: 'capability.advertised', balance: 0 },
  { rule: 'new-key.executes', balance: 4 },
  { rule: 'key.opaque', balance: 6 },
  { rule: 'in-progress.not-executed', slow: true, balance: 5 },
  // At once (under 300 ms, half a charge), not merely before the original finished.
  { rule: 'in-progress.not-blocked', slow: true, balance: 5, observed: /^answered after [1-2]?\d?\d ms,/ },
  { rule: 'in-progress.data', slow: true, balance: 5 },
  { rule: 'replay.not-executed', balance: 4 },
  {
    rule: 'replay.not-executed',
    name: 'a tool the demo calls without a key',
    inputs: { tool: 'charge_unguarded' },
    balance: 4,
  },
  { rule: 'replay.identical', balance: 2, observed: /byte for byte but the id$/ },
  { rule: 'replay.own-result', balance: 5 },
  {
    rule: 'errors.replayed',
    observed:
      /^the stored failure was replayed: .*Declined: amount \d+ over the limit of \d+ \(decline \d+\)/,
    balance: 1,
  },
  {
    rule: 'errors.replayed',
    name: 'a schema rejection, the same every time',
    inputs: { errorArguments: { amount: -1 } },
    // The stored failure came back, but a fresh rejection would read the same: a replay cannot
    // be told from it, and the rule says so.
    status: 'not checkable',
    observed: /^failures without a key are alike \(isError ".*Input validation error: Invalid argum/,
    balance: 1,
  },
  {
    rule: 'errors.replayed',
    name: 'an unknown tool (an isError result on the v1 line, a JSON-RPC error on v2)',
    inputs: { tool: 'refund_everything', errorArguments: {} },
    status: 'not checkable',
    observed: /^failures without a key are alike \(.*refund_everything not found/,
    balance: 0,
  },
  { rule: 'conflict.other-arguments', balance: 5 },
  {
    rule: 'conflict.other-arguments',
    // The first value it changes is `note`, which the tool never sees: compared as sent.
    name: 'arguments that differ only where the tool schema strips them',
    inputs: { arguments: { note: 'a', amount: 1 } },
    balance: 5,
  },
  { rule: 'conflict.other-tool', balance: 5 },
  { rule: 'conflict.data', balance: 6 },
  { rule: 'equivalence.key-order', balance: 4 },
  { rule: 'equivalence.whitespace', balance: 4 },
  { rule: 'equivalence.number-spelling', balance: 4 },
  { rule: 'equivalence.string-escapes', balance: 4 },
  {
    rule: 'equivalence.absent-arguments',
    name: 'get_balance, the demo tool without arguments',
    inputs: { tool: 'get_balance', arguments: {} },
    // A read shows no execution, so the rule cannot call the retry's answer a replay; it fails if
    // the retry is rejected or answered otherwise.
    status: 'not checkable',
    balance: 0,
  },
  { rule: 'equivalence.no-unicode-normalization', balance: 5 },
  { rule: 'retention.per-key', balance: 5 },
  { rule: 'no-key.executes-every-time', balance: 2 },
  { rule: 'scope.per-caller', balance: 5 },
  // The read-only token is refused by the SDK's scope challenge, before the guard.
  {
    rule: 'authorization.at-replay',
    balance: 3,
    observed: /^refused: HTTP 403, WWW-Authenticate error="insufficient_scope"/,
  },
];

/** The balance, read through the tool a caller would use. */
async function balanceOver(peer: Peer): Promise<number> {
  const answer = await peer.request('tools/call', '{"name":"get_balance","arguments":{}}', 'get_balance');
  return z
    .object({ result: z.object({ structuredContent: z.object({ balance: z.number() }) }) })
    .parse(answer.message).result.structuredContent.balance;
}

function describeRules(transport: CheckInputs['transport'], fast: () => Connection, slow: () => Connection) {
  describe("the SEP's rules, as the checker states them", () => {
    it('has a case for every rule a client can observe, and only for those', () => {
      const observable = RULES.filter((rule) => !('notCheckable' in rule)).map((rule) => rule.id);
      expect([...new Set(RULE_CASES.map((c) => c.rule))]).toStrictEqual(observable);
    });

    for (const c of RULE_CASES) {
      const rule = RULES.find(({ id }) => id === c.rule);
      if (!rule) throw new Error(`no rule ${c.rule}`);
      // Over stdio there is one caller, the local user, and no credentials to vary: the checker
      // must say the rule is not applicable there, and call nothing.
      const needsCallers = 'needs' in rule && (rule.needs === 'other' || rule.needs === 'forbidden');
      const alone = needsCallers && transport === 'stdio';
      const name = `${rule.id}${c.name ? `, ${c.name}` : ''}: “${rule.sentence}”`;
      it(alone ? `${name} (not applicable with one caller)` : name, async () => {
        const { peer, callers } = c.slow ? slow() : fast();
        await peer.request('tools/call', '{"name":"reset_ledger","arguments":{}}', 'reset_ledger');
        const inputs: CheckInputs = {
          ...DEMO_CALL,
          ...(c.slow && { slowArguments: DEMO_CALL.arguments }),
          ...callers,
          transport,
          ...c.inputs,
        };
        const result = await checkRule(new Run(peer, inputs), rule);
        if (alone) {
          expect(result.status).toBe('not applicable');
          expect(await balanceOver(peer)).toBe(0);
          return;
        }
        expect(result).toMatchObject({
          status: c.status ?? 'passed',
          observed: c.observed ? expect.stringMatching(c.observed) : expect.any(String),
        });
        expect(await balanceOver(peer)).toBe(c.balance);
      });
    }
  });
}

export interface SepCaseOptions {
  transport: CheckInputs['transport'];
  /** The memory store's `--max-records` cap; a Redis store's cap is Redis' own `maxmemory`. */
  recordCap?: boolean;
}

export function describeSepCases(name: string, connect: Connect, options: SepCaseOptions): void {
  const { transport, recordCap = true } = options;
  describe(`SEP-3182 over ${name}`, () => {
    let fast: Connection;
    let slow: Connection;
    beforeAll(async () => {
      [fast, slow] = await Promise.all([
        connect(['--max-records', '1000']),
        connect(['--charge-latency-ms', String(SLOW_CHARGE_MS)]),
      ]);
    });
    afterAll(async () => {
      await Promise.all([fast?.close(), slow?.close()]);
    });

    describeRules(
      transport,
      () => fast,
      () => slow,
    );

    describe('through an SDK client', () => {
      beforeEach(async () => {
        await Promise.all([resetLedger(fast.client), resetLedger(slow.client)]);
      });

      it('gets the stored response back, structured content included', async () => {
        const call = charge(100);
        const first = await callTool(fast.client, call);
        expect(await callTool(fast.client, call)).toStrictEqual(first);
        expect(first.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
        expect(await balanceOf(fast.client)).toBe(100);
      });

      it('after a conflict, the original request still replays: the record is left in place', async () => {
        const call = charge(100);
        const first = await callTool(fast.client, call);
        await errorFrom(callTool(fast.client, { ...call, arguments: { amount: 1 } }));
        expect(await callTool(fast.client, call)).toStrictEqual(first);
        expect(await balanceOf(fast.client)).toBe(100);
      });

      it('gets the conflict message as the server wrote it, with no SDK prefix', async () => {
        const call = charge(100);
        await callTool(fast.client, call);
        const error = await errorFrom(callTool(fast.client, { ...call, arguments: { amount: 2 } }));
        expect(error).toBeInstanceOf(Error);
        expect(error instanceof Error ? error.message : '').toBe(Messages.conflict);
        expect(idempotencyErrorOf(error)).toStrictEqual({
          code: INVALID_PARAMS,
          type: IdempotencyErrorType.conflict,
          idempotencyKey: call.idempotencyKey,
        });
      });

      it('gets the conflict error, not in progress, for other arguments while the original runs', async () => {
        const call = charge(100);
        const original = callTool(slow.client, call);
        await new Promise((resolve) => setTimeout(resolve, SLOW_CHARGE_MS / 4));
        const error = await errorFrom(callTool(slow.client, { ...call, arguments: { amount: 5 } }));
        expect(idempotencyErrorOf(error)?.type).toBe(IdempotencyErrorType.conflict);
        await original;
        expect(await balanceOf(slow.client)).toBe(100);
      });

      it('gets the stored response once the original it found in progress completes', async () => {
        const call = charge(100);
        const original = callTool(slow.client, call);
        await new Promise((resolve) => setTimeout(resolve, SLOW_CHARGE_MS / 4));
        const error = await errorFrom(callTool(slow.client, call));
        expect(idempotencyErrorOf(error)).toStrictEqual({
          code: INVALID_PARAMS,
          type: IdempotencyErrorType.inProgress,
          idempotencyKey: call.idempotencyKey,
        });
        const first = await original;
        expect(textOf(first)).toBe('Charged 100. New balance: 100');
        expect(await callTool(slow.client, call)).toStrictEqual(first);
        expect(await balanceOf(slow.client)).toBe(100);
      });
    });

    describe('a lost response, retried by the retry helper', () => {
      beforeEach(async () => {
        await Promise.all([resetLedger(fast.client), resetLedger(slow.client)]);
      });

      it('charges once: timed out, then in progress, then the stored response', async () => {
        const { result, attempts } = await callToolIdempotently(
          slow.client,
          { name: 'charge_guarded', arguments: { amount: 100 } },
          {
            policy: {
              timeoutMs: SLOW_CHARGE_MS / 3,
              initialBackoffMs: 50,
              maxBackoffMs: 150,
              maxAttempts: 40,
            },
            // As the server sent them (the helper retries only a server that deduplicates, and
            // cannot ask one on 2025-11-25): the raw peer read them from the same server.
            serverCapabilities: slow.peer.capabilities,
          },
        );
        const outcomes = attempts.map((a) => a.outcome);
        expect(outcomes[0]).toBe('timedOut');
        expect(outcomes.at(-1)).toBe('answered');
        expect(new Set(attempts.map((a) => a.idempotencyKey)).size).toBe(1);
        expect(textOf(result)).toBe('Charged 100. New balance: 100');
        expect(await balanceOf(slow.client)).toBe(100);
      });

      it('returns a tool error as the answer, without retrying it', async () => {
        const { attempts, result } = await callToolIdempotently(
          fast.client,
          { name: 'charge_guarded', arguments: { amount: -1 } },
          { serverCapabilities: fast.peer.capabilities },
        );
        expect(attempts.map((a) => a.outcome)).toStrictEqual(['answered']);
        expect(result.isError).toBe(true);
        expect(await balanceOf(fast.client)).toBe(0);
      });
    });

    describe('an invalid key', () => {
      beforeEach(async () => {
        await resetLedger(fast.client);
      });

      const badKeys: Array<[string, unknown, RegExp]> = [
        ['a number', 42, /must be a string, got a number/],
        ['null', null, /must be a string, got null/],
        ['an object', { id: 'x' }, /must be a string, got an object/],
        ['an array', ['x'], /must be a string, got an array/],
        ['empty', '', /must not be empty/],
        ['256 characters', 'k'.repeat(256), /at most 255 characters, got 256/],
        ['a newline', 'abc\ndef', /control characters \(found one at index 3\)/],
        ['a NUL', 'abc\u0000', /control characters/],
        ['a C1 control', 'abc\u0085', /control characters/],
        ['a lone surrogate', 'abc\ud800', /lone surrogate/],
      ];
      it.each(badKeys)(
        '(%s) is refused with a clear error, and nothing executes',
        async (_, key, message) => {
          const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
          const error = await errorFrom(
            fast.client.request({ method: 'tools/call', params }, CallToolResultLoose),
          );
          expect(idempotencyErrorOf(error)).toMatchObject({
            code: INVALID_PARAMS,
            type: IdempotencyErrorType.invalid,
          });
          expect(error instanceof Error ? error.message : '').toMatch(message);
          expect(await balanceOf(fast.client)).toBe(0);
        },
      );

      it('of 255 characters, astral ones included, is accepted', async () => {
        const key = '🔑'.repeat(255);
        await callTool(fast.client, charge(3, key));
        await callTool(fast.client, charge(3, key));
        expect(await balanceOf(fast.client)).toBe(3);
      });
    });

    describe('bad arguments under a key', () => {
      beforeEach(async () => {
        await resetLedger(fast.client);
      });

      const badAmounts: Array<[string, unknown]> = [
        ['negative', -100],
        ['zero', 0],
        ['fractional', 1.5],
        ['a string', '100'],
        ['missing', undefined],
      ];
      it.each(badAmounts)(
        '(amount %s) get a tool error, the balance is unchanged, the server serves on',
        async (_, amount) => {
          const call = { ...charge(0), arguments: amount === undefined ? {} : { amount } };
          const result = await callTool(fast.client, call);
          expect(result.isError).toBe(true);
          expect(textOf(result)).toMatch(/amount/);
          expect(await balanceOf(fast.client)).toBe(0);
          expect(textOf(await callTool(fast.client, charge(1)))).toBe('Charged 1. New balance: 1');
        },
      );

      it('of a megabyte are fingerprinted, not stored, and still deduplicated', async () => {
        const call = { ...charge(0), arguments: { amount: 10, memo: 'x'.repeat(1_000_000) } };
        const first = await callTool(fast.client, call);
        expect(await callTool(fast.client, call)).toStrictEqual(first);
        expect(await balanceOf(fast.client)).toBe(10);
      });
    });

    // A Redis store has no count cap to test: its cap is Redis' own maxmemory.
    if (recordCap) {
      describe('a full store', () => {
        it('refuses a new key rather than evict a live record, and executes nothing', async () => {
          const tiny = await connect(['--max-records', '2']);
          try {
            await callTool(tiny.client, charge(1));
            await callTool(tiny.client, charge(1));
            const error = await errorFrom(callTool(tiny.client, charge(1)));
            expect(idempotencyErrorOf(error)).toMatchObject({
              code: INTERNAL_ERROR,
              type: IdempotencyErrorType.storeFull,
            });
            expect(await balanceOf(tiny.client)).toBe(2);
          } finally {
            await tiny.close();
          }
        });
      });
    }
  });
}

/** Accepts any result: the invalid-key requests are sent raw, and must fail before a result. */
const CallToolResultLoose = z.looseObject({});
