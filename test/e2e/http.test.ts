// The SEP-3182 cases over stateless Streamable HTTP: the same cases as over stdio, the same
// guard, one server process per connection, a fresh McpServer for every request.

import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ERAS, postModern } from '../../demo/processes/launch.js';
import { jsonRpcText, postMcp } from '../support/hostile.js';
import { connectHttp, serveHttpForSuite, startHttpInstance } from '../support/http.js';
import { describeSepCases } from '../support/sep-cases.js';

for (const era of ERAS) {
  describeSepCases(`stateless Streamable HTTP, ${era} (memory store)`, (args) => connectHttp(args, era), {
    transport: 'http',
  });
}

const ToolResponse = z.object({
  result: z.looseObject({
    structuredContent: z.object({ charged: z.number().optional(), balance: z.number() }),
  }),
});

describe('stateless HTTP without a session', () => {
  const server = serveHttpForSuite();

  const post = (body: unknown) => postMcp(server().url, JSON.stringify(body));

  it('serves a keyed tools/call with no initialize before it, and replays it', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 5 }, idempotencyKey: randomUUID() };
    const first = await post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params });
    const retry = await post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params });
    expect(first.status).toBe(200);
    expect(await jsonRpcText(retry)).toBe(await jsonRpcText(first));
    expect(first.headers.get('mcp-session-id')).toBeNull();
  });

  it('refuses a body over the size limit with 413 and a JSON-RPC error, without buffering it', async () => {
    const response = await post({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { blob: 'x'.repeat(5 * 1024 * 1024) },
    });
    expect(response.status).toBe(413);
    expect(await response.json()).toMatchObject({
      error: { code: -32000, message: 'Payload Too Large: Request body must not exceed 4194304 bytes' },
    });
  });

  it('refuses a request for another Host name (DNS-rebinding protection)', async () => {
    // fetch may not set Host, so this one request goes through node:http.
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
      const req = httpRequest(
        server().url,
        { method: 'POST', headers: { host: 'attacker.example', 'content-type': 'application/json' } },
        (res) => {
          res.resume();
          resolve(res.statusCode);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    expect(status).toBe(403);
  });

  it('answers GET with 405: there is no session stream to open', async () => {
    const response = await fetch(server().url);
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('POST');
  });
});

