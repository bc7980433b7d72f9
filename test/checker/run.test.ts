// One run of the checks (packages/checker/run.ts): a `tools/call` goes out with exactly the bytes
// a check asked for (arguments as written, or none, and the key), each call is counted, its answer
// is read as a success, a tool error or a JSON-RPC error, a call that breaks the exchange breaks
// the whole run naming the rule and the call, and the counter "as it stands" is only a probe's.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type CheckInputs, messageOf, Run } from '../../packages/checker/run.js';
import type { Peer } from '../../packages/checker/wire.js';
import { Model } from './model.js';

const inputs = (over: Partial<CheckInputs> = {}): CheckInputs => ({
  tool: 'charge',
  arguments: { amount: 1 },
  transport: 'stdio',
  ...over,
});

/** A peer whose every request fails as a transport does, after `answered` good answers. */
function failingPeer(model: Model, answered: number, why: string): Peer {
  const good = model.peer();
  let left = answered;
  return {
    ...good,
    request: (method, params, tool) =>
      left-- > 0
        ? good.request(method, params, tool)
        : Promise.reject(new Error(`${why} (tools/call ${tool})`)),
  };
}

describe('a call', () => {
  it('sends the tool, the arguments exactly as written, and the key, in that order', async () => {
    const model = new Model();
    const run = new Run(model.peer(), inputs());
    await run.call({});
    await run.call({ argumentsText: '{ "amount" : 1.0 }', key: 'K-1' });
    await run.call({ argumentsText: null, key: 'K-2', tool: 'other' });
    expect(model.sent.map((s) => s.params)).toStrictEqual([
      '{"name":"charge","arguments":{"amount":1}}',
      '{"name":"charge","arguments":{ "amount" : 1.0 },"idempotencyKey":"K-1"}',
      '{"name":"other","idempotencyKey":"K-2"}',
    ]);
  });

  it('writes any key as a JSON string the server parses back to that key', async () => {
    const model = new Model();
    const run = new Run(model.peer(), inputs());
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: 'binary', minLength: 1 }), async (key) => {
        await run.call({ key });
        const sent = model.sent.at(-1)?.params ?? '';
        expect(JSON.parse(sent).idempotencyKey).toBe(key);
      }),
      { numRuns: 50 },
    );
  });

  it('is counted, and counted as keyed when it carries a key', async () => {
    const run = new Run(new Model().peer(), inputs());
    await run.call({});
    await run.call({ key: 'a' });
    await run.probe();
    await run.call({ key: 'b' });
    expect([run.calls, run.keyedCalls]).toStrictEqual([4, 2]);
  });

  it('reads a result as a success or, with isError, a tool error, and anything else as an error', async () => {
    const run = new Run(new Model().peer(), inputs());
    const success = await run.call({});
    const declined = await run.call({ argumentsText: '{"amount":500}' });
    await run.call({ key: 'k' });
    const conflict = await run.call({ key: 'k', argumentsText: '{"amount":2}' });
    expect([success.kind, declined.kind, conflict.kind]).toStrictEqual(['success', 'tool error', 'error']);
    expect(conflict.value).toMatchObject({ data: { type: 'idempotency_key_conflict', idempotencyKey: 'k' } });
    expect(success.value).toStrictEqual(success.answer.message.result);
  });
});

describe('a call that breaks the exchange', () => {
  it('breaks the run, naming the rule being judged and the call with its key, once', async () => {
    const run = new Run(failingPeer(new Model(), 1, 'the server exited (1)'), inputs());
    await run.probe();
    run.current = 'replay.identical';
    await expect(run.call({ key: 'K-9' })).rejects.toThrow(
      'tools/call charge with key K-9: the server exited (1)',
    );
    expect(run.broken).toStrictEqual({
      during: 'replay.identical',
      reason: 'tools/call charge with key K-9: the server exited (1)',
    });
  });

  it('leaves every later call refused with the same reason, nothing sent', async () => {
    const model = new Model();
    const run = new Run(failingPeer(model, 0, 'no answer within 50 ms'), inputs());
    await expect(run.probe()).rejects.toThrow('tools/call charge without a key: no answer within 50 ms');
    run.current = 'later.rule';
    await expect(run.call({ key: 'x' })).rejects.toThrow(
      'tools/call charge without a key: no answer within 50 ms',
    );
    expect(run.broken?.during).toBe('the calls without a key');
    expect(run.calls).toBe(1);
  });
});

describe('the counter as it stands', () => {
  it('is the last call only when that call was a probe', async () => {
    const run = new Run(new Model().peer(), inputs());
    expect(run.standing()).toBeUndefined();
    const probe = await run.probe();
    expect(run.standing()).toBe(probe);
    await run.call({ key: 'k' });
    expect(run.standing()).toBeUndefined();
    const again = await run.probe();
    expect(run.standing()).toBe(again);
  });
});

describe("an error's message", () => {
  it('is an Error’s message, or the thrown value in words', () => {
    expect(messageOf(new Error('boom'))).toBe('boom');
    expect(messageOf('plain')).toBe('plain');
    expect(messageOf(42)).toBe('42');
  });
});
