// The demo server and an SDK client in one process, through one of the SDK's own entry points:
// `serveStdio` over the in-memory transport, or `createMcpHandler` called as a fetch function
// (HTTP without a socket). The real guard, the real McpServer and the real client in either era,
// with the store's clock and the ledger in the test's hands.

import { type Client, InMemoryTransport, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler, type RequestStateCodec } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import type { DecisionEvent, IdempotencyStore } from 'mcp-request-idempotency';
import { MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import type { RefundState } from '../../demo/hosting/refund-tool.js';
import { type AskUser, type Era, newClient } from '../../demo/processes/launch.js';
import { type Ledger, MemoryLedger } from '../../ledger.js';
import { createDemoServer } from '../../server.js';

export interface InProcessOptions {
  store: IdempotencyStore;
  ledger?: Ledger;
  /** The caller's authorization boundary, as an HTTP deployment would derive it per request. */
  scope?: string;
  retentionMs?: number;
  leaseMs?: number;
  /** The protocol era the client speaks (default 2026-07-28). */
  era?: Era;
  /**
   * `stdio` (default): one connection, its messages pumped in order by the SDK. `http`: every
   * request is its own fetch call, so each runs in its caller's async context (the model test
   * tells concurrent charges apart that way).
   */
  entry?: 'stdio' | 'http';
  /** The user the client asks when a tool asks a question (refund_order). */
  askUser?: AskUser;
  /** The server's `requestState` codec, and how long a key awaits a continuation. */
  requestState?: RequestStateCodec<RefundState>;
  awaitingInputRetentionMs?: number;
}

export interface InProcessConnection {
  client: Client;
  ledger: Ledger;
  decisions: DecisionEvent[];
  close(): Promise<void>;
}

export async function connectInProcess(options: InProcessOptions): Promise<InProcessConnection> {
  const ledger = options.ledger ?? new MemoryLedger();
  const decisions: DecisionEvent[] = [];
  const scope = options.scope;
  const server = () =>
    createDemoServer({
      ledger,
      store: options.store,
      retentionMs: options.retentionMs,
      leaseMs: options.leaseMs,
      requestState: options.requestState,
      awaitingInputRetentionMs: options.awaitingInputRetentionMs,
      scopeOf: scope === undefined ? undefined : () => scope,
      onDecision: (event) => decisions.push(event),
    });
  const client = newClient(options.era ?? MODERN_PROTOCOL_VERSION, options.askUser);
  let close: () => Promise<void>;
  if (options.entry === 'http') {
    const handler = createMcpHandler(server);
    const fetch = (url: string | URL, init?: RequestInit) => handler.fetch(new Request(url, init));
    await client.connect(new StreamableHTTPClientTransport(new URL('http://in-process/mcp'), { fetch }));
    close = handler.close;
  } else {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const served = serveStdio(server, { transport: serverSide });
    await client.connect(clientSide);
    close = served.close;
  }
  return {
    client,
    ledger,
    decisions,
    close: async () => {
      await client.close();
      await close();
    },
  };
}

/** A clock the test moves by hand, so retention is tested without sleeping through it. */
export class ManualClock {
  constructor(private ms = 1_000_000) {}
  readonly now = (): number => this.ms;
  advance(ms: number): void {
    this.ms += ms;
  }
}