describe('bearer auth and per-principal scope', () => {
  // alice holds two tokens: token-a may do all a caller may (not admin), token-r may only read.
  const server = serveHttpForSuite([], {
    DEMO_BEARER_TOKENS: 'alice:token-a,alice:token-r:read,bob:token-b',
  });

  const call = (token: string | undefined, params: Record<string, unknown>) =>
    postMcp(
      server().url,
      JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
      token ? { authorization: `Bearer ${token}` } : {},
    );
  const resultOf = async (response: Promise<Response>) =>
    ToolResponse.parse(JSON.parse(await jsonRpcText(await response))).result;
  const balance = async (token: string) =>
    (await resultOf(call(token, { name: 'get_balance', arguments: {} }))).structuredContent.balance;

  it('refuses a request with no token, or an unknown one, with 401, and runs nothing', async () => {
    const before = await balance('token-a');
    const charge = { name: 'charge_unguarded', arguments: { amount: 1 } };
    const missing = await call(undefined, charge);
    const unknown = await call('token-z', charge);
    expect(missing.status).toBe(401);
    expect(unknown.status).toBe(401);
    expect(missing.headers.get('www-authenticate')).toMatch(/^Bearer error="invalid_token"/);
    expect(await balance('token-a')).toBe(before);
  });

  it('gives bob his own execution under alice’s key: no replay of her result, no conflict', async () => {
    const key = randomUUID();
    const before = await balance('token-a');
    const alice = await resultOf(
      call('token-a', { name: 'charge_guarded', arguments: { amount: 10 }, idempotencyKey: key }),
    );
    const bob = await resultOf(
      call('token-b', { name: 'charge_guarded', arguments: { amount: 99 }, idempotencyKey: key }),
    );
    const aliceAgain = await resultOf(
      call('token-a', { name: 'charge_guarded', arguments: { amount: 10 }, idempotencyKey: key }),
    );
    expect(alice.structuredContent).toStrictEqual({ charged: 10, balance: before + 10 });
    expect(bob.structuredContent).toStrictEqual({ charged: 99, balance: before + 109 });
    expect(aliceAgain).toStrictEqual(alice);
    expect(await balance('token-b')).toBe(before + 109);
  });

  // SEP: "A replayed response MUST still be subject to whatever authorization check would
  // ordinarily govern access to it." The scope check runs before the guard, in both eras.
  const send = {
    '2025-11-25': (token: string, params: Record<string, unknown>) => call(token, params),
    '2026-07-28': (token: string, params: Record<string, unknown>) =>
      postModern(server().url, { id: 1, method: 'tools/call', params }, undefined, {
        authorization: `Bearer ${token}`,
      }),
  };
  describe.each(ERAS)('authorization at replay time, %s', (era) => {
    it('refuses alice’s retry with her read-only token: 403 insufficient_scope, not replayed, nothing executed', async () => {
      const params = { name: 'charge_guarded', arguments: { amount: 10 }, idempotencyKey: randomUUID() };
      const before = await balance('token-a');
      const charged = await send[era]('token-a', params);
      expect(charged.status).toBe(200);
      const retry = await send[era]('token-r', params);
      expect(retry.status).toBe(403);
      expect(retry.headers.get('www-authenticate')).toMatch(
        /^Bearer error="insufficient_scope".*scope="charge"/,
      );
      expect(await retry.text()).not.toContain('Charged');
      expect(await balance('token-r')).toBe(before + 10);
      const decided = (await server().decisions()).filter((d) => d.idempotencyKey === params.idempotencyKey);
      expect(decided.map((d) => d.decision)).toStrictEqual(['executed']);
      // The token that may charge still gets the stored response.
      expect(JSON.parse(await jsonRpcText(await send[era]('token-a', params)))).toMatchObject({
        result: { structuredContent: { charged: 10, balance: before + 10 } },
      });
    });

    it('refuses a first execution with that token the same way, and lets it read', async () => {
      const params = { name: 'charge_guarded', arguments: { amount: 1 }, idempotencyKey: randomUUID() };
      const before = await balance('token-r');
      const refused = await send[era]('token-r', params);
      expect(refused.status).toBe(403);
      expect(await balance('token-r')).toBe(before);
      expect(
        (await server().decisions()).filter((d) => d.idempotencyKey === params.idempotencyKey),
      ).toStrictEqual([]);
    });
  });

  it('logs each decision under the principal’s scope', async () => {
    const key = randomUUID();
    await call('token-b', { name: 'get_balance', arguments: {}, idempotencyKey: key });
    const logged = (await server().decisions()).filter((d) => d.idempotencyKey === key);
    expect(logged.map((d) => [d.decision, d.scope])).toStrictEqual([['executed', 'principal:bob']]);
  });
});

describe('a read-only token and its principal’s quota', () => {
  const server = serveHttpForSuite(['--max-records-per-caller', '3'], {
    DEMO_BEARER_TOKENS: 'alice:token-a,alice:token-r:read',
  });

  const keyed = async (token: string, name: string, args: Record<string, unknown>) => {
    const params = { name, arguments: args, idempotencyKey: randomUUID() };
    const response = await postModern(server().url, { id: 1, method: 'tools/call', params }, undefined, {
      authorization: `Bearer ${token}`,
    });
    return jsonRpcText(response);
  };

  it('has a quota of its own: its keyed reads cannot use up the records alice’s charges need', async () => {
    for (let i = 0; i < 3; i++) expect(await keyed('token-r', 'get_balance', {})).toContain('"balance"');
    expect(await keyed('token-r', 'get_balance', {})).toContain('idempotency_quota_exceeded');
    expect(await keyed('token-a', 'charge_guarded', { amount: 5 })).toContain('"charged":5');
  });
});

describe('DEMO_BEARER_TOKENS', () => {
  it.each([
    [
      'a token without a principal',
      ':token-a',
      /entries are principal:token or principal:token:scope\+scope, got ":token-a"/,
    ],
    ['an empty scope list', 'alice:token-a:', /entries are principal:token/],
    [
      'a scope the demo does not know',
      'alice:token-a:pay',
      /names the scope "pay"; the scopes are charge, refund, read, admin/,
    ],
    ['one token given twice', 'alice:t,bob:t', /gives the token of "bob:t" twice/],
  ])('refuses to start on %s, saying what is wrong', async (_, tokens, message) => {
    const started = startHttpInstance([], { DEMO_BEARER_TOKENS: tokens });
    await expect(started).rejects.toThrow(message);
  });
});
