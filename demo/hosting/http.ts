// --- The demo server over stateless Streamable HTTP, both protocol eras ---
//
// The SDK's `createMcpHandler` serves the 2026-07-28 stateless revision (per-request envelope, no
// initialize, `server/discover`, the `MCP-Protocol-Version` / `Mcp-Method` / `Mcp-Name` headers)
// and, from the same factory, 2025-era clients statelessly. Every request gets a new server from
// the factory, and any instance may serve any request, so a retry can land on another instance:
// that is why the dedup store must be shared (see `--store redis`). Express adds what the entry
// leaves to its host: DNS-rebinding protection (Host and Origin), bearer auth, a body limit, and
// bounds on how long a request may take to arrive and on connections at once.

import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, InMemoryTransport } from '@modelcontextprotocol/client';
import { hostHeaderValidation, requireBearerAuth } from '@modelcontextprotocol/express';
import { type NodeIncomingMessageLike, toNodeHandler } from '@modelcontextprotocol/node';
import {
  type AuthInfo,
  createMcpHandler,
  localhostAllowedHostnames,
  type McpServer,
  OAuthError,
  OAuthErrorCode,
} from '@modelcontextprotocol/server';
import express, { type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import type { BearerTokens } from './scopes.js';
import type { RequestSpans } from './telemetry.js';

/**
 * Largest request body read. Bigger bodies are refused with 413 before they are buffered;
 * 4 MB is far beyond any sane tool call and small enough that a flood cannot exhaust memory.
 */
export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;

/**
 * How long a request may take to arrive, headers and body: past it Node answers 408 and closes
 * the connection. A tool call is a few hundred bytes, and even a body at the limit crosses a slow
 * link in seconds; a client still sending after this is holding a buffer open, not uploading.
 * (The tool's own run is not counted: the bound ends once the request has arrived.)
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** How long the headers alone may take: a client sends them at once. */
const HEADERS_TIMEOUT_MS = 10_000;

/**
 * How often Node looks for requests past those bounds (its default, 30 s, would let a slow body
 * hold its buffer up to twice as long as it may).
 */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;

/**
 * Connections at once; past it a new one is closed as soon as it opens, and its client retries.
 * Each may be buffering a body up to the limit, so this times `maxBodyBytes` (512 MiB at the
 * defaults, for at most `DEFAULT_REQUEST_TIMEOUT_MS`) bounds the memory slow uploads can hold.
 * Twice the busiest client load measured here (the bench's 64 concurrent clients).
 */
export const DEFAULT_MAX_CONNECTIONS = 128;

export interface HttpServerOptions {
  host: string;
  port: number;
  /** Builds the server for one request: stateless, nothing survives between requests. */
  createServer: () => McpServer;
  /** Errors the SDK reports without answering them (reporting only). */
  onerror?: (error: Error) => void;
  /** When set, every request needs `Authorization: Bearer <token>` with one of these tokens. */
  bearerTokens?: BearerTokens;
  /**
   * The host names a request may be addressed to (its `Host`) and a browser page may come from
   * (its `Origin`): DNS-rebinding protection. Default: what `host` answers to (see `allowedHostsOf`).
   */
  allowedHosts?: readonly string[];
  maxBodyBytes?: number;
  /** See `DEFAULT_REQUEST_TIMEOUT_MS`. */
  requestTimeoutMs?: number;
  /** See `DEFAULT_MAX_CONNECTIONS`. */
  maxConnections?: number;
  /**
   * Wraps each MCP request, its body read, in a span of the server's own (demo/hosting/telemetry.ts),
   * given the tools the factory's servers have.
   */
  requestSpans?: RequestSpans;
}

export interface RunningHttpServer {
  url: URL;
  close(): Promise<void>;
}

export async function startHttpServer(options: HttpServerOptions): Promise<RunningHttpServer> {
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const mcp = createMcpHandler(options.createServer, {
    onerror: options.onerror,
    maxRequestBodySize: maxBodyBytes,
  });
  const serve = toNodeHandler(mcp, { onerror: options.onerror, maxRequestBodySize: maxBodyBytes });

  const app = express();
  app.use(oneWellFormedHost);
  // DNS-rebinding protection (the MCP transport: servers MUST validate Origin): a page whose name
  // was rebound to this server's address sends that name as its Host, and its own as its Origin.
  const allowedHosts = options.allowedHosts ?? allowedHostsOf(options.host);
  if (allowedHosts) app.use(hostHeaderValidation([...allowedHosts]));
  app.use(sameOrigin);
  if (options.bearerTokens) {
    app.use('/mcp', requireBearerAuth({ verifier: tokenVerifier(options.bearerTokens) }));
  }
  // The body is read here, up to the limit: past it the answer is 413, and Node discards the
  // rest of the upload unread, so the client can finish sending and read why. (The SDK's adapter
  // would close the connection under an upload still being sent.)
  app.use('/mcp', express.raw({ type: () => true, limit: maxBodyBytes }));
  if (options.requestSpans) app.use('/mcp', options.requestSpans(await toolsOf(options.createServer)));
  // The request's `auth` (set by the bearer middleware) reaches every handler as
  // `ctx.http.authInfo`: the guard's scope.
  app.post('/mcp', (req: Request, res: Response) => void serve(withReadBody(req), res));
  // Stateless: no standalone SSE stream to open (GET) and no session to end (DELETE).
  app.all('/mcp', (_req: Request, res: Response) => {
    res
      .status(405)
      .set('Allow', 'POST')
      .json(jsonRpcError(-32000, 'Method not allowed: this server is stateless, POST only'));
  });

  app.use(bodyErrors(maxBodyBytes));

  const requestTimeout = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const listener = createServer(
    {
      requestTimeout,
      headersTimeout: Math.min(HEADERS_TIMEOUT_MS, requestTimeout),
      connectionsCheckingInterval: Math.min(TIMEOUT_CHECK_INTERVAL_MS, requestTimeout),
    },
    app,
  );
  listener.maxConnections = options.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  listener.listen(options.port, options.host);
  await new Promise<void>((resolve, reject) => {
    listener.once('listening', resolve);
    listener.once('error', reject);
  });
  const { port } = addressOf(listener.address());
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    url: new URL(`http://${host}:${port}/mcp`),
    close: async () => {
      await new Promise<void>((resolve) => {
        listener.close(() => resolve());
        listener.closeAllConnections();
      });
      await mcp.close();
    },
  };
}

