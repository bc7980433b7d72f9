// The Origin a browser's request carries (the MCP transport: servers MUST validate Origin), held
// to the server's own origin: scheme, host and port. A page of another port on the same host is
// another origin, another program (a dev server, a local app's UI), and may not post to this one.

import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningHttpServer, startHttpServer } from '../../demo/hosting/http.js';
import { MemoryLedger } from '../../ledger.js';
import { createDemoServer } from '../../server.js';
import { postAs } from '../support/http.js';

/** A charge of 5 as node:http posts it, with whatever Host and Origin it is given: its status. */
function chargeAs(url: URL, headers: Record<string, string>): Promise<number | undefined> {
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'charge_guarded', arguments: { amount: 5 }, idempotencyKey: randomUUID() },
  });
  // The 2025 transport: its requests name the protocol version in a header.
  return postAs(url, body, { 'mcp-protocol-version': '2025-11-25', ...headers });
}

describe.each([
  ['bound to a loopback address (its names known)', '127.0.0.1'],
  ['bound to every interface (its names unknown)', '0.0.0.0'],
])('a server %s', (_, host) => {
  const ledger = new MemoryLedger();
  let server: RunningHttpServer;
  let url: URL;
  let self: string;
  let otherPort: number;
  beforeAll(async () => {
    server = await startHttpServer({
      host,
      port: 0,
      createServer: () => createDemoServer({ ledger, store: new MemoryIdempotencyStore() }),
    });
    url = new URL(server.url);
    url.hostname = '127.0.0.1';
    self = `127.0.0.1:${url.port}`;
    otherPort = Number(url.port) === 1 ? 2 : 1;
  });
  afterAll(() => server?.close());

  it('refuses a page of the same host on another port: 403, nothing charged', async () => {
    const before = await ledger.balance();
    for (const origin of [
      `http://localhost:${otherPort}`,
      `http://127.0.0.1:${otherPort}`,
      'http://127.0.0.1',
    ]) {
      const status = await chargeAs(url, { host: self, origin });
      expect([origin, status]).toStrictEqual([origin, 403]);
    }
    const localhost = `localhost:${url.port}`;
    expect(await chargeAs(url, { host: localhost, origin: `http://localhost:${otherPort}` })).toBe(403);
    expect(await ledger.balance()).toBe(before);
  });

  it('refuses a page of another scheme on this host and port: 403', async () => {
    expect(await chargeAs(url, { host: self, origin: `ftp://${self}` })).toBe(403);
  });

  it('serves its own origin, by any name it answers to, and a request without an Origin', async () => {
    const before = await ledger.balance();
    expect(await chargeAs(url, { host: self, origin: `http://${self}` })).toBe(200);
    const localhost = `localhost:${url.port}`;
    expect(await chargeAs(url, { host: localhost, origin: `http://${localhost}` })).toBe(200);
    expect(await chargeAs(url, { host: self })).toBe(200);
    expect(await ledger.balance()).toBe(before + 15);
  });
});
