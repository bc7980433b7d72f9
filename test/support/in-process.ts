// The demo server and an SDK client joined by the SDK's in-memory transport: the real guard
// and the real McpServer, with the store's clock and the ledger in the test's hands.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { DecisionEvent, IdempotencyStore } from '../../idempotency/index.js';
import { type Ledger, MemoryLedger } from '../../ledger.js';
import { createDemoServer } from '../../server.js';

export interface InProcessOptions {
  store: IdempotencyStore;
  ledger?: Ledger;
  /** The caller's authorization boundary, as an HTTP deployment would derive it per request. */
  scope?: string;
  retentionMs?: number;
  leaseMs?: number;
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
  const server = createDemoServer({
    ledger,
    store: options.store,
    retentionMs: options.retentionMs,
    leaseMs: options.leaseMs,
    scopeOf: scope === undefined ? undefined : () => scope,
    onDecision: (event) => decisions.push(event),
  });
  const client = new Client({ name: 'in-process-test', version: '0' });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  await client.connect(clientSide);
  return {
    client,
    ledger,
    decisions,
    close: async () => {
      await client.close();
      await server.close();
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
