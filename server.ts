// --- The demo server: charge-shaped tools over stdio or HTTP, guarded per SEP-3182 ---
//
// The tools below carry no idempotency logic at all. `charge_guarded` and `charge_unguarded`
// have the same body; they differ only in how the demo calls them (with and without an
// `idempotencyKey`). Deduplication happens in the `tools/call` dispatch, installed by
// `installIdempotencyGuard`, so it covers every tool: the SEP's algorithm, top to bottom, is
// `guardToolCall` in packages/idempotency/core/guard.ts (in this repository the package's name
// resolves to its sources: tsconfig.json's `paths`).
//
// Built on the current SDK line (@modelcontextprotocol/server 2.x): one factory serves the
// 2026-07-28 stateless protocol (`server/discover`, per-request envelope) and 2025-11-25
// clients (initialize, then calls), over stdio and over HTTP. Beside it in demo/hosting/: the
// refund tool that asks before it acts (refund-tool.ts), which token may call which tool
// (scopes.ts), and the registry that lets a v1 server register the same tools (tool-registry.ts).

import { pathToFileURL } from 'node:url';
import { McpServer, type RequestStateCodec } from '@modelcontextprotocol/server';
import {
  type Caller,
  ClaimsInFlight,
  type DecisionEvent,
  type IdempotencyStore,
  providerKey,
} from 'mcp-request-idempotency';
import { installIdempotencyGuard, verifyGuardSeesKeys } from 'mcp-request-idempotency/sdk-v2';
import { z } from 'zod';
import { messageOf, readCommandLine } from './demo/hosting/cli.js';
import { batchDecisionLines, logDecision } from './demo/hosting/log.js';
import {
  processRequestStateCodec,
  type RefundState,
  registerRefundTool,
} from './demo/hosting/refund-tool.js';
import { REQUEST_STATE_TTL_SECONDS, requestStateCodec } from './demo/hosting/request-state.js';
import { CALLER_SCOPES, DEMO_SCOPES, demoScopeOf, parseBearerTokens } from './demo/hosting/scopes.js';
import { serve } from './demo/hosting/serve.js';
import { openBackends } from './demo/hosting/storage.js';
import { startTelemetry } from './demo/hosting/telemetry.js';
import {
  amountInput,
  type DemoToolResult,
  noInput,
  scopedRegistry,
  type ToolRegistry,
} from './demo/hosting/tool-registry.js';
import { CHARGE_LIMIT, ChargeDeclined, type Ledger } from './ledger.js';

export const SERVER_INFO = { name: 'sep-3182-idempotency-demo', version: '0.1.0' };

export interface DemoServerOptions {
  ledger: Ledger;
  store: IdempotencyStore;
  /** Seals `refund_order`'s `requestState`; every instance that may see a continuation needs the same one. */
  requestState?: RequestStateCodec<RefundState>;
  /** How long a key awaits a continuation: the codec's TTL (default `REQUEST_STATE_TTL_SECONDS`). */
  awaitingInputRetentionMs?: number;
  retentionMs?: number;
  leaseMs?: number;
  scopeOf?: (caller: Caller) => string;
  onDecision?: (event: DecisionEvent) => void;
}

const chargeOutput = z.object({
  charged: z.number().int().describe('The amount this call charged'),
  balance: z.number().int().describe('The ledger balance after the charge'),
});
const balanceOutput = z.object({ balance: z.number().int().describe('The current ledger balance') });

