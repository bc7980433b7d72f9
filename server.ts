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
// clients (initialize, then calls), over stdio and over HTTP.

import { pathToFileURL } from 'node:url';
import {
  acceptedContent,
  inputRequired,
  inputResponse,
  McpServer,
  type RequestStateCodec,
  requireScopes,
  type ServerContext,
} from '@modelcontextprotocol/server';
import {
  type Caller,
  ClaimsInFlight,
  type DecisionEvent,
  type IdempotencyStore,
  principalScope,
  providerKey,
  scopeWithin,
} from 'mcp-request-idempotency';
import { installIdempotencyGuard, verifyGuardSeesKeys } from 'mcp-request-idempotency/sdk-v2';
import { z } from 'zod';
import { openBackends } from './demo/hosting/backends.js';
import { messageOf, readCommandLine } from './demo/hosting/cli.js';
import { parseBearerTokens } from './demo/hosting/http.js';
import { batchDecisionLines, logDecision } from './demo/hosting/log.js';
import { REQUEST_STATE_TTL_SECONDS, requestStateCodec } from './demo/hosting/request-state.js';
import { serve } from './demo/hosting/serve.js';
import { startTelemetry } from './demo/hosting/telemetry.js';
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

const chargeInput = z.object({
  amount: z.number().int().positive().describe('Amount to charge, in minor units (cents)'),
});
const chargeOutput = z.object({
  charged: z.number().int().describe('The amount this call charged'),
  balance: z.number().int().describe('The ledger balance after the charge'),
});
const balanceOutput = z.object({ balance: z.number().int().describe('The current ledger balance') });
const noInput = z.object({});

/** What a demo tool answers: text for people, structured content for programs; a declined
 * charge, text alone, marked `isError`. (A type alias: both SDK lines type a tool result as a
 * Record.) */
