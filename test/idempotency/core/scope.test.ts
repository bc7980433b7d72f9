// Whose records are whose (SEP-3182: records MUST be scoped to the authorization boundary that
// governs the call). Over HTTP that boundary is the principal: the subject of the verified token,
// which the server's verifier puts in `authInfo.extra.sub`. Never the token's `clientId`: that
// names the OAuth client application, and every user of one app shares it.

import { type CallToolResult, Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type AuthInfo, createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import {
  IdempotencyErrorType,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
  principalScope,
  providerKey,
} from 'mcp-request-idempotency';
import { callTool, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { installIdempotencyGuard } from 'mcp-request-idempotency/sdk-v2';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';

/** One app's client ID, as with Client ID Metadata Documents: a URL every user of the app shares. */
const APP = 'https://agent.example/client-metadata.json';

const tokenOf = (sub: string | undefined, iss?: string): AuthInfo => ({
  token: `token-of-${sub ?? 'nobody'}${iss === undefined ? '' : `-at-${iss}`}`,
  clientId: APP,
  scopes: ['charge'],
  ...(sub !== undefined && { extra: { sub, ...(iss !== undefined && { iss }) } }),
});

interface Server {
  executions: string[];
  /** A client whose every request carries `authInfo`, as a bearer middleware would hand it on. */
  connect(authInfo: AuthInfo): Promise<Client>;
}

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A guarded server over the SDK's HTTP entry: `statement` answers whose statement was read, with its provider key. */
function startServer(store = new MemoryIdempotencyStore()): Server {
  const executions: string[] = [];
  const handler = createMcpHandler(() => {
    const mcp = new McpServer({ name: 'principals', version: '0' });
    mcp.registerTool('statement', { inputSchema: z.object({ month: z.string() }) }, ({ month }, ctx) => {
      const { sub, iss } = ctx.http?.authInfo?.extra ?? {};
      executions.push(String(sub));
      const text = JSON.stringify({ owner: sub, issuer: iss, month, providerKey: providerKey('statement') });
      return { content: [{ type: 'text', text }] };
    });
    installIdempotencyGuard(mcp, { store });
    return mcp;
  });
  closers.push(() => handler.close());
  return {
    executions,
    async connect(authInfo) {
      const client = new Client(
        { name: 'principals-test', version: '0' },
        { versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } } },
      );
      const fetch = (url: string | URL, init?: RequestInit) =>
        handler.fetch(new Request(url, init), { authInfo });
      await client.connect(new StreamableHTTPClientTransport(new URL('http://in-process/mcp'), { fetch }));
      closers.push(() => client.close());
      return client;
    },
  };
}

const textOf = (result: CallToolResult) => {
  const [first] = result.content;
  return first?.type === 'text' ? JSON.parse(first.text) : undefined;
};

const statement = { name: 'statement', arguments: { month: '2026-11' }, idempotencyKey: 'statement-2026-11' };

describe('two users of one client app', () => {
  it('each execute once under the same key, and each replay their own response, never the other’s', async () => {
    const server = startServer();
    const alice = await server.connect(tokenOf('alice'));
    const bob = await server.connect(tokenOf('bob'));

    const alicesFirst = await callTool(alice, statement);
    const bobsFirst = await callTool(bob, statement);
    expect(textOf(alicesFirst).owner).toBe('alice');
    expect(textOf(bobsFirst).owner).toBe('bob');
    expect(await callTool(alice, statement)).toEqual(alicesFirst);
    expect(await callTool(bob, statement)).toEqual(bobsFirst);
    expect(server.executions).toEqual(['alice', 'bob']);
  });

  it('send their provider two different keys for the same MCP key', async () => {
    const server = startServer();
    const alices = textOf(await callTool(await server.connect(tokenOf('alice')), statement));
    const bobs = textOf(await callTool(await server.connect(tokenOf('bob')), statement));
    expect(alices.providerKey).not.toBe(bobs.providerKey);
  });

  it('each have a quota of their own', async () => {
    const server = startServer(new MemoryIdempotencyStore({ maxRecordsPerScope: 1 }));
    const alice = await server.connect(tokenOf('alice'));
    const bob = await server.connect(tokenOf('bob'));
    await callTool(alice, statement);
    await expect(callTool(alice, { ...statement, idempotencyKey: 'another' })).rejects.toMatchObject({
      data: { type: IdempotencyErrorType.quotaExceeded },
    });
    expect(textOf(await callTool(bob, { ...statement, idempotencyKey: 'another' })).owner).toBe('bob');
  });
});

