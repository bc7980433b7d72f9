// Real server processes serving stateless Streamable HTTP on loopback, and clients for them.

import { once } from 'node:events';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { MemoryIdempotencyStore } from 'mcp-request-idempotency';
import { afterAll, beforeAll } from 'vitest';
import type { ToolRegistry } from '../../demo/hosting/tool-registry.js';
import {
  connectHttpClient,
  type Era,
  type HttpInstance,
  startHttpInstance,
} from '../../demo/processes/launch.js';
import type { Ledger } from '../../ledger.js';
import { connect, type Peer } from '../../packages/checker/wire.js';
import { registerDemoTools } from '../../server.js';
import { type Connection, PEER_TIMEOUT_MS } from './sep-cases.js';

export { connectHttpClient, type HttpInstance, startHttpInstance } from '../../demo/processes/launch.js';

/**
 * One server process for the tests of the `describe` that calls this: started before them, stopped
 * after them. Returns the process, to read once the tests run (it does not exist before).
 */
export function serveHttpForSuite(args: string[] = [], env: NodeJS.ProcessEnv = {}): () => HttpInstance {
  let instance: HttpInstance | undefined;
  beforeAll(async () => {
    instance = await startHttpInstance(args, env);
  });
  afterAll(async () => {
    await instance?.stop();
  });
  return () => {
    if (!instance) throw new Error('the suite’s server has not started');
    return instance;
  };
}

/** Alice may do everything with token-a and only read with token-r; bob is another caller. */
const TOKENS = 'alice:token-a:charge+refund+read+admin,alice:token-r:read,bob:token-b';

/**
 * One server process with bearer auth, an SDK client and raw peers for alice, and raw peers for
 * bob and for alice's read-only token: the shape the shared SEP cases expect.
 */
export async function connectHttp(args: string[], era: Era): Promise<Connection> {
  const instance = await startHttpInstance(args, { DEMO_BEARER_TOKENS: TOKENS });
  const peer = (token: string): Promise<Peer> =>
    connect(
      { kind: 'http', url: instance.url, headers: { authorization: `Bearer ${token}` } },
      { era, timeoutMs: PEER_TIMEOUT_MS },
    );
  const [client, alice, other, forbidden] = await Promise.all([
    connectHttpClient(instance.url, { era, token: 'token-a' }),
    peer('token-a'),
    peer('token-b'),
    peer('token-r'),
  ]);
  return {
    client,
    peer: alice,
    callers: { other, forbidden },
    close: async () => {
      await client.close();
      await instance.stop();
    },
  };
}

/** A POST through node:http, which, unlike fetch, sends whatever Host and Origin it is given: its status. */
export function postAs(url: URL, body: string, headers: Record<string, string>): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...headers,
        },
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

// --- A server without the capability: the demo's tools on a bare McpServer, no guard ---

/** The demo's tools on the SDK's bare server: no guard, so no `tools.idempotency` either. */
export function bareDemoServer(ledger: Ledger): McpServer {
  const mcp = new McpServer({ name: 'no-capability', version: '0' });
  const tools: ToolRegistry = {
    withAmount: (name, { scope: _scope, ...config }, run) => void mcp.registerTool(name, config, run),
    withoutArguments: (name, { scope: _scope, ...config }, run) => void mcp.registerTool(name, config, run),
  };
  registerDemoTools(tools, ledger, new MemoryIdempotencyStore());
  return mcp;
}

/** `bareDemoServer` over stateless HTTP on loopback, in this process. */
export async function startBareHttpServer(ledger: Ledger): Promise<{ url: URL; close(): Promise<void> }> {
  const handler = createMcpHandler(() => bareDemoServer(ledger));
  const http = createServer(toNodeHandler(handler));
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  const { port } = http.address() as AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/mcp`),
    close: async () => {
      http.closeAllConnections();
      http.close();
      await handler.close();
    },
  };
}