export type DemoToolResult = {
  content: Array<{ type: 'text'; text: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
};

/**
 * What each tool needs the caller's token to allow. Over HTTP the SDK checks it before any
 * dispatch, so before the guard: a replay is refused exactly as an execution would be (SEP: "a
 * replayed response MUST still be subject to whatever authorization check would ordinarily govern
 * access to it"). Over stdio the caller is the local user, with no token: every tool is allowed.
 */
export const DEMO_SCOPES = { charge: 'charge', refund: 'refund', read: 'read', admin: 'admin' } as const;

export type DemoScope = (typeof DEMO_SCOPES)[keyof typeof DEMO_SCOPES];

/**
 * The records' scope: the principal of the verified token (the guard's default, `principalScope`),
 * and, for a token that may only read, a scope of its own within it. Such a token's keyed calls
 * can only be of tools that change nothing, so nothing is lost by not replaying them to the
 * principal's other tokens; and a read-only token, perhaps handed to a dashboard, cannot use up the
 * quota of records the principal's charges need.
 */
export function demoScopeOf(caller: Caller): string {
  const scope = principalScope(caller);
  const granted = caller.authInfo?.scopes;
  return granted?.every((s) => s === DEMO_SCOPES.read) ? scopeWithin(scope, 'read-only') : scope;
}

/**
 * What a token entry that names no scopes may do: everything but `admin`. `admin` resets every
 * caller's balance and records, a running call's included (its retry would execute again), so it
 * is an operator's, given only by name.
 */
export const CALLER_SCOPES: readonly DemoScope[] = [DEMO_SCOPES.charge, DEMO_SCOPES.refund, DEMO_SCOPES.read];

interface ToolConfig<Input> {
  description: string;
  /** The OAuth scope a caller's token needs to call the tool. */
  scope: DemoScope;
  inputSchema: Input;
  outputSchema: z.ZodObject;
  annotations?: { readOnlyHint?: boolean; idempotentHint?: boolean; openWorldHint?: boolean };
}

/**
 * Registers the demo's tools on a server of either SDK line: both take these zod schemas and a
 * callback typed by them. One method per input schema, so each line's `registerTool` sees a
 * concrete schema type. (A server on the v1 line, in the tests, registers the same tools.)
 */
export interface ToolRegistry {
  withAmount(
    name: string,
    config: ToolConfig<typeof chargeInput>,
    run: (args: z.infer<typeof chargeInput>) => Promise<DemoToolResult>,
  ): void;
  withoutArguments(
    name: string,
    config: ToolConfig<typeof noInput>,
    run: () => Promise<DemoToolResult>,
  ): void;
}

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
        inputSchema: chargeInput,
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

// --- A tool that asks before it acts: a multi-round-trip call (2026-07-28) ---
//
// `refund_order` answers its opening round with `input_required`: a question for the user, and a
// sealed `requestState` naming the refund. The client sends the call again with the answer (a
// continuation) and only a yes refunds. On a 2025-11-25 connection the SDK asks the question
// itself, inside the one call. Like the others, this tool carries no idempotency logic: the
// guard's rules for continuations are in packages/idempotency/core/guard.ts, and the seal binds a
// state to the idempotency key of the round that minted it (demo/hosting/request-state.ts), so one
// yes is one refund: carried to another key, or sent with none, it is refused before this runs.

/** What `refund_order` seals into its `requestState`: the refund the question was about. */
export interface RefundState {
  tool: 'refund_order';
  orderId: string;
  amount: number;
}

let processCodec: RequestStateCodec<RefundState> | undefined;

/** A codec with a key of this process's own: enough when one process serves every round. */
function processRequestStateCodec(): RequestStateCodec<RefundState> {
  processCodec ??= requestStateCodec<RefundState>(crypto.getRandomValues(new Uint8Array(32)));
  return processCodec;
}

const refundInput = z.object({
  orderId: z.string().min(1).max(64).describe('The order to refund'),
  amount: z.number().int().positive().describe('Amount to refund, in minor units (cents)'),
});
const refundOutput = z.object({
  orderId: z.string(),
  refunded: z.number().int().describe('The amount this call refunded: 0 when the user said no'),
  balance: z.number().int().describe('The ledger balance after the call'),
});
const confirmation = z.object({ confirm: z.boolean().describe('Refund this order?') });

function registerRefundTool(mcp: McpServer, ledger: Ledger, codec: RequestStateCodec<RefundState>): void {
  mcp.registerTool(
    'refund_order',
    {
      description: 'Refund an order, after asking the user to confirm (a multi-round-trip call).',
      inputSchema: refundInput,
      outputSchema: refundOutput,
      annotations: { readOnlyHint: false, idempotentHint: false, openWorldHint: true },
      scopeChallenge: requireScopes(DEMO_SCOPES.refund),
    },
    async ({ orderId, amount }, ctx: ServerContext) => {
      // Verified by the SDK before this runs (`requestState.verify`): integrity, expiry, caller, key.
      const state = ctx.mcpReq.requestState<RefundState>();
      const answers = ctx.mcpReq.inputResponses;
      // Only an answer to this refund's own question counts.
      const ours = state?.tool === 'refund_order' && state.orderId === orderId && state.amount === amount;
      const given = ours ? answers : undefined;
      const answer = inputResponse(given, 'confirm');
      const content = acceptedContent(given, 'confirm', confirmation);
      if (answer.kind !== 'elicit' || (answer.action === 'accept' && content === undefined)) {
        // The opening round, or an answer this refund cannot use (another refund's state, a
        // malformed answer): ask. The SDK's way with an unusable answer is to ask again.
        const again = state !== undefined || answers !== undefined;
        const question = `Refund ${amount} to order ${orderId}?`;
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: again ? `That answer could not be used. ${question}` : question,
              requestedSchema: confirmation,
            }),
          },
          requestState: await codec.mint({ tool: 'refund_order', orderId, amount }, ctx),
        });
      }
      if (content?.confirm !== true) {
        const balance = await ledger.balance();
        return {
          content: [{ type: 'text', text: `Not refunded: the user said no. Balance: ${balance}` }],
          structuredContent: { orderId, refunded: 0, balance },
        };
      }
      const balance = await ledger.refund(amount, { orderId, idempotencyKey: providerKey('refund') });
      return {
        content: [{ type: 'text', text: `Refunded ${amount} to order ${orderId}. New balance: ${balance}` }],
        structuredContent: { orderId, refunded: amount, balance },
      };
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
  // The SDK's scope challenge runs over HTTP before the dispatch, for executions and replays alike.
  const tools: ToolRegistry = {
    withAmount: (name, { scope, ...config }, run) =>
      void mcp.registerTool(name, { ...config, scopeChallenge: requireScopes(scope) }, run),
    withoutArguments: (name, { scope, ...config }, run) =>
      void mcp.registerTool(name, { ...config, scopeChallenge: requireScopes(scope) }, run),
  };
  registerDemoTools(tools, ledger, store);
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
