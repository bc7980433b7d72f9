// Raw JSON-RPC to the server under test (packages/checker/wire.ts), against tiny servers on
// loopback in this process: the era is found by `server/discover` or, failing that, initialize;
// the checker's own bytes go out untouched behind the 2026-07-28 envelope and its routing headers;
// an answer is found in JSON or in an SSE stream that stays open, never taken from a request that
// reuses its id; an HTTP refusal of a call is an answer, any other failure is loud and names the
// request; and a command line is split, and a server's exit explained, as a person would.

import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  connect,
  LEGACY_PROTOCOL_VERSION,
  MODERN_PROTOCOL_VERSION,
  splitCommandLine,
  whyItExited,
} from '../../packages/checker/wire.js';

interface Seen {
  body: string;
  message: { id?: number; method: string; params?: Record<string, unknown> };
  headers: IncomingHttpHeaders;
}

const servers: ReturnType<typeof createServer>[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
});

/** A server on 127.0.0.1 that hands each POST to `answer`, and remembers what it was sent. */
async function serve(answer: (seen: Seen, res: ServerResponse) => void) {
  const seen: Seen[] = [];
  const read = async (req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    const request: Seen = { body, message: JSON.parse(body), headers: req.headers };
    seen.push(request);
    answer(request, res);
  };
  // A request cut off as the test ends (the client gone, the connections closed) ends its
  // connection; a rejection left unheard would fail the whole run, whichever test was running.
  const server = createServer((req, res) => void read(req, res).catch(() => res.destroy()));
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const target = { kind: 'http' as const, url: new URL(`http://127.0.0.1:${port}/mcp`), headers: {} };
  return { seen, target };
}

const json = (res: ServerResponse, message: unknown, headers: Record<string, string> = {}) =>
  res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(message));

/** A 2026-07-28 server: discover answers with the capability; a call answers with what it was sent. */
const modern = ({ message }: Seen, res: ServerResponse) =>
  message.method === 'server/discover'
    ? json(res, { jsonrpc: '2.0', id: message.id, result: { capabilities: { tools: { idempotency: {} } } } })
    : json(res, { jsonrpc: '2.0', id: message.id, result: { content: [] } });

/** A 2025-11-25 server: no discover, a session from initialize on. */
const legacy = ({ message }: Seen, res: ServerResponse) => {
  if (message.method === 'server/discover')
    return json(res, {
      jsonrpc: '2.0',
      id: message.id,
      error: { code: -32601, message: 'Method not found' },
    });
  if (message.id === undefined) return res.writeHead(202).end();
  const result = message.method === 'initialize' ? { capabilities: { tools: {} } } : { content: [] };
  json(res, { jsonrpc: '2.0', id: message.id, result }, { 'mcp-session-id': 'S-1' });
};

const options = { era: 'auto', timeoutMs: 2_000 } as const;

describe('the era', () => {
  it('is 2026-07-28 when server/discover answers, its capabilities read as the server sent them', async () => {
    const { seen, target } = await serve(modern);
    const peer = await connect(target, options);
    expect([peer.era, peer.discoveredBy]).toStrictEqual([MODERN_PROTOCOL_VERSION, 'server/discover']);
    expect(peer.capabilities).toStrictEqual({ tools: { idempotency: {} } });
    expect(seen.map((s) => s.message.method)).toStrictEqual(['server/discover']);
  });

  it('falls back to initialize, then notifications/initialized, when server/discover is refused', async () => {
    const { seen, target } = await serve(legacy);
    const peer = await connect(target, options);
    expect([peer.era, peer.discoveredBy]).toStrictEqual([LEGACY_PROTOCOL_VERSION, 'initialize']);
    expect(peer.capabilities).toStrictEqual({ tools: {} });
    expect(seen.map((s) => s.message.method)).toStrictEqual([
      'server/discover',
      'initialize',
      'notifications/initialized',
    ]);
  });

  it('asked for as 2026-07-28 is refused loudly when server/discover fails', async () => {
    const { target } = await serve(legacy);
    await expect(connect(target, { ...options, era: MODERN_PROTOCOL_VERSION })).rejects.toThrow(
      /^server\/discover failed: .*Method not found/,
    );
  });

  it('asked for as 2025-11-25 never sends server/discover', async () => {
    const { seen, target } = await serve(legacy);
    await connect(target, { ...options, era: LEGACY_PROTOCOL_VERSION });
    expect(seen[0]?.message.method).toBe('initialize');
  });
});

