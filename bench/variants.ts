// --- The five kinds of tools/call the benchmark times, each checked to be what it says ---
//
// A figure must never come from the wrong path, so every timed call's answer is checked
// (outside the timed region) and a wrong one aborts the run: a "replay" that executed, a
// "conflict" that replayed, an "in progress" whose original had already finished.

import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { CallToolResult, Client } from '@modelcontextprotocol/client';
import { callTool, type KeyedToolCall, type ToolCall } from '../idempotency/client.js';
import { IdempotencyErrorType, idempotencyErrorOf } from '../idempotency/index.js';
import type { Endpoint } from './endpoints.js';

export type VariantName = 'baseline' | 'first' | 'replay' | 'conflict' | 'inProgress';

export const VARIANTS: readonly VariantName[] = ['baseline', 'first', 'replay', 'conflict', 'inProgress'];

export const VARIANT_LABEL: Record<VariantName, string> = {
  baseline: 'unkeyed (baseline)',
  first: 'keyed first execution',
  replay: 'keyed replay',
  conflict: 'conflict answer',
  inProgress: 'in-progress answer',
};

/** The benchmark's tool and its small arguments: the demo's charge, one field. */
export const TOOL = 'charge_guarded';
export const AMOUNT = 1;

/** Far longer than a loopback request needs to reach the server; short next to SLOW_CHARGE_MS. */
const ORIGINAL_HEAD_START_MS = 25;

export type Outcome = { ok: true; result: CallToolResult } | { ok: false; error: unknown };

/** A wrong answer: the run stops, because the figure would belong to another path. */
export class WrongAnswerError extends Error {
  override name = 'WrongAnswerError';
}

/**
 * One variant against one server pair: `prepare` before each batch (untimed), `call` timed,
 * `check` on each answer (untimed), `finish` after each batch (untimed).
 */
export interface Variant {
  name: VariantName;
  prepare(batch: number): Promise<void>;
  call(i: number): Promise<CallToolResult>;
  check(outcome: Outcome): void;
  finish(): Promise<void>;
  /** Waits for anything still in flight (the slow originals); called once, at the end. */
  settle(): Promise<void>;
}

/** Arguments the charge tool accepts: its `amount`, and whatever else (its schema strips the rest). */
export type ChargeArguments = { amount: number } & Record<string, unknown>;

