// --- The demo server over stateless Streamable HTTP ---
//
// The shape of the 2026-07-28 stateless revision, as close as SDK 1.32 gets: no session id,
// a new McpServer and transport for every request, `tools/call` served without a prior
// `initialize`. Any instance may serve any request, so a retry can land on another instance:
// that is why the dedup store must be shared (see `--store redis`).

import { timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { localhostHostValidation } from '@modelcontextprotocol/sdk/server/middleware/hostHeaderValidation.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import express, { type ErrorRequestHandler, type Request, type Response } from 'express';

/**
 * Largest request body read. Bigger bodies are refused with 413 before they are buffered;
 * 4 MB is far beyond any sane tool call and small enough that a flood cannot exhaust memory.
 */
export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;

/** Principal name → bearer token, parsed from `DEMO_BEARER_TOKENS="alice:token-a,bob:token-b"`. */
export type BearerTokens = ReadonlyMap<string, string>;

export function parseBearerTokens(spec: string): BearerTokens {
  const tokens = new Map<string, string>();
  for (const entry of spec.split(',').map((s) => s.trim())) {
    if (entry === '') continue;
    const colon = entry.indexOf(':');
    const principal = entry.slice(0, colon);
    const token = entry.slice(colon + 1);
    if (colon < 1 || token === '') {
      throw new Error(`DEMO_BEARER_TOKENS entries are principal:token, got "${entry}"`);
    }
    tokens.set(principal, token);
  }
  if (tokens.size === 0) throw new Error('DEMO_BEARER_TOKENS is set but names no principal');
  return tokens;
}

export interface HttpServerOptions {
  host: string;
  port: number;
  /** Builds the server for one request: stateless, nothing survives between requests. */
  createServer: () => McpServer;
  /** When set, every request needs `Authorization: Bearer <token>` of one of these principals. */
  bearerTokens?: BearerTokens;
  maxBodyBytes?: number;
}

export interface RunningHttpServer {
  url: URL;
  close(): Promise<void>;
}

export async function startHttpServer(options: HttpServerOptions): Promise<RunningHttpServer> {
  const app = express();
  // DNS-rebinding protection: a browser page cannot reach a loopback server under another name.
  if (['127.0.0.1', 'localhost', '::1'].includes(options.host)) app.use(localhostHostValidation());
  if (options.bearerTokens) {
    app.use('/mcp', requireBearerAuth({ verifier: tokenVerifier(options.bearerTokens) }));
  }
  app.use(express.json({ limit: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES }));

  app.post('/mcp', async (req: Request, res: Response) => {
    const server = options.createServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    // When the client goes away (a timeout, a dropped connection) the server is closed, which
    // aborts the request's signal; a charge already under way still completes and is recorded.
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  });
  // Stateless: no standalone SSE stream to open (GET) and no session to end (DELETE).
  app.all('/mcp', (_req: Request, res: Response) => {
    res
      .status(405)
      .set('Allow', 'POST')
      .json(jsonRpcError(-32000, 'Method not allowed: this server is stateless, POST only'));
  });
  app.use(bodyErrors);

  const listener = app.listen(options.port, options.host);
  await new Promise<void>((resolve, reject) => {
    listener.once('listening', resolve);
    listener.once('error', reject);
  });
  const { port } = addressOf(listener.address());
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    url: new URL(`http://${host}:${port}/mcp`),
    close: () =>
      new Promise((resolve) => {
        listener.close(() => resolve());
        listener.closeAllConnections();
      }),
  };
}

function addressOf(address: string | AddressInfo | null): AddressInfo {
  if (address === null || typeof address === 'string') throw new Error(`not listening on TCP: ${address}`);
  return address;
}

/**
 * The SDK's bearer middleware puts what this returns on the request, and the transport hands
 * it to every handler as `extra.authInfo`: the guard's scope is its `clientId`, which this demo
 * sets to the principal. Tokens are compared in constant time.
 */
function tokenVerifier(tokens: BearerTokens) {
  const known = [...tokens].map(([principal, token]) => ({ principal, token: Buffer.from(token) }));
  return {
    async verifyAccessToken(token: string): Promise<AuthInfo> {
      const presented = Buffer.from(token);
      const match = known.find(
        (k) => k.token.length === presented.length && timingSafeEqual(k.token, presented),
      );
      if (!match) throw new InvalidTokenError('Unknown bearer token');
      return {
        token,
        clientId: match.principal,
        scopes: [],
        expiresAt: Math.floor(Date.now() / 1000) + 3600,
      };
    },
  };
}

function jsonRpcError(code: number, message: string) {
  return { jsonrpc: '2.0', id: null, error: { code, message } };
}

/** Oversized or unparsable bodies get a status that says so and a JSON-RPC error body. */
const bodyErrors: ErrorRequestHandler = (error: unknown, _req, res, next) => {
  const status: unknown =
    typeof error === 'object' && error !== null ? Reflect.get(error, 'status') : undefined;
  const type: unknown = typeof error === 'object' && error !== null ? Reflect.get(error, 'type') : undefined;
  if (res.headersSent || typeof status !== 'number') return next(error);
  if (type === 'entity.too.large') {
    res.status(413).json(jsonRpcError(-32600, 'Request body too large'));
  } else if (type === 'entity.parse.failed') {
    res.status(400).json(jsonRpcError(-32700, 'Parse error: the body is not valid JSON'));
  } else {
    res.status(status).json(jsonRpcError(-32600, error instanceof Error ? error.message : 'Bad request'));
  }
};
