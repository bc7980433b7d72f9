// Where the guard meets an SDK (sdk/hook.ts): the private `tools/call` entry both SDK lines keep in
// `_requestHandlers`, wrapped so the guard sees every call before any parse or tool, and nothing
// else changed. Checked on the entry's own terms (a handler map, as both lines keep it), so what is
// proved is the wrapping itself: what reaches the guard, what reaches the SDK's dispatch, and the
// refusals when the SDK no longer looks as expected.

import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { type EntryReader, guardToolsCallEntry } from '../../../packages/idempotency/sdk/hook.js';

type Request = { params?: Record<string, unknown> };
type Handler = (request: Request, ctx: Ctx) => Promise<Record<string, unknown>>;
type Ctx = { caller?: string; keyOnTheSide?: string; signal: AbortSignal };

/** An SDK server as the hook sees one: the `tools/call` dispatch and another method's, in its map. */
function sdkServer() {
  const dispatched: Array<{ request: Request; ctx: Ctx }> = [];
  const toolsCall: Handler = async (request, ctx) => {
    dispatched.push({ request, ctx });
    return { content: [{ type: 'text', text: `run ${dispatched.length}` }] };
  };
  const toolsList: Handler = async () => ({ tools: [] });
  const server = {
    _requestHandlers: new Map<string, Handler>([
      ['tools/call', toolsCall],
      ['tools/list', toolsList],
    ]),
  };
  const entry = (method: string) => {
    const handler = server._requestHandlers.get(method);
    if (!handler) throw new Error(method);
    return handler;
  };
  return { server, dispatched, toolsList, entry };
}

const reader: EntryReader<Ctx> = {
  callerOf: (ctx) =>
    ctx.caller ? { authInfo: { token: 't', clientId: 'c', scopes: [], extra: { sub: ctx.caller } } } : {},
  signalOf: (ctx) => ctx.signal,
};
const ctx = (caller?: string): Ctx => ({ caller, signal: new AbortController().signal });
const keyed = (key: string, amount = 1): Request => ({
  params: { name: 'charge', arguments: { amount }, idempotencyKey: key },
});

describe('the wrapped tools/call entry', () => {
  it('executes a keyed call once, and replays it to the retry without reaching the dispatch', async () => {
    const { server, dispatched, entry } = sdkServer();
    guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() });
    const first = await entry('tools/call')(keyed('k-1'), ctx());
    const retry = await entry('tools/call')(keyed('k-1'), ctx());
    expect(retry).toStrictEqual(first);
    expect(dispatched).toHaveLength(1);
  });

  it("hands the SDK's dispatch the request and context exactly as they came, key included", async () => {
    const { server, dispatched, entry } = sdkServer();
    guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() });
    const request = keyed('k-2');
    const context = ctx();
    await entry('tools/call')(request, context);
    expect(dispatched[0]?.request).toBe(request);
    expect(dispatched[0]?.ctx).toBe(context);
  });

  it('passes a call without params through, unguarded, as a call without a key', async () => {
    const { server, dispatched, entry } = sdkServer();
    guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() });
    await entry('tools/call')({}, ctx());
    await entry('tools/call')({}, ctx());
    expect(dispatched).toHaveLength(2);
  });

  it("leaves every other method's entry as it was", () => {
    const { server, toolsList, entry } = sdkServer();
    guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() });
    expect(entry('tools/list')).toBe(toolsList);
  });

  it('scopes each record to the caller the adapter reads from the context', async () => {
    const { server, dispatched, entry } = sdkServer();
    guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() });
    await entry('tools/call')(keyed('k-3'), ctx('alice'));
    await entry('tools/call')(keyed('k-3'), ctx('bob'));
    await entry('tools/call')(keyed('k-3'), ctx('alice'));
    expect(dispatched.map((d) => d.ctx.caller)).toStrictEqual(['alice', 'bob']);
  });

  it('judges the params the adapter reads, when it says where they are', async () => {
    const { server, dispatched, entry } = sdkServer();
    const fromTheSide: EntryReader<Ctx> = {
      ...reader,
      paramsOf: (params, c) => ({ ...params, idempotencyKey: c.keyOnTheSide }),
    };
    guardToolsCallEntry(server, fromTheSide, { store: new MemoryIdempotencyStore() });
    const call = { params: { name: 'charge', arguments: { amount: 1 } } };
    await entry('tools/call')(call, { ...ctx(), keyOnTheSide: 'k-4' });
    await entry('tools/call')(call, { ...ctx(), keyOnTheSide: 'k-4' });
    expect(dispatched).toHaveLength(1);
  });

  it("answers a key reused with other arguments with the SEP's conflict, the dispatch untouched", async () => {
    const { server, dispatched, entry } = sdkServer();
    guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() });
    await entry('tools/call')(keyed('k-5', 1), ctx());
    await expect(entry('tools/call')(keyed('k-5', 2), ctx())).rejects.toMatchObject({
      code: -32602,
      data: { type: 'idempotency_key_conflict', idempotencyKey: 'k-5' },
    });
    expect(dispatched).toHaveLength(1);
  });
});

describe('installing on an SDK that no longer looks as expected', () => {
  it('refuses a server whose handlers are kept some other way than a Map, naming where it looked', () => {
    const server = { _requestHandlers: { 'tools/call': async () => ({}) } };
    expect(() => guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore() })).toThrow(
      /Protocol\._requestHandlers.*refusing to start without deduplication/,
    );
  });

  it('refuses options that cannot work, and leaves the entry unwrapped rather than half-installed', () => {
    const { server, entry } = sdkServer();
    const before = entry('tools/call');
    expect(() =>
      guardToolsCallEntry(server, reader, { store: new MemoryIdempotencyStore(), leaseMs: 0 }),
    ).toThrow(/leaseMs must be a positive number/);
    expect(entry('tools/call')).toBe(before);
  });
});