/**
 * The tools the factory's servers have, as `tools/list` answers them: asked once, in process, of a
 * server of its own (every server the factory makes has the same tools).
 */
async function toolsOf(createServer: () => McpServer): Promise<string[]> {
  const server = createServer();
  const client = new Client({ name: 'tool-names', version: '0' });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  try {
    await client.connect(clientSide);
    const { tools } = await client.listTools();
    return tools.map((tool) => tool.name);
  } finally {
    await client.close();
    await server.close();
  }
}

/**
 * The request as the SDK's adapter reads it, its body the bytes already read. (Not a parsed
 * body: the adapter would serialise that again, and JSON.stringify overflows the stack on
 * deeply nested arguments that JSON.parse read without complaint.)
 */
function withReadBody(req: Request): NodeIncomingMessageLike {
  const body: unknown = req.body;
  return {
    method: req.method,
    url: req.url,
    headers: req.headers,
    auth: req.auth,
    async *[Symbol.asyncIterator]() {
      if (Buffer.isBuffer(body) && body.length > 0) yield body;
    },
  };
}

/**
 * The names a server bound to `host` answers to. A loopback address: itself and the loopback
 * names, as a local client may use any of them. Any other address: itself, so a server reached
 * through a DNS name lists that name in `allowedHosts`. A wildcard (`0.0.0.0`, `::`): unknown,
 * as every interface and every name pointing at one can reach it; undefined.
 */
export function allowedHostsOf(host: string): readonly string[] | undefined {
  if (host === '' || host === '0.0.0.0' || host === '::') return undefined;
  const self = new URL(`http://${host.includes(':') ? `[${host}]` : host}`).hostname;
  const loopback = self === 'localhost' || self === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(self);
  return loopback ? [...new Set([self, ...localhostAllowedHostnames()])] : [self];
}