describe("the checker's bytes", () => {
  const params = '{"name":"charge","arguments":{ "b" : 1.0 , "a":"caf\\u00e9" },"idempotencyKey":"K"}';

  it('go out untouched behind the 2026-07-28 envelope, with the routing headers that mirror them', async () => {
    const { seen, target } = await serve(modern);
    const peer = await connect(target, options);
    await peer.request('tools/call', params, 'charge');
    const call = seen.at(-1);
    expect(call?.body.endsWith(`,${params.slice(1)}}`)).toBe(true);
    expect(call?.message.params?._meta).toMatchObject({
      'io.modelcontextprotocol/protocolVersion': MODERN_PROTOCOL_VERSION,
    });
    expect(call?.headers).toMatchObject({
      'mcp-protocol-version': MODERN_PROTOCOL_VERSION,
      'mcp-method': 'tools/call',
      'mcp-name': 'charge',
    });
  });

  it('go out as written in 2025-11-25, with the negotiated version and the session the server gave', async () => {
    const { seen, target } = await serve(legacy);
    const peer = await connect(target, options);
    await peer.request('tools/call', params, 'charge');
    const call = seen.at(-1);
    expect(call?.body).toBe(
      `{"jsonrpc":"2.0","id":${call?.message.id},"method":"tools/call","params":${params}}`,
    );
    expect(call?.headers).toMatchObject({
      'mcp-protocol-version': LEGACY_PROTOCOL_VERSION,
      'mcp-session-id': 'S-1',
    });
  });
});

describe('an answer', () => {
  it('is found in an SSE stream that stays open, past a request of the server that reuses its id', async () => {
    const { target } = await serve((request, res) => {
      if (request.message.method !== 'tools/call') return modern(request, res);
      const { id } = request.message;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' })}\n\n`);
      res.write('data: {"jsonrpc":"2.0",\r\ndata: "id":');
      res.write(`${id},"result":{"content":[{"type":"text","text":"done"}]}}\r\n\r\n`);
      // The stream is never ended.
    });
    const peer = await connect(target, options);
    const answer = await peer.request('tools/call', '{"name":"t"}', 't');
    expect(answer.message.result).toStrictEqual({ content: [{ type: 'text', text: 'done' }] });
    expect(answer.http?.status).toBe(200);
  });

  it('to a call refused by HTTP auth is the refusal, with its challenge', async () => {
    const { target } = await serve((request, res) =>
      request.message.method === 'tools/call'
        ? res.writeHead(403, { 'www-authenticate': 'Bearer error="insufficient_scope"' }).end('forbidden')
        : modern(request, res),
    );
    const peer = await connect(target, options);
    const answer = await peer.request('tools/call', '{"name":"t"}', 't');
    expect(answer).toMatchObject({
      text: 'forbidden',
      message: {},
      http: { status: 403, challenge: 'Bearer error="insufficient_scope"' },
    });
  });

  it('missing from any other HTTP response fails loudly, with the status and what came instead', async () => {
    const { target } = await serve((request, res) =>
      request.message.method === 'tools/list'
        ? res.writeHead(500).end('database down')
        : modern(request, res),
    );
    const peer = await connect(target, options);
    await expect(peer.request('tools/list', '{}')).rejects.toThrow(
      /^HTTP 500 without an answer to request \d+: database down$/,
    );
  });

  it('that never comes fails after the timeout, naming the request and its tool', async () => {
    const { target } = await serve((request, res) =>
      request.message.method === 'tools/call' ? undefined : modern(request, res),
    );
    const peer = await connect(target, { era: 'auto', timeoutMs: 300 });
    await expect(peer.request('tools/call', '{"name":"slow"}', 'slow')).rejects.toThrow(
      /^no answer to request \d+ \(tools\/call slow\) within 300 ms$/,
    );
  });
});

describe('a command line', () => {
  const word = fc.stringMatching(/^[^\s"']+$/);

  it('is split on spaces, a quoted word kept whole without its quotes', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            word,
            word.map((w) => `${w} ${w}`),
          ),
          { minLength: 1 },
        ),
        (words) => {
          const line = words.map((w, i) => (w.includes(' ') ? (i % 2 ? `'${w}'` : `"${w}"`) : w)).join('  ');
          expect(splitCommandLine(line)).toStrictEqual(words);
        },
      ),
    );
  });
});

describe('why a server exited', () => {
  it('is the error line its runtime printed, else its last five lines', () => {
    const trace = [
      'node:internal/modules',
      "Error: Cannot find module '/x.js'",
      '    at Module._resolve',
      'Node.js v24',
    ];
    expect(whyItExited(trace)).toBe(": Error: Cannot find module '/x.js'");
    expect(whyItExited(['Traceback', "ModuleNotFoundError: No module named 'mcp'"])).toBe(
      ": ModuleNotFoundError: No module named 'mcp'",
    );
    expect(whyItExited(['1', '2', '3', '4', '5', '6'])).toBe(': 2\n3\n4\n5\n6');
    expect(whyItExited([])).toBe('');
  });

  it('is told when a stdio server exits before answering', async () => {
    const script =
      "console.error('starting'); console.error('Error: no database configured'); process.exit(3)";
    const target = { kind: 'stdio' as const, command: process.execPath, args: ['-e', script] };
    await expect(connect(target, { era: 'auto', timeoutMs: 10_000 })).rejects.toThrow(
      'the server exited (3): Error: no database configured',
    );
  });
});
