// The SEP-3182 cases, written once and run against every transport the server speaks.
// Each test reads as a sentence of the proposal and checks what a caller would notice:
// the balance, the exact response, the error code and data.

import { randomUUID } from 'node:crypto';
import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { callTool, callToolIdempotently, type KeyedToolCall } from '../../idempotency/client.js';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  idempotencyErrorOf,
  Messages,
} from '../../idempotency/index.js';
import { balanceOf, resetLedger } from '../../launch.js';

export interface Connection {
  client: Client;
  close(): Promise<void>;
}

/** Starts a server with these command-line options and connects a client to it. */
export type Connect = (serverArgs: string[]) => Promise<Connection>;

export const SLOW_CHARGE_MS = 600;

export async function errorFrom(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to fail, and it succeeded');
}

/**
 * What a caller got, a result or a JSON-RPC error, in a form two answers can be compared in.
 * (An unknown tool is an `isError` result on the v1 SDK line and a -32602 error on v2.)
 */
export async function responseOf(call: Promise<CallToolResult>): Promise<unknown> {
  try {
    return { result: await call };
  } catch (error) {
    const field = (name: string): unknown =>
      typeof error === 'object' && error !== null ? Reflect.get(error, name) : undefined;
    return { error: { code: field('code'), message: field('message'), data: field('data') } };
  }
}

export function textOf(result: CallToolResult): string {
  return result.content.map((part) => (part.type === 'text' ? part.text : '')).join('');
}

const charge = (amount: unknown, idempotencyKey: string = randomUUID()): KeyedToolCall => ({
  name: 'charge_guarded',
  arguments: { amount },
  idempotencyKey,
});

export interface SepCaseOptions {
  /** The memory store's `--max-records` cap; a Redis store's cap is Redis' own `maxmemory`. */
  recordCap?: boolean;
}

