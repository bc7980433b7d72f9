// --- The demo server: three charge-shaped tools over stdio, guarded per SEP-3182 ---
//
// The tools below carry no idempotency logic at all. `charge_guarded` and `charge_unguarded`
// have the same body; they differ only in how the demo calls them (with and without an
// `idempotencyKey`). Deduplication happens in the `tools/call` dispatch, installed by
// `installIdempotencyGuard`, so it covers every tool.

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import {
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_RECORDS,
  DEFAULT_RETENTION_MS,
  type DecisionEvent,
  type IdempotencyStore,
  installIdempotencyGuard,
  MemoryIdempotencyStore,
  type ToolCallExtra,
  verifyGuardSeesKeys,
} from './idempotency/index.js';
import { type Ledger, MemoryLedger } from './ledger.js';

export const SERVER_INFO = { name: 'sep-3182-idempotency-demo', version: '0.1.0' };

export interface DemoServerOptions {
  ledger: Ledger;
  store: IdempotencyStore;
  retentionMs?: number;
  leaseMs?: number;
  scopeOf?: (extra: ToolCallExtra) => string;
  onDecision?: (event: DecisionEvent) => void;
}

const chargeInput = {
  amount: z.number().int().positive().describe('Amount to charge, in minor units (cents)'),
};
const chargeOutput = {
  charged: z.number().int().describe('The amount this call charged'),
  balance: z.number().int().describe('The ledger balance after the charge'),
};
const balanceOutput = { balance: z.number().int().describe('The current ledger balance') };

export function createDemoServer(options: DemoServerOptions): McpServer {
  const { ledger, store } = options;
  const mcp = new McpServer(SERVER_INFO);

  // Same body for both charge tools, as in the Python prototype.
  const charge = async ({ amount }: { amount: number }) => {
    const balance = await ledger.charge(amount);
    return {
      content: [{ type: 'text' as const, text: `Charged ${amount}. New balance: ${balance}` }],
      structuredContent: { charged: amount, balance },
    };
  };
  const chargeAnnotations = { readOnlyHint: false, idempotentHint: false, openWorldHint: true };

  mcp.registerTool(
    'charge_guarded',
    {
      description: 'Charge an amount. The demo always calls this tool with an idempotencyKey.',
      inputSchema: chargeInput,
      outputSchema: chargeOutput,
      annotations: chargeAnnotations,
    },
    charge,
  );
  mcp.registerTool(
    'charge_unguarded',
    {
      description: 'Charge an amount. Same body as charge_guarded; the demo calls it without a key.',
      inputSchema: chargeInput,
      outputSchema: chargeOutput,
      annotations: chargeAnnotations,
    },
    charge,
  );
  mcp.registerTool(
    'reset_ledger',
    {
      description: 'Zero the balance and forget every idempotency record (a demo helper).',
      inputSchema: {},
      outputSchema: balanceOutput,
    },
    async () => {
      await ledger.reset();
      await store.clear();
      return {
        content: [{ type: 'text', text: 'Ledger reset. New balance: 0' }],
        structuredContent: { balance: 0 },
      };
    },
  );
  mcp.registerTool(
    'get_balance',
    {
      description: 'Read the balance, so a client that lost a response can see what happened.',
      inputSchema: {},
      outputSchema: balanceOutput,
      annotations: { readOnlyHint: true },
    },
    async () => {
      const balance = await ledger.balance();
      return { content: [{ type: 'text', text: `Balance: ${balance}` }], structuredContent: { balance } };
    },
  );

  installIdempotencyGuard(mcp.server, {
    store,
    retentionMs: options.retentionMs,
    leaseMs: options.leaseMs,
    scopeOf: options.scopeOf,
    onDecision: options.onDecision,
  });
  return mcp;
}

// --- Command line ---

export interface ServerConfig {
  chargeLatencyMs: number;
  retentionMs: number;
  maxRecords: number;
  leaseMs: number;
}

const USAGE = `Usage: tsx server.ts [options]
  --charge-latency-ms N     the simulated provider takes N ms per charge (default 0)
  --retention-seconds N     how long a completed key is remembered (default ${DEFAULT_RETENTION_MS / 1000})
  --max-records N           cap on stored idempotency records (default ${DEFAULT_MAX_RECORDS})
  --in-progress-lease-ms N  how long an unfinished claim holds its key (default ${DEFAULT_LEASE_MS})`;

export function parseServerArgs(argv: string[]): ServerConfig {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      'charge-latency-ms': { type: 'string', default: '0' },
      'retention-seconds': { type: 'string', default: String(DEFAULT_RETENTION_MS / 1000) },
      'max-records': { type: 'string', default: String(DEFAULT_MAX_RECORDS) },
      'in-progress-lease-ms': { type: 'string', default: String(DEFAULT_LEASE_MS) },
    },
  });
  return {
    chargeLatencyMs: integerOption('--charge-latency-ms', values['charge-latency-ms'], 0),
    retentionMs: 1000 * integerOption('--retention-seconds', values['retention-seconds'], 1),
    maxRecords: integerOption('--max-records', values['max-records'], 1),
    leaseMs: integerOption('--in-progress-lease-ms', values['in-progress-lease-ms'], 1),
  };
}

function integerOption(name: string, raw: string, min: number): number {
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < min) {
    throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  }
  return value;
}

/** One JSON line per keyed decision on stderr; stdout belongs to the protocol. */
export function logDecision(event: DecisionEvent): void {
  process.stderr.write(
    `${JSON.stringify({ time: new Date().toISOString(), event: 'idempotency', ...event })}\n`,
  );
}

async function main(): Promise<void> {
  let config: ServerConfig;
  try {
    config = parseServerArgs(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
    process.exit(2);
  }
  await verifyGuardSeesKeys();
  const server = createDemoServer({
    ledger: new MemoryLedger(config.chargeLatencyMs),
    store: new MemoryIdempotencyStore({ maxRecords: config.maxRecords }),
    retentionMs: config.retentionMs,
    leaseMs: config.leaseMs,
    onDecision: logDecision,
  });
  await server.connect(new StdioServerTransport());
  process.stderr.write(`${JSON.stringify({ event: 'listening', transport: 'stdio', ...config })}\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