describe('two authorization servers, each with a user of one subject', () => {
  const [WORKFORCE, PARTNERS] = ['https://login.example.com', 'https://partners.example.net'];

  it('keeps them apart: each executes once under the same key, and replays its own response', async () => {
    const server = startServer();
    const staff = await server.connect(tokenOf('alice', WORKFORCE));
    const partner = await server.connect(tokenOf('alice', PARTNERS));

    const staffFirst = await callTool(staff, statement);
    const partnerFirst = await callTool(partner, statement);
    expect([textOf(staffFirst).issuer, textOf(partnerFirst).issuer]).toStrictEqual([WORKFORCE, PARTNERS]);
    expect(await callTool(staff, statement)).toEqual(staffFirst);
    expect(await callTool(partner, statement)).toEqual(partnerFirst);
    expect(server.executions).toEqual(['alice', 'alice']);
    expect(textOf(staffFirst).providerKey).not.toBe(textOf(partnerFirst).providerKey);
  });

  it('scopes by issuer and subject, in a form no other pair and no token without an issuer can take', () => {
    const scopeOf = (sub: string, iss?: string) => principalScope({ authInfo: tokenOf(sub, iss) });
    expect(scopeOf('alice', WORKFORCE)).toBe(`issuer-principal:["${WORKFORCE}","alice"]`);
    expect(scopeOf('b","c', 'a')).not.toBe(scopeOf('c', 'a","b'));
    expect(scopeOf(`["${WORKFORCE}","alice"]`)).not.toBe(scopeOf('alice', WORKFORCE));
  });

  it('leaves a token without an issuer in the scope it always had: its records replay as before', async () => {
    const store = new MemoryIdempotencyStore();
    const server = startServer(store);
    const alice = await server.connect(tokenOf('alice'));
    const first = await callTool(alice, statement);
    expect(principalScope({ authInfo: tokenOf('alice') })).toBe('principal:alice');
    // The record is under `principal:alice`, where a version that scoped by subject alone put it.
    const held = await store.claim(
      { scope: 'principal:alice', idempotencyKey: statement.idempotencyKey },
      '',
      1_000,
    );
    expect(held.state).toBe('completed');
    expect(await callTool(alice, statement)).toEqual(first);
    expect(server.executions).toEqual(['alice']);
  });
});

describe('a verified token whose principal the server did not say', () => {
  it('has its keyed call refused, nothing executed, rather than put in a scope shared with others', async () => {
    const server = startServer();
    const nobody = await server.connect(tokenOf(undefined));
    const error = await callTool(nobody, statement).catch((caught: unknown) => caught);
    expect(idempotencyErrorOf(error)).toEqual({
      code: -32603,
      type: IdempotencyErrorType.scopeUnknown,
      idempotencyKey: statement.idempotencyKey,
    });
    expect(server.executions).toEqual([]);
  });

  it('still executes its calls without a key, exactly as without the guard', async () => {
    const server = startServer();
    const nobody = await server.connect(tokenOf(undefined));
    const { idempotencyKey: _, ...unkeyed } = statement;
    await callTool(nobody, unkeyed);
    await callTool(nobody, unkeyed);
    expect(server.executions).toHaveLength(2);
  });
});
