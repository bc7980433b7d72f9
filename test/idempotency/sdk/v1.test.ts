// The guard on the v1 SDK line (sdk/v1.ts), installed on a real `@modelcontextprotocol/sdk` 1.x
// server and read over its in-memory transport by a client that writes JSON-RPC by hand: what the
// initialize result declares (v1's own client strips it), the errors exactly as they go on the wire
// (no "MCP error" prefix), the caller's verified token as the record's scope, and the low-level
// `Server` as well as `McpServer`.

import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { CallToolRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { installIdempotencyGuard } from 'mcp-request-idempotency/sdk-v1';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { conflictOnTheWire, RawPeer } from '../raw-peer.js';

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A v1 server with one charging tool, guarded, and a raw 2025-11-25 peer connected to it. */
async function guardedMcpServer() {
  let charges = 0;
  const server = new McpServer({ name: 'payments', version: '0' });
  server.registerTool('charge', { inputSchema: { amount: z.number() } }, ({ amount }) => {
    charges += 1;
    return { content: [{ type: 'text', text: `Charged ${amount} (${charges})` }] };
  });
  installIdempotencyGuard(server, { store: new MemoryIdempotencyStore() });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const { peer, initialize } = await RawPeer.legacy(clientSide);
  closers.push(() => server.close());
  return { peer, initialize, charges: () => charges };
}

const call = (idempotencyKey: string, amount = 100) => ({
  name: 'charge',
  arguments: { amount },
  idempotencyKey,
});
const token = (sub?: string) => ({
  authInfo: { token: `token-${sub}`, clientId: 'c', scopes: [], ...(sub && { extra: { sub } }) },
});

describe('the v1 adapter on McpServer', () => {
  it('declares tools.idempotency, empty, in the initialize result, beside the tools capability McpServer keeps', async () => {
    const { initialize } = await guardedMcpServer();
    expect(initialize).toMatchObject({
      result: { capabilities: { tools: { idempotency: {}, listChanged: true } } },
    });
    const tools = Reflect.get(Object(Reflect.get(Object(initialize.result), 'capabilities')), 'tools');
    expect(Reflect.get(tools, 'idempotency')).toStrictEqual({});
  });

  it('replays a keyed retry, the key read before McpServer strips it, and charges once', async () => {
    const { peer, charges } = await guardedMcpServer();
    const first = await peer.request('tools/call', call('k-1'));
    const retry = await peer.request('tools/call', call('k-1'));
    expect(retry.result).toStrictEqual(first.result);
    expect(charges()).toBe(1);
  });

  it('puts a refusal on the wire exactly as the guard wrote it: no "MCP error -32602:" prefix', async () => {
    const { peer } = await guardedMcpServer();
    await peer.request('tools/call', call('k-2', 1));
    const conflict = await peer.request('tools/call', call('k-2', 2));
    expect(conflict.error).toStrictEqual(conflictOnTheWire('k-2'));
  });

  it("scopes records to the verified token's subject: another caller's same key executes its own call", async () => {
    const { peer, charges } = await guardedMcpServer();
    const alice = await peer.request('tools/call', call('k-3'), token('alice'));
    const bob = await peer.request('tools/call', call('k-3'), token('bob'));
    const aliceAgain = await peer.request('tools/call', call('k-3'), token('alice'));
    expect(charges()).toBe(2);
    expect(aliceAgain.result).toStrictEqual(alice.result);
    expect(bob.result).not.toStrictEqual(alice.result);
  });

  it('refuses a keyed call whose verified token names nobody, -32603, and charges nothing', async () => {
    const { peer, charges } = await guardedMcpServer();
    const refused = await peer.request('tools/call', call('k-4'), token());
    expect(refused.error).toMatchObject({
      code: -32603,
      data: { type: 'idempotency_scope_unknown', idempotencyKey: 'k-4' },
    });
    expect(charges()).toBe(0);
  });
});

describe('the v1 adapter on a low-level Server', () => {
  it('guards the tools/call handler the server set itself, and declares the capability beside its own', async () => {
    let runs = 0;
    const server = new Server(
      { name: 'low-level', version: '0' },
      { capabilities: { tools: { listChanged: false } } },
    );
    server.setRequestHandler(CallToolRequestSchema, () => ({
      content: [{ type: 'text', text: `run ${++runs}` }],
    }));
    installIdempotencyGuard(server, { store: new MemoryIdempotencyStore() });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    closers.push(() => server.close());
    const { peer, initialize } = await RawPeer.legacy(clientSide);
    expect(initialize).toMatchObject({
      result: { capabilities: { tools: { idempotency: {}, listChanged: false } } },
    });
    await peer.request('tools/call', call('k-5'));
    await peer.request('tools/call', call('k-5'));
    expect(runs).toBe(1);
  });
});
