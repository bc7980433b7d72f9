// --- Serving the demo server: stdio or stateless HTTP, and a stop that loses no record ---
//
// A stop (SIGTERM, SIGINT, or stdin closed) stops taking requests, lets every keyed call under
// way be recorded (a lease at most), then closes the store: the retry of a call cut off by the
// stop replays its answer rather than executing again.

import type { McpServer } from '@modelcontextprotocol/server';
import type { ClaimsInFlight } from 'mcp-request-idempotency';
import { messageOf, type ServerConfig } from './cli.js';
import { log, reportSdkError } from './log.js';
import type { BearerTokens } from './scopes.js';
import { serveStdio } from './stdio.js';
import type { Backends } from './storage.js';
import type { Telemetry } from './telemetry.js';

export interface Service {
  config: ServerConfig;
  backends: Backends;
  /** The store every server writes through: a stop waits for the claims it counts. */
  claims: ClaimsInFlight;
  /** A server for each stdio connection, or for each HTTP request (stateless). */
  createServer: () => McpServer;
  /** HTTP callers and their scopes; unset, HTTP takes every caller as the local one. */
  bearerTokens?: BearerTokens | undefined;
  /** The server's spans, and what to send before it exits. */
  telemetry?: Telemetry;
}

export async function serve({
  config,
  backends,
  claims,
  createServer,
  bearerTokens,
  telemetry,
}: Service): Promise<void> {
  // Store URLs may carry a password; host and port mean nothing over stdio (HTTP logs its url).
  const {
    redisUrl: _url,
    redisCluster: _seeds,
    postgresUrl: _postgres,
    host: _host,
    port: _port,
    providerUrl,
    ...rest
  } = config;
  const shown = { ...rest, provider: providerUrl?.origin ?? 'in-process' };
  const closers: Array<() => Promise<void>> = [];
  let stopping: Promise<void> | undefined;
  const shutdown = () => {
    stopping ??= (async () => {
      for (const close of closers.reverse()) await close();
      await claims.settled(config.leaseMs);
      await backends.close();
      // After the last decision is recorded, so the figures sent last include it.
      await telemetry?.close();
      process.exit(0);
    })();
    return stopping;
  };
  process.on('SIGTERM', shutdown).on('SIGINT', shutdown);

  if (config.transport === 'stdio') {
    // One server per connection; the connection's opening message picks its era.
    const { input } = serveStdio(createServer, reportSdkError);
    // When the client closes stdin the SDK aborts the calls in flight, unanswered; the guard lets
    // each keyed one run to its end and records it, so its retry replays. Stopping waits for
    // that, and for the Redis connection, which would otherwise keep the process alive.
    input.on('end', shutdown);
    // A client that hung up mid-call cannot read its answer; the call is recorded all the same.
    process.stdout.on('error', () => {});
    log({ event: 'listening', ...shown });
    return;
  }
  // Loaded here, not above: a stdio server, which a client starts for each session, need not load
  // Express and the SDK's HTTP entry.
  const { startHttpServer } = await import('./http.js');
  const http = await startHttpServer({
    host: config.host,
    port: config.port,
    allowedHosts: config.allowedHosts,
    bearerTokens,
    createServer,
    onerror: reportSdkError,
    requestSpans: telemetry?.requestSpans,
  }).catch(async (error: unknown) => {
    await backends.close();
    throw new Error(
      `cannot listen on ${config.host}:${config.port} (${messageOf(error)}): give another --host or --port (--port 0 picks a free one)`,
    );
  });
  closers.push(http.close);
  log({
    event: 'listening',
    ...shown,
    url: http.url.href,
    // Principals and their scopes; never the tokens.
    auth: bearerTokens ? bearerTokens.map((t) => `${t.principal}:${t.scopes.join('+')}`) : 'none',
  });
}
