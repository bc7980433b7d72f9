// The HTTP entry's own defences, against real server processes and real sockets: what a request
// must name to be served (Host and Origin), how long an upload may take and how many connections
// may be open at once, and who may reset every caller's records.

import { randomUUID } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { IdempotencyErrorType, MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allowedHostsOf, type RunningHttpServer, startHttpServer } from '../../../demo/hosting/http.js';
import { type HttpInstance, startHttpInstance } from '../../../demo/processes/launch.js';
import { MemoryLedger } from '../../../ledger.js';
import { createDemoServer } from '../../../server.js';
import { postRaw } from '../../support/hostile.js';
import { postAs } from '../../support/http.js';

const toolsCall = (params: Record<string, unknown>) =>
  JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params });
const charge = () =>
  toolsCall({ name: 'charge_guarded', arguments: { amount: 5 }, idempotencyKey: randomUUID() });

/**
 * A POST over a bare socket, its header lines as given (node:http would refuse two Hosts): the
 * whole answer, once the server closes the connection.
 */
function exchange(url: URL, headerLines: readonly string[], body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    const received: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(received).toString('utf8')));
    socket.on('connect', () =>
      socket.end(
        [
          'POST /mcp HTTP/1.1',
          ...headerLines,
          'Accept: application/json, text/event-stream',
          `Content-Length: ${Buffer.byteLength(body)}`,
          'Connection: close',
          '',
          body,
        ].join('\r\n'),
      ),
    );
  });
}

async function balanceAt(url: URL, headers: Record<string, string> = {}): Promise<number> {
  const { text } = await postRaw(url, toolsCall({ name: 'get_balance', arguments: {} }), headers);
  const balance: unknown = JSON.parse(text).result?.structuredContent?.balance;
  if (typeof balance !== 'number') throw new Error(`no balance in ${text}`);
  return balance;
}

describe('DNS-rebinding protection: the Host and Origin a request names', () => {
  let server: HttpInstance;
  let self: string;
  beforeAll(async () => {
    server = await startHttpInstance(['--host', '127.0.0.2']);
    self = server.url.host;
  });
  afterAll(() => server?.stop());

  it('refuses a rebound name, its page as the Origin, on a loopback address the SDK does not know: 403, nothing charged', async () => {
    const before = await balanceAt(server.url);
    const port = server.url.port;
    const status = await postAs(server.url, charge(), {
      host: `attacker.example:${port}`,
      origin: `http://attacker.example:${port}`,
    });
    expect(status).toBe(403);
    expect(await balanceAt(server.url)).toBe(before);
  });

  it('refuses a page of another origin posting to this server by its own name: 403, nothing charged', async () => {
    const before = await balanceAt(server.url);
    const status = await postAs(server.url, charge(), { host: self, origin: 'https://attacker.example' });
    expect(status).toBe(403);
    expect(await balanceAt(server.url)).toBe(before);
  });

  it('serves a client that sends no Origin, a page of its own origin, and the loopback names', async () => {
    const before = await balanceAt(server.url);
    expect(await postAs(server.url, charge(), { host: self })).toBe(200);
    expect(await postAs(server.url, charge(), { host: self, origin: `http://${self}` })).toBe(200);
    const localhost = `localhost:${server.url.port}`;
    expect(await postAs(server.url, charge(), { host: localhost, origin: `http://${localhost}` })).toBe(200);
    expect(await balanceAt(server.url)).toBe(before + 15);
  });

  it.each([
    ['a Host with userinfo', (self: string) => [`Host: evil.example@${self}`]],
    ['a Host with a path', (self: string) => [`Host: ${self}/mcp`]],
    ['two Host headers', (self: string) => [`Host: ${self}`, `Host: ${self}`]],
    [
      'two Host headers naming different hosts',
      (self: string) => [`Host: ${self}`, 'Host: attacker.example'],
    ],
  ])('answers %s 400 before any dispatch: nothing charged', async (_, hostLines) => {
    const before = await balanceAt(server.url);
    const answer = await exchange(
      server.url,
      [...hostLines(self), 'Content-Type: application/json'],
      charge(),
    );
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(await balanceAt(server.url)).toBe(before);
  });

  it.each([
    ['127.0.0.2', ['127.0.0.2', 'localhost', '127.0.0.1', '[::1]']],
    ['::1', ['[::1]', 'localhost', '127.0.0.1']],
    ['10.1.2.3', ['10.1.2.3']],
    ['0.0.0.0', undefined],
    ['::', undefined],
  ])('a server bound to %s answers to %j', (host, names) => {
    expect(allowedHostsOf(host)).toStrictEqual(names);
  });
});

describe('--allowed-hosts: the names a server behind a DNS name answers to', () => {
  let server: HttpInstance;
  beforeAll(async () => {
    server = await startHttpInstance(['--allowed-hosts', 'MCP.example.test,[::1]']);
  });
  afterAll(() => server?.stop());

  it('serves the names given, and refuses the ones --host alone would have allowed: 403, nothing executed', async () => {
    const named = `mcp.example.test:${server.url.port}`;
    expect(await postAs(server.url, charge(), { host: named, origin: `https://${named}` })).toBe(200);
    expect(await postAs(server.url, charge(), { host: `[::1]:${server.url.port}` })).toBe(200);
    expect(await postAs(server.url, charge(), { host: server.url.host })).toBe(403);
    expect(await postAs(server.url, charge(), { host: named, origin: 'https://attacker.example' })).toBe(403);
    // The decision log: fetch, which the balance is read with, cannot send another Host.
    expect((await server.decisions()).map((line) => line.decision)).toStrictEqual(['executed', 'executed']);
  });
});