/** @param args the arguments of every call; a conflict sends them with another amount */
export function makeVariants(
  fast: Endpoint,
  slow: Endpoint,
  where: string,
  args: ChargeArguments = { amount: AMOUNT },
): Variant[] {
  // The fast server's ledger only grows, and only this client charges it: every execution
  // must answer a higher balance than the one before, and a replay exactly the stored answer.
  const ledger = { balance: Number.NEGATIVE_INFINITY };
  const fail = (variant: VariantName, what: string, outcome: Outcome): never => {
    const got = outcome.ok ? JSON.stringify(outcome.result) : String(outcome.error);
    throw new WrongAnswerError(`${where}, ${VARIANT_LABEL[variant]}: expected ${what}, got ${got}`);
  };
  const expectExecuted = (variant: VariantName, outcome: Outcome) => {
    const answer = Object(outcome.ok ? outcome.result.structuredContent : undefined);
    const balance: unknown = Reflect.get(answer, 'balance');
    if (
      Reflect.get(answer, 'charged') !== args.amount ||
      typeof balance !== 'number' ||
      !(balance > ledger.balance)
    ) {
      fail(variant, `a new charge of ${args.amount} (balance above ${ledger.balance})`, outcome);
    }
    ledger.balance = Number(balance);
  };
  const expectError = (variant: VariantName, type: IdempotencyErrorType, key: string, outcome: Outcome) => {
    const sep = outcome.ok ? undefined : idempotencyErrorOf(outcome.error);
    if (sep?.type !== type || sep.idempotencyKey !== key) fail(variant, `the ${type} error`, outcome);
  };
  const charge = (client: Client, call: ToolCall | KeyedToolCall) => callTool(client, call);

  // Baseline: no key, the guard steps aside; the tool runs every time.
  const baseline: Variant = {
    name: 'baseline',
    prepare: async () => {},
    call: () => charge(fast.client, { name: TOOL, arguments: args }),
    check: (outcome) => expectExecuted('baseline', outcome),
    finish: async () => {},
    settle: async () => {},
  };

  // First execution: a key never seen before, every call (generated before the batch).
  let freshKeys: string[] = [];
  const first: Variant = {
    name: 'first',
    prepare: async (batch) => {
      freshKeys = Array.from({ length: batch }, () => randomUUID());
    },
    call: (i) => charge(fast.client, { name: TOOL, arguments: args, idempotencyKey: freshKeys[i] ?? '' }),
    check: (outcome) => expectExecuted('first', outcome),
    finish: async () => {},
    settle: async () => {},
  };

  // Replay and conflict share a stored key, executed once before each batch.
  let stored: { key: string; result: CallToolResult } | undefined;
  const storeOne = async () => {
    const key = randomUUID();
    const result = await charge(fast.client, { name: TOOL, arguments: args, idempotencyKey: key });
    expectExecuted('first', { ok: true, result });
    stored = { key, result };
  };
  const storedKey = () => stored?.key ?? '';
  const replay: Variant = {
    name: 'replay',
    prepare: storeOne,
    call: () => charge(fast.client, { name: TOOL, arguments: args, idempotencyKey: storedKey() }),
    check: (outcome) => {
      if (!outcome.ok || !isDeepStrictEqual(outcome.result, stored?.result)) {
        fail('replay', `the stored response ${JSON.stringify(stored?.result)}`, outcome);
      }
    },
    finish: async () => {},
    settle: async () => {},
  };
  const other = { ...args, amount: args.amount + 1 };
  const conflict: Variant = {
    name: 'conflict',
    prepare: storeOne,
    call: () => charge(fast.client, { name: TOOL, arguments: other, idempotencyKey: storedKey() }),
    check: (outcome) => expectError('conflict', IdempotencyErrorType.conflict, storedKey(), outcome),
    finish: async () => {},
    settle: async () => {},
  };

  // In progress: an original on the slow server, still charging while its duplicates arrive.
  const originals: Array<Promise<unknown>> = [];
  let held: { key: string; done: boolean } | undefined;
  const heldKey = () => held?.key ?? '';
  const inProgress: Variant = {
    name: 'inProgress',
    prepare: async () => {
      const current = { key: randomUUID(), done: false };
      held = current;
      const original = charge(slow.client, { name: TOOL, arguments: args, idempotencyKey: current.key });
      originals.push(
        original.then(
          () => {
            current.done = true;
          },
          (error: unknown) => {
            current.done = true;
            throw error;
          },
        ),
      );
      // Over HTTP the original and its duplicate travel on different connections: give the
      // original a head start, or the duplicate could claim the key and become the original.
      await sleep(ORIGINAL_HEAD_START_MS);
      inProgress.check(await settleCall(() => inProgress.call(0)));
    },
    call: () => charge(slow.client, { name: TOOL, arguments: args, idempotencyKey: heldKey() }),
    check: (outcome) => expectError('inProgress', IdempotencyErrorType.inProgress, heldKey(), outcome),
    finish: async () => {
      if (held?.done) {
        throw new WrongAnswerError(
          `${where}: the original finished before its in-progress batch did; raise SLOW_CHARGE_MS`,
        );
      }
    },
    settle: async () => {
      await Promise.all(originals);
    },
  };
  return [baseline, first, replay, conflict, inProgress];
}

export async function settleCall(call: () => Promise<CallToolResult>): Promise<Outcome> {
  try {
    return { ok: true, result: await call() };
  } catch (error) {
    return { ok: false, error };
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