/** The demo's tools, with no idempotency logic in any of them. */
export function registerDemoTools(tools: ToolRegistry, ledger: Ledger, store: IdempotencyStore): void {
  // One body for both charge tools, as in the Python prototype: they differ only in how the demo
  // calls them (with a key, without). The provider's key, derived from the MCP call's, goes along.
  const charge = async ({ amount }: { amount: number }): Promise<DemoToolResult> => {
    try {
      const balance = await ledger.charge(amount, { idempotencyKey: providerKey('charge') });
      return {
        content: [{ type: 'text', text: `Charged ${amount}. New balance: ${balance}` }],
        structuredContent: { charged: amount, balance },
      };
    } catch (error) {
      // A decline is the tool's answer, not a broken call: an error result, which the guard
      // records and replays like any other (SEP: "a successful response or an error response").
      if (error instanceof ChargeDeclined)
        return { content: [{ type: 'text', text: error.message }], isError: true };
      throw error;
    }
  };
  const declines = `The provider declines an amount over ${CHARGE_LIMIT}: an error result numbered by its count of declines.`;
  for (const [name, description] of Object.entries({
    charge_guarded: `Charge an amount. ${declines} The demo always calls this tool with an idempotencyKey.`,
    charge_unguarded: `Charge an amount. ${declines} Same body as charge_guarded; the demo calls it without a key.`,
  })) {
    tools.withAmount(
      name,
      {
        description,
        scope: DEMO_SCOPES.charge,
        inputSchema: amountInput,
        outputSchema: chargeOutput,
        annotations: { readOnlyHint: false, idempotentHint: false, openWorldHint: true },
      },
      charge,
    );
  }
  tools.withoutArguments(
    'reset_ledger',
    {
      description:
        "Zero the balance and forget every caller's idempotency records (an operator's demo helper).",
      scope: DEMO_SCOPES.admin,
      inputSchema: noInput,
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
  tools.withoutArguments(
    'get_balance',
    {
      description: 'Read the balance, so a client that lost a response can see what happened.',
      scope: DEMO_SCOPES.read,
      inputSchema: noInput,
      outputSchema: balanceOutput,
      annotations: { readOnlyHint: true },
    },
    async () => {
      const balance = await ledger.balance();
      return { content: [{ type: 'text', text: `Balance: ${balance}` }], structuredContent: { balance } };
    },
  );
}

/** Builds the demo server: stdio calls this once per connection, stateless HTTP once per request. */
export function createDemoServer(options: DemoServerOptions): McpServer {
  const { ledger, store } = options;
  const codec = options.requestState ?? processRequestStateCodec();
  // The SDK verifies every echoed `requestState` before the tool runs; a forged or expired state,
  // or one minted for another caller or under another key, is refused with -32602 (reason
  // `invalid_request_state`), and the guard records nothing of it.
  const mcp = new McpServer(SERVER_INFO, { requestState: { verify: codec.verify } });
  // Each tool's scope is checked by the SDK over HTTP, before the dispatch: for replays too.
  registerDemoTools(scopedRegistry(mcp), ledger, store);
  registerRefundTool(mcp, ledger, codec);
  installIdempotencyGuard(mcp, {
    store,
    retentionMs: options.retentionMs,
    // The demo's tools send derived keys only to the ledger's provider, if it takes them.
    providerKeyRetentionMs: options.ledger.providerKeyRetentionMs ?? 0,
    leaseMs: options.leaseMs,
    awaitingInputRetentionMs: options.awaitingInputRetentionMs ?? REQUEST_STATE_TTL_SECONDS * 1000,
    scopeOf: options.scopeOf ?? demoScopeOf,
    onDecision: options.onDecision,
  });
  return mcp;
}

// --- Running it: `npx tsx server.ts` (stdio) or `npx tsx server.ts --http` (demo/hosting/ has the rest) ---

async function main(): Promise<void> {
  const { config, bearerTokens, requestState } = readCommandLine(
    process.argv.slice(2),
    process.env,
    (env) => ({
      bearerTokens:
        env.DEMO_BEARER_TOKENS === undefined
          ? undefined
          : parseBearerTokens(env.DEMO_BEARER_TOKENS, Object.values(DEMO_SCOPES), CALLER_SCOPES),
      requestState:
        env.DEMO_REQUEST_STATE_KEY === undefined
          ? undefined
          : requestStateCodec<RefundState>(env.DEMO_REQUEST_STATE_KEY),
    }),
  );
  batchDecisionLines(config.logFlushMs);
  await verifyGuardSeesKeys();
  // OpenTelemetry when asked for (an OTLP endpoint, --metrics-port): before the guard is observed.
  const telemetry = await startTelemetry(config, process.env, SERVER_INFO);
  const backends = await openBackends(config);
  // Every server writes through one count of the claims under way, so a stop can wait for them.
  const claims = new ClaimsInFlight(backends.store);
  const options: DemoServerOptions = telemetry.observe({
    ledger: backends.ledger,
    store: claims,
    requestState,
    retentionMs: config.retentionMs,
    leaseMs: config.leaseMs,
    onDecision: logDecision,
  });
  // Stateless HTTP: a fresh server for every request, its scope the principal of the request's
  // verified token (the guard's default); stdio: one per connection.
  const createServer = () => createDemoServer(options);
  await serve({ config, backends, claims, bearerTokens, telemetry, createServer });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  // Whatever stops the server starting is an operator's to fix: one line saying what, no stack.
  main().catch((error: unknown) => {
    process.stderr.write(`server.ts: ${messageOf(error)}\n`);
    process.exit(1);
  });
}