// --- Slow uploads: bounded in time, and in number at once ---

/** A connection that sends headers promising a body, part of it, then stalls; `closed` has what it was answered. */
function stallingUpload(
  url: URL,
  sent: number,
  promised: number,
): { socket: Socket; closed: Promise<string> } {
  const socket = connect(Number(url.port), url.hostname);
  const received: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => received.push(chunk));
  socket.on('error', () => {}); // a reset is one way of being closed
  const closed = new Promise<string>((resolve) =>
    socket.on('close', () => resolve(Buffer.concat(received).toString('latin1'))),
  );
  socket.on('connect', () => {
    socket.write(
      `POST /mcp HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nContent-Length: ${promised}\r\n\r\n`,
    );
    socket.write(Buffer.alloc(sent, 0x20));
  });
  return { socket, closed };
}

/** Resolves with `promise`'s value, or rejects after `ms`: a connection left open fails the test, it does not hang it. */
async function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still open after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

describe('slow uploads, with no tokens to keep strangers out', () => {
  const SLOTS = 4;
  const MiB = 1024 * 1024;
  let server: RunningHttpServer;
  const ledger = new MemoryLedger();
  beforeAll(async () => {
    const store = new MemoryIdempotencyStore();
    server = await startHttpServer({
      host: '127.0.0.1',
      port: 0,
      createServer: () => createDemoServer({ ledger, store }),
      requestTimeoutMs: 1_000,
      maxConnections: SLOTS,
    });
  });
  afterAll(() => server?.close());

  it('closes each upload still unfinished past the request timeout (408), turns away connections past the cap, and goes on serving', async () => {
    const uploads = Array.from({ length: SLOTS }, () => stallingUpload(server.url, MiB, 4 * MiB - 1));
    await Promise.all(uploads.map(({ socket }) => new Promise((resolve) => socket.once('connect', resolve))));
    // Let the server accept the four before the fifth arrives (same process, same event loop).
    await new Promise((resolve) => setTimeout(resolve, 500));
    const extra = stallingUpload(server.url, 0, 100);

    // Generous bounds: what is tested is that they close at all, not how fast.
    expect(await within(10_000, extra.closed, 'a connection past the cap')).toBe('');
    const answers = await within(20_000, Promise.all(uploads.map((u) => u.closed)), 'a stalled upload');
    for (const answer of answers) expect(answer).toMatch(/^HTTP\/1\.1 408 /);

    const key = randomUUID();
    const { status } = await postRaw(
      server.url,
      toolsCall({ name: 'charge_guarded', arguments: { amount: 7 }, idempotencyKey: key }),
    );
    expect(status).toBe(200);
    expect(await ledger.balance()).toBe(7);
  }, 40_000);
});

// --- reset_ledger: an operator's, never any caller's ---

describe('reset_ledger, which forgets every caller’s records', () => {
  const CHARGE_LATENCY_MS = 3_000;
  let server: HttpInstance;
  beforeAll(async () => {
    // bob and alice name no scopes; ops is given admin by name.
    server = await startHttpInstance(['--charge-latency-ms', String(CHARGE_LATENCY_MS)], {
      DEMO_BEARER_TOKENS: 'alice:token-a,bob:token-b,ops:token-o:admin',
    });
  });
  afterAll(() => server?.stop());

  const as = (token: string) => ({ authorization: `Bearer ${token}` });

  it('is refused to a caller whose token names no scopes, so another caller’s running charge is not executed twice', async () => {
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const before = await balanceAt(server.url, as('token-b'));
    const running = postRaw(server.url, toolsCall(params), as('token-b'));
    running.catch(() => {}); // awaited below; a failed assertion before then must not leave it unhandled
    await new Promise((resolve) => setTimeout(resolve, 300)); // for it to reach the server first
    // bob's retry meets his charge in progress: it is running now.
    const meanwhile = await postRaw(server.url, toolsCall(params), as('token-b'));
    expect(JSON.parse(meanwhile.text).error?.data?.type).toBe(IdempotencyErrorType.inProgress);

    const reset = await postAs(server.url, toolsCall({ name: 'reset_ledger', arguments: {} }), as('token-a'));
    expect(reset).toBe(403);

    const first = await running;
    const retry = await postRaw(server.url, toolsCall(params), as('token-b'));
    expect(retry.text).toBe(first.text);
    const decided = (await server.decisions()).filter((d) => d.idempotencyKey === params.idempotencyKey);
    expect(decided.filter((d) => d.decision === 'executed')).toHaveLength(1);
    expect(await balanceAt(server.url, as('token-b'))).toBe(before + 100);
  }, 30_000);

  it('is the operator’s, whose token names admin', async () => {
    expect(await postAs(server.url, toolsCall({ name: 'reset_ledger', arguments: {} }), as('token-o'))).toBe(
      200,
    );
    expect(await balanceAt(server.url, as('token-a'))).toBe(0);
  });
});
