// The guard on the current SDK line (sdk/v2.ts), installed in a real `@modelcontextprotocol/server`
// 2.x factory and served through the SDK's own entry points, in process: `serveStdio` over its
// in-memory transport, read by a client that writes JSON-RPC by hand (the SDK client strips the
// capability), and `createMcpHandler` called as a fetch handler with a verified token. What is proved
// is the adapter's own part: the capability in both eras, the caller read from `ctx.http.authInfo`,
// and a continuation's lifted fields put back before the guard judges the call.

import { InMemoryTransport } from '@modelcontextprotocol/client';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { MemoryIdempotencyStore, Messages } from 'mcp-request-idempotency';
import { installIdempotencyGuard } from 'mcp-request-idempotency/sdk-v2';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MODERN_PROTOCOL_VERSION } from '../../../packages/idempotency/core/protocol.js';
import { conflictOnTheWire, MODERN_ENVELOPE, RawPeer } from '../raw-peer.js';

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A factory of guarded servers with one charging tool, sharing one store, and its charge count. */
function payments() {
  const store = new MemoryIdempotencyStore();
  const charged: number[] = [];
  const factory = () => {
    const mcp = new McpServer({ name: 'payments', version: '0' });
    mcp.registerTool('charge', { inputSchema: z.object({ amount: z.number() }) }, ({ amount }) => {
      charged.push(amount);
      return { content: [{ type: 'text', text: `Charged ${amount} (${charged.length})` }] };
    });
    installIdempotencyGuard(mcp, { store });
    return mcp;
  };
  return { factory, charged };
}

function overStdio(factory: () => McpServer) {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const served = serveStdio(factory, { transport: serverSide });
  closers.push(() => served.close());
  return clientSide;
}

const call = (idempotencyKey: string, amount = 100) => ({
  name: 'charge',
  arguments: { amount },
  idempotencyKey,
});

describe('the capability the v2 adapter declares', () => {
  it('is tools.idempotency, empty, in the 2026-07-28 server/discover answer, beside listChanged', async () => {
    const peer = await RawPeer.modern(overStdio(payments().factory));
    const discover = await peer.request('server/discover', {});
    expect(discover).toMatchObject({
      result: { capabilities: { tools: { listChanged: true, idempotency: {} } } },
    });
  });

  it('is tools.idempotency, empty, in the 2025-11-25 initialize result from the same factory', async () => {
    const { initialize } = await RawPeer.legacy(overStdio(payments().factory));
    expect(initialize).toMatchObject({
      result: { capabilities: { tools: { listChanged: true, idempotency: {} } } },
    });
  });
});

describe('a keyed call through serveStdio', () => {
  it.each(['modern', 'legacy'] as const)(
    'in the %s era, refuses a reused key with the conflict exactly as written',
    async (era) => {
      const { factory, charged } = payments();
      const transport = overStdio(factory);
      const peer =
        era === 'modern' ? await RawPeer.modern(transport) : (await RawPeer.legacy(transport)).peer;
      await peer.request('tools/call', call('k-1', 1));
      const conflict = await peer.request('tools/call', call('k-1', 2));
      expect(conflict.error).toStrictEqual(conflictOnTheWire('k-1'));
      expect(charged).toStrictEqual([1]);
    },
  );

  it('that is a continuation (inputResponses, requestState) under a fresh key is refused, the tool not run', async () => {
    const { factory, charged } = payments();
    const peer = await RawPeer.modern(overStdio(factory));
    const continuation = {
      ...call('k-2'),
      inputResponses: { confirm: { action: 'accept' } },
      requestState: 'sealed',
    };
    const refused = await peer.request('tools/call', continuation);
    expect(refused.error).toMatchObject({
      code: -32602,
      message: Messages.continuationUnopened,
      data: { reason: 'invalid_request_state', idempotencyKey: 'k-2' },
    });
    expect(charged).toStrictEqual([]);
  });
});

describe('a keyed call through createMcpHandler, with a verified token', () => {
  const post = async (
    handler: ReturnType<typeof createMcpHandler>,
    sub: string | undefined,
    id: number,
    key: string,
  ) => {
    const request = new Request('http://localhost/mcp', {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': MODERN_PROTOCOL_VERSION,
        'mcp-method': 'tools/call',
        'mcp-name': 'charge',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { ...call(key), _meta: MODERN_ENVELOPE },
      }),
    });
    const authInfo = { token: `token-${sub}`, clientId: 'c', scopes: [], ...(sub && { extra: { sub } }) };
    const response = await handler.fetch(request, { authInfo });
    return (await response.json()) as Record<string, unknown>;
  };

  it("keeps each subject's records apart: the same key from another subject executes its own call", async () => {
    const { factory, charged } = payments();
    const handler = createMcpHandler(factory);
    const alice = await post(handler, 'alice', 1, 'k-3');
    await post(handler, 'bob', 2, 'k-3');
    const aliceAgain = await post(handler, 'alice', 3, 'k-3');
    expect(charged).toStrictEqual([100, 100]);
    expect(aliceAgain.result).toStrictEqual(alice.result);
  });

  it('refuses a token that names nobody: -32603 idempotency_scope_unknown, nothing charged', async () => {
    const { factory, charged } = payments();
    const refused = await post(createMcpHandler(factory), undefined, 1, 'k-4');
    expect(refused.error).toMatchObject({
      code: -32603,
      data: { type: 'idempotency_scope_unknown', idempotencyKey: 'k-4' },
    });
    expect(charged).toStrictEqual([]);
  });
});
