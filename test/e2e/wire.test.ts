// The wire, byte for byte: hand-written JSON-RPC lines to the real server process, no SDK
// client in between. If the SDK ever strips `idempotencyKey` before the guard sees it, the
// deduplication tests here fail: this is the loud failure the Python prototype lacked.

import { IdempotencyErrorType } from 'mcp-request-idempotency';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type RawAnswer, RawStdioPeer } from '../support/raw-stdio.js';

let peer: RawStdioPeer;
let initialize: RawAnswer;
let nextId = 1000;

beforeAll(async () => {
  ({ peer, initialize } = await RawStdioPeer.start());
});
afterAll(async () => {
  await peer.stop();
});
beforeEach(async () => {
  await peer.request('tools/call', { name: 'reset_ledger', arguments: {} });
});

/** Sends `params` as hand-written JSON text (so `1.0` and `\u0061` survive to the wire). */
function callRaw(paramsJson: string): Promise<RawAnswer> {
  const id = nextId++;
  return peer.requestLine(id, `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":${paramsJson}}`);
}

async function balance(): Promise<unknown> {
  const { message } = await peer.request('tools/call', { name: 'get_balance', arguments: {} });
  return Reflect.get(Reflect.get(Object(message.result), 'structuredContent'), 'balance');
}

/** The answer line with its id blanked, so two answers can be compared byte for byte. */
function withoutId(answer: RawAnswer): string {
  return answer.line.replace(/"id":\d+/, '"id":_');
}

describe('the initialize result', () => {
  it('advertises capabilities.tools.idempotency as an empty object', () => {
    expect(initialize.message.result).toMatchObject({ capabilities: { tools: { idempotency: {} } } });
    expect(initialize.line).toContain('"idempotency":{}');
  });
});

describe('a keyed retry on the wire', () => {
  it('executes once and answers the retry with the same bytes', async () => {
    const params = '{"name":"charge_guarded","arguments":{"amount":100},"idempotencyKey":"wire-1"}';
    const first = await callRaw(params);
    const retry = await callRaw(params);
    expect(first.line).toContain('Charged 100. New balance: 100');
    expect(withoutId(retry)).toBe(withoutId(first));
    expect(await balance()).toBe(100);
  });

  it('treats key order, whitespace, 1 vs 1.0 vs 1e0 and escaped characters as the same request', async () => {
    const first = await callRaw(
      '{"name":"charge_guarded","arguments":{"amount":1,"memo":"ab"},"idempotencyKey":"wire-2"}',
    );
    const variants = [
      '{"idempotencyKey":"wire-2","arguments":{"memo":"ab","amount":1.0},"name":"charge_guarded"}',
      '{ "name" : "charge_guarded" , "arguments" : { "amount" : 1e0 , "memo" : "\\u0061b" } , "idempotencyKey" : "wire-2" }',
      '{"name":"charge_\\u0067uarded","arguments":{"\\u0061mount":10E-1,"memo":"a\\u0062"},"idempotencyKey":"wire-\\u0032"}',
    ];
    for (const variant of variants) expect(withoutId(await callRaw(variant))).toBe(withoutId(first));
    expect(await balance()).toBe(1);
  });

  it('answers a different request under the key with a clean conflict error', async () => {
    await callRaw('{"name":"charge_guarded","arguments":{"amount":100},"idempotencyKey":"wire-3"}');
    const conflict = await callRaw(
      '{"name":"charge_guarded","arguments":{"amount":999},"idempotencyKey":"wire-3"}',
    );
    expect(conflict.message.error).toStrictEqual({
      code: -32602,
      message:
        'This idempotencyKey was already used with a different tool or different arguments; use a new key for a new operation',
      data: { type: IdempotencyErrorType.conflict, idempotencyKey: 'wire-3' },
    });
    expect(await balance()).toBe(100);
  });

  it('replays a JSON-RPC error the dispatch produced (arguments as an array)', async () => {
    const params = '{"name":"charge_guarded","arguments":[100],"idempotencyKey":"wire-4"}';
    const first = await callRaw(params);
    const retry = await callRaw(params);
    // The SDK's own parse rejects it (as -32602 with zod's report); the guard keeps that answer.
    expect(first.message.error).toMatchObject({
      code: -32602,
      message: expect.stringMatching(/expected record/),
    });
    expect(withoutId(retry)).toBe(withoutId(first));
    const decisions = (await peer.decisions()).filter((d) => d.idempotencyKey === 'wire-4');
    expect(decisions.map((d) => d.decision)).toStrictEqual(['executed', 'replayed']);
  });
});

describe('the operator log', () => {
  it('has one structured stderr line per keyed decision, and stdout holds only JSON-RPC', async () => {
    const before = (await peer.decisions()).length;
    await callRaw('{"name":"charge_guarded","arguments":{"amount":1},"idempotencyKey":"log-1"}');
    await callRaw('{"name":"charge_guarded","arguments":{"amount":1},"idempotencyKey":"log-1"}');
    await callRaw('{"name":"charge_guarded","arguments":{"amount":2},"idempotencyKey":"log-1"}');
    await callRaw('{"name":"charge_guarded","arguments":{"amount":1},"idempotencyKey":7}');
    await callRaw('{"name":"charge_guarded","arguments":{"amount":1}}');
    const logged = (await peer.decisions()).slice(before);
    expect(logged.map((d) => [d.decision, d.idempotencyKey, d.tool])).toStrictEqual([
      ['executed', 'log-1', 'charge_guarded'],
      ['replayed', 'log-1', 'charge_guarded'],
      ['conflict', 'log-1', 'charge_guarded'],
      ['invalid', undefined, 'charge_guarded'],
    ]);
    expect(logged.every((d) => typeof d.time === 'string' && typeof d.durationMs === 'number')).toBe(true);
    for (const line of peer.stdoutLines) expect(JSON.parse(line)).toMatchObject({ jsonrpc: '2.0' });
  });
});