/** `host[:port]`: a DNS name or IPv4 address, or an IPv6 address in brackets; no userinfo, no path. */
const HOST = /^(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

/**
 * A request names one Host, and only a host and a port: RFC 9112 §3.2 answers 400 to a request
 * with two, or with one that is not a valid authority without userinfo. (A Host with userinfo,
 * `evil.example@127.0.0.1`, would pass the name check as `127.0.0.1` and then fail the SDK's URL.)
 */
const oneWellFormedHost: RequestHandler = (req, res, next) => {
  // Node keeps the first Host in `headers`; the raw headers (name, value, name, …) keep them all.
  const named = req.rawHeaders.filter((name, index) => index % 2 === 0 && name.toLowerCase() === 'host');
  if (named.length === 1 && HOST.test(req.headers.host ?? '')) return next();
  const problem = named.length > 1 ? 'more than one Host header' : 'a Host header that is not host[:port]';
  res.status(400).json(jsonRpcError(-32000, `Bad Request: ${problem}`));
};

/**
 * A browser's request must come from a page of this server's own origin: the scheme, host and port
 * it was sent to, as its Host names them (a name the Host check above allowed, when the names are
 * known). A page of another port on the same host is another program (a dev server, a local
 * app's UI), and one of another host is another site: neither may post here. The scheme is http,
 * or https where a TLS proxy in front forwards the Host; the port is the Host's, or the scheme's
 * default where it names none. A request without an Origin is not a browser's cross-site one.
 */
const sameOrigin: RequestHandler = (req, res, next) => {
  const { origin } = req.headers;
  if (origin === undefined || origin === '') return next();
  if (URL.canParse(origin) && ownOrigins(req.headers.host).has(new URL(origin).origin)) return next();
  res.status(403).json(jsonRpcError(-32000, `Invalid Origin: ${origin} is not this server's origin`));
};

/** The origins a request addressed to `host` (its Host header) may come from, as URLs write them. */
function ownOrigins(host: string | undefined): Set<string> {
  const origins = new Set<string>();
  for (const scheme of ['http:', 'https:']) {
    const url = `${scheme}//${host}`;
    if (host !== undefined && URL.canParse(url)) origins.add(new URL(url).origin);
  }
  return origins;
}

function addressOf(address: string | AddressInfo | null): AddressInfo {
  if (address === null || typeof address === 'string') throw new Error(`not listening on TCP: ${address}`);
  return address;
}

/**
 * Every demo token is issued to one OAuth client application, as the tokens of all the users of
 * one app are (with Client ID Metadata Documents, its `clientId` is one URL for all of them).
 */
export const DEMO_CLIENT_ID = 'https://demo-client.example/client-metadata.json';

/**
 * The SDK's bearer middleware puts what this returns on the request, and the entry hands it
 * to every handler as `ctx.http.authInfo`. The principal, the guard's scope, is the token's
 * subject, in `extra.sub`; `clientId` names the app, which every principal here shares. Tokens
 * are compared in constant time (see `digestOf`).
 */
function tokenVerifier(tokens: BearerTokens) {
  const known = tokens.map((entry) => ({ ...entry, digest: digestOf(entry.token) }));
  return {
    async verifyAccessToken(token: string): Promise<AuthInfo> {
      const presented = digestOf(token);
      let match: (typeof known)[number] | undefined;
      for (const entry of known) if (timingSafeEqual(entry.digest, presented)) match = entry;
      if (!match) throw new OAuthError(OAuthErrorCode.InvalidToken, 'Unknown bearer token');
      return {
        token,
        clientId: DEMO_CLIENT_ID,
        scopes: [...match.scopes],
        expiresAt: Math.floor(Date.now() / 1000) + 3600,
        extra: { sub: match.principal },
      };
    },
  };
}

/**
 * What a token is compared as: its digest, so every comparison is of 32 bytes whatever the token's
 * length; and the verifier compares it with every known token's, so the time taken says neither
 * how long a token is nor which entry it matched.
 */
function digestOf(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

function jsonRpcError(code: number, message: string) {
  return { jsonrpc: '2.0', id: null, error: { code, message } };
}

/** The body reader's refusals: a 413 (or other status) with a JSON-RPC error body. */
const bodyErrors =
  (maxBodyBytes: number): ErrorRequestHandler =>
  (error: unknown, _req, res, next) => {
    const status: unknown =
      typeof error === 'object' && error !== null ? Reflect.get(error, 'status') : undefined;
    const type: unknown =
      typeof error === 'object' && error !== null ? Reflect.get(error, 'type') : undefined;
    if (res.headersSent || typeof status !== 'number') return next(error);
    if (type === 'entity.too.large') {
      // In the words of the SDK's own adapter, which answers a chunked body past its limit.
      res
        .status(413)
        .json(jsonRpcError(-32000, `Payload Too Large: Request body must not exceed ${maxBodyBytes} bytes`));
    } else {
      res.status(status).json(jsonRpcError(-32600, error instanceof Error ? error.message : 'Bad request'));
    }
  };
