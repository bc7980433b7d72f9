// What the guard decided for a keyed call, told to the operator (core/decisions.ts): one event per
// keyed decision, with the scope, the key, the tool and how long deciding took, delivered before
// the caller is answered; a log that throws never changes the answer; a call without a key is
// nobody's decision.

import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import {
  createToolCallGuard,
  type DecisionEvent,
  LOCAL_SCOPE,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { DecisionLog } from '../../../packages/idempotency/core/decisions.js';

const answer = (text: string) => ({ content: [{ type: 'text', text }] });

/** A guard whose events are kept, the order of events and answers recorded in `order`. */
function guarded() {
  const events: DecisionEvent[] = [];
  const order: string[] = [];
  const guard = createToolCallGuard({
    store: new MemoryIdempotencyStore(),
    onDecision: (event) => {
      events.push(event);
      order.push(`event ${event.decision}`);
    },
  });
  const call = async (params: Record<string, unknown>, dispatch = async () => answer('ran')) => {
    const result = await guard(params, {}, dispatch, undefined).catch((error: unknown) => error);
    order.push('answered');
    return result;
  };
  return { events, order, call };
}

describe('the decision event', () => {
  it('names the decision, the scope, the key and the tool, and carries no message when nothing went wrong', async () => {
    const { events, call } = guarded();
    const params = { name: 'charge', arguments: { amount: 1 }, idempotencyKey: 'k-1' };
    await call(params);
    await call(params);
    expect(events).toStrictEqual([
      {
        decision: 'executed',
        scope: LOCAL_SCOPE,
        idempotencyKey: 'k-1',
        tool: 'charge',
        message: undefined,
        durationMs: expect.any(Number),
      },
      {
        decision: 'replayed',
        scope: LOCAL_SCOPE,
        idempotencyKey: 'k-1',
        tool: 'charge',
        message: undefined,
        durationMs: expect.any(Number),
      },
    ]);
  });

  it('is told before the caller is answered, once per keyed call', async () => {
    const { order, call } = guarded();
    const params = { name: 'charge', arguments: {}, idempotencyKey: 'k-2' };
    await call(params);
    await call({ ...params, arguments: { other: true } });
    expect(order).toStrictEqual(['event executed', 'answered', 'event conflict', 'answered']);
  });

  it('counts the execution in durationMs: an executed call is never told faster than its tool ran', async () => {
    const { events, call } = guarded();
    let ranMs = Number.NaN;
    await call({ name: 'slow', arguments: {}, idempotencyKey: 'k-3' }, async () => {
      const started = performance.now();
      await sleep(40);
      ranMs = performance.now() - started;
      return answer('slow');
    });
    expect(events[0]?.durationMs).toBeGreaterThanOrEqual(Math.floor(ranMs * 1000) / 1000);
  });

  it('carries the reason of a refusal, and no key a refused key could not be', async () => {
    const { events, call } = guarded();
    await call({ name: 'charge', arguments: {}, idempotencyKey: '' });
    expect(events).toStrictEqual([
      {
        decision: 'invalid',
        tool: 'charge',
        message: 'idempotencyKey must not be empty',
        durationMs: expect.any(Number),
      },
    ]);
  });

  it("is not told for a call without a key: exactly today's behaviour", async () => {
    const { events, call } = guarded();
    await call({ name: 'charge', arguments: {} });
    expect(events).toStrictEqual([]);
  });
});

describe('the log itself', () => {
  it('names the tool only when the name is a string, whatever a client sent', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (name) => {
        let told: DecisionEvent | undefined;
        new DecisionLog((event) => (told = event), name).decide('invalid');
        expect(told?.tool).toBe(typeof name === 'string' ? name : undefined);
      }),
    );
  });

  it('gives durationMs in ms to the microsecond, measured from when the call reached the guard', async () => {
    let told: DecisionEvent | undefined;
    const reached = performance.now();
    const log = new DecisionLog((event) => (told = event), 'charge');
    const built = performance.now();
    await sleep(25);
    const deciding = performance.now();
    log.decide('executed', { scope: 's', idempotencyKey: 'k' });
    const decided = performance.now();
    const ms = told?.durationMs ?? Number.NaN;
    expect(ms).toBeGreaterThanOrEqual(Math.floor((deciding - built) * 1000) / 1000);
    expect(ms).toBeLessThanOrEqual(Math.ceil((decided - reached) * 1000) / 1000);
    expect(Math.round(ms * 1000) / 1000).toBe(ms);
  });

  it('never changes what the caller is answered when it throws', async () => {
    const guard = createToolCallGuard({
      store: new MemoryIdempotencyStore(),
      onDecision: () => {
        throw new Error('log sink down');
      },
    });
    const params = { name: 'charge', arguments: {}, idempotencyKey: 'k-4' };
    let runs = 0;
    const dispatch = async () => answer(`run ${++runs}`);
    expect(await guard(params, {}, dispatch, undefined)).toStrictEqual(answer('run 1'));
    expect(await guard(params, {}, dispatch, undefined)).toStrictEqual(answer('run 1'));
    expect(runs).toBe(1);
  });
});
