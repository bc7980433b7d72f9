// A stream of keyed charges, each retried until it is answered with its charge: what a
// well-behaved client does while part of the system is down. The fault tests run one while
// they kill Redis (or one master of a cluster), then check that nothing was charged twice.

import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import { IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { sleep } from '../../demo/processes/bounds.js';

/** One logical operation of the stream: its own key and its own amount, so a charge names it. */
export interface Operation {
  amount: number;
  idempotencyKey: string;
  answer?: string;
}

/** One call of the stream as it was sent, and what it was answered. */
export interface Attempt<Op extends Operation = Operation> {
  operation: Op;
  sentAt: number;
  waitedMs: number;
  outcome: 'charged' | 'storeUnavailable' | 'inProgress';
  code?: number;
}

/** How long a caller waits before it retries a call refused with "nothing happened, retry later". */
const RETRY_AFTER_MS = 50;

/** Enough retries to outlast any outage a test makes; past them the stream fails, loudly. */
const MAX_ATTEMPTS = 400;

/**
 * A worker of the stream: takes operations from `queue` (shared with the other workers) until
 * it is empty, and calls `charge_guarded` for each until it is answered with its charge. After
 * "nothing happened, retry later" (store unavailable, in progress) it sends the same key a
 * little later to the next of `clients`, starting at `first`; any other error fails the stream.
 * Every call is added to `attempts`.
 */
export async function chargeEach<Op extends Operation>(
  queue: Op[],
  clients: readonly Client[],
  first: number,
  attempts: Attempt<Op>[],
): Promise<void> {
  for (let operation = queue.shift(); operation; operation = queue.shift()) {
    for (let attempt = 0; operation.answer === undefined; attempt++) {
      if (attempt === MAX_ATTEMPTS) throw new Error(`operation ${operation.amount} never got an answer`);
      const client = clients[(first + attempt) % clients.length];
      if (!client) throw new Error('no client to call');
      const sentAt = performance.now();
      try {
        const result = await callTool(client, {
          name: 'charge_guarded',
          arguments: { amount: operation.amount },
          idempotencyKey: operation.idempotencyKey,
        });
        operation.answer = JSON.stringify(result.structuredContent);
        attempts.push({ operation, sentAt, waitedMs: performance.now() - sentAt, outcome: 'charged' });
      } catch (error) {
        const sep = idempotencyErrorOf(error);
        if (
          sep?.type !== IdempotencyErrorType.storeUnavailable &&
          sep?.type !== IdempotencyErrorType.inProgress
        ) {
          throw error;
        }
        const outcome =
          sep.type === IdempotencyErrorType.storeUnavailable ? 'storeUnavailable' : 'inProgress';
        attempts.push({ operation, sentAt, waitedMs: performance.now() - sentAt, outcome, code: sep.code });
        await new Promise((resolve) => setTimeout(resolve, RETRY_AFTER_MS));
      }
    }
  }
}

/** A stream under way: its operations, every call sent so far, and the means to wait for its end. */
export interface Stream {
  operations: Operation[];
  attempts: Attempt[];
  /** How many operations have been answered with their charge so far. */
  charged(): number;
  /** Resolves when every operation is answered; past `withinMs`, rejects saying how far it got. */
  finished(withinMs: number): Promise<void>;
}

/**
 * Starts a stream of `count` operations (amounts 1 to `count`, each under its own key), charged by
 * `workers` workers (see `chargeEach`) over `clients`.
 */
export function streamCharges(count: number, clients: readonly Client[], workers: number): Stream {
  const operations: Operation[] = Array.from({ length: count }, (_, i) => ({
    amount: i + 1,
    idempotencyKey: randomUUID(),
  }));
  const attempts: Attempt[] = [];
  const queue = [...operations];
  const running = Array.from({ length: workers }, (_, w) => chargeEach(queue, clients, w, attempts));
  const charged = () => attempts.filter((a) => a.outcome === 'charged').length;
  return {
    operations,
    attempts,
    charged,
    finished: async (withinMs) => {
      await Promise.race([
        Promise.all(running),
        sleep(withinMs).then(() => {
          throw new Error(`the stream did not finish: ${charged()} of ${count} answered`);
        }),
      ]);
    },
  };
}