export function describeSepCases(transport: string, connect: Connect, options: SepCaseOptions = {}): void {
  const { recordCap = true } = options;
  describe(`SEP-3182 over ${transport}`, () => {
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
    beforeEach(async () => {
      await Promise.all([resetLedger(fast.client), resetLedger(slow.client)]);
    });

    describe('a call without a key', () => {
      it('executes every time, exactly as before the SEP', async () => {
        const call = { name: 'charge_unguarded', arguments: { amount: 100 } };
        const first = await callTool(fast.client, call);
        const second = await callTool(fast.client, call);
        expect(textOf(first)).toBe('Charged 100. New balance: 100');
        expect(textOf(second)).toBe('Charged 100. New balance: 200');
        expect(await balanceOf(fast.client)).toBe(200);
      });
    });

    describe('a completed request retried with its key', () => {
      it('is not executed again and gets the stored response, identical', async () => {
        const call = charge(100);
        const first = await callTool(fast.client, call);
        const retry = await callTool(fast.client, call);
        expect(retry).toStrictEqual(first);
        expect(first.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
        expect(await balanceOf(fast.client)).toBe(100);
      });

      it('applies to every tool, not only the charge tools', async () => {
        const call = { name: 'charge_unguarded', arguments: { amount: 7 }, idempotencyKey: randomUUID() };
        await callTool(fast.client, call);
        await callTool(fast.client, call);
        expect(await balanceOf(fast.client)).toBe(7);
      });

      it('replays a stored tool error (invalid arguments) instead of executing again', async () => {
        const call = charge(-5);
        const first = await callTool(fast.client, call);
        const retry = await callTool(fast.client, call);
        expect(first.isError).toBe(true);
        expect(textOf(first)).toMatch(/amount/);
        expect(retry).toStrictEqual(first);
        expect(await balanceOf(fast.client)).toBe(0);
      });

      it('replays the error of an unknown tool, and the server keeps serving', async () => {
        const call = { name: 'refund_everything', arguments: {}, idempotencyKey: randomUUID() };
        const first = await responseOf(callTool(fast.client, call));
        const retry = await responseOf(callTool(fast.client, call));
        expect(JSON.stringify(first)).toMatch(/refund_everything not found/);
        expect(retry).toStrictEqual(first);
        expect(textOf(await callTool(fast.client, charge(1)))).toBe('Charged 1. New balance: 1');
      });

      it('treats an absent arguments object as {}', async () => {
        const idempotencyKey = randomUUID();
        const first = await callTool(fast.client, { name: 'get_balance', idempotencyKey });
        const retry = await callTool(fast.client, { name: 'get_balance', arguments: {}, idempotencyKey });
        expect(retry).toStrictEqual(first);
      });

      it('treats reordered argument keys as the same request', async () => {
        const idempotencyKey = randomUUID();
        const call = { name: 'charge_guarded', idempotencyKey };
        // `note` is not in the tool's schema: it takes part in equivalence all the same.
        const first = await callTool(fast.client, { ...call, arguments: { amount: 30, note: 'a' } });
        const retry = await callTool(fast.client, { ...call, arguments: { note: 'a', amount: 30 } });
        expect(retry).toStrictEqual(first);
        expect(await balanceOf(fast.client)).toBe(30);
      });
    });

    describe('the same key with a different request', () => {
      it('is rejected with the conflict error, and nothing executes', async () => {
        const call = charge(100);
        await callTool(fast.client, call);
        const error = await errorFrom(callTool(fast.client, { ...call, arguments: { amount: 999 } }));
        expect(idempotencyErrorOf(error)).toStrictEqual({
          code: INVALID_PARAMS,
          type: IdempotencyErrorType.conflict,
          idempotencyKey: call.idempotencyKey,
        });
        expect(await balanceOf(fast.client)).toBe(100);
      });

      it('is a conflict when only the tool name differs', async () => {
        const call = charge(100);
        await callTool(fast.client, call);
        const error = await errorFrom(callTool(fast.client, { ...call, name: 'charge_unguarded' }));
        expect(idempotencyErrorOf(error)?.type).toBe(IdempotencyErrorType.conflict);
        expect(await balanceOf(fast.client)).toBe(100);
      });

      it('compares the arguments as sent, not as the tool schema reshaped them', async () => {
        const call = charge(100);
        await callTool(fast.client, call);
        // The schema strips `note`, so the tool would see the same input; the request differs.
        const error = await errorFrom(
          callTool(fast.client, { ...call, arguments: { amount: 100, note: 'x' } }),
        );
        expect(idempotencyErrorOf(error)?.type).toBe(IdempotencyErrorType.conflict);
        expect(await balanceOf(fast.client)).toBe(100);
      });

      it('leaves the original record in place: the original request still replays', async () => {
        const call = charge(100);
        const first = await callTool(fast.client, call);
        await errorFrom(callTool(fast.client, { ...call, arguments: { amount: 1 } }));
        expect(await callTool(fast.client, call)).toStrictEqual(first);
      });

      it('carries the message as the server wrote it, with no SDK prefix', async () => {
        const call = charge(100);
        await callTool(fast.client, call);
        const error = await errorFrom(callTool(fast.client, { ...call, arguments: { amount: 2 } }));
        expect(error).toBeInstanceOf(Error);
        expect(error instanceof Error ? error.message : '').toBe(Messages.conflict);
      });
    });

    describe('a duplicate while the original still executes', () => {
      it('gets the in-progress error at once and never starts a second execution', async () => {
        const call = charge(100);
        const original = callTool(slow.client, call);
        await new Promise((resolve) => setTimeout(resolve, SLOW_CHARGE_MS / 4));
        const sent = performance.now();
        const error = await errorFrom(callTool(slow.client, call));
        const waited = performance.now() - sent;
        expect(idempotencyErrorOf(error)).toStrictEqual({
          code: INVALID_PARAMS,
          type: IdempotencyErrorType.inProgress,
          idempotencyKey: call.idempotencyKey,
        });
        expect(waited).toBeLessThan(SLOW_CHARGE_MS / 2);
        expect(textOf(await original)).toBe('Charged 100. New balance: 100');
        expect(await balanceOf(slow.client)).toBe(100);
      });

      it('gets the conflict error instead when its arguments differ', async () => {
        const call = charge(100);
        const original = callTool(slow.client, call);
        await new Promise((resolve) => setTimeout(resolve, SLOW_CHARGE_MS / 4));
        const error = await errorFrom(callTool(slow.client, { ...call, arguments: { amount: 5 } }));
        expect(idempotencyErrorOf(error)?.type).toBe(IdempotencyErrorType.conflict);
        await original;
        expect(await balanceOf(slow.client)).toBe(100);
      });

      it('is replayed once the original completes', async () => {
        const call = charge(100);
        const original = callTool(slow.client, call);
        await new Promise((resolve) => setTimeout(resolve, SLOW_CHARGE_MS / 4));
        await errorFrom(callTool(slow.client, call));
        const first = await original;
        expect(await callTool(slow.client, call)).toStrictEqual(first);
        expect(await balanceOf(slow.client)).toBe(100);
      });
    });

    describe('a lost response, retried by the retry helper', () => {
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
        const { attempts, result } = await callToolIdempotently(fast.client, {
          name: 'charge_guarded',
          arguments: { amount: -1 },
        });
        expect(attempts.map((a) => a.outcome)).toStrictEqual(['answered']);
        expect(result.isError).toBe(true);
        expect(await balanceOf(fast.client)).toBe(0);
      });
    });

    describe('an invalid key', () => {
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
