// --- The demo server: charge-shaped tools over stdio or HTTP, guarded per SEP-3182 ---
//
// The tools below carry no idempotency logic at all. `charge_guarded` and `charge_unguarded`
// have the same body; they differ only in how the demo calls them (with and without an
// `idempotencyKey`). Deduplication happens in the `tools/call` dispatch, installed by
// `installIdempotencyGuard`, so it covers every tool.
//
// Built on the current SDK line (@modelcontextprotocol/server 2.x): one factory serves the
// 2026-07-28 stateless protocol (`server/discover`, per-request envelope) and 2025-11-25
// clients (initialize, then calls), over stdio and over HTTP.

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import {
  acceptedContent,
  createRequestStateCodec,
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
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_BYTES_PER_SCOPE,
  DEFAULT_MAX_RECORDS,
  DEFAULT_MAX_RECORDS_PER_SCOPE,
  DEFAULT_PROVIDER_KEY_RETENTION_MS,
  DEFAULT_RETENTION_MS,
  type DecisionEvent,
  type IdempotencyStore,
  MemoryIdempotencyStore,
  principalOf,
  principalScope,
  providerKey,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { PostgresIdempotencyStore } from 'mcp-request-idempotency/postgres';
import {
  closeRedis,
  connectRedis,
  connectRedisCluster,
  RedisIdempotencyStore,
} from 'mcp-request-idempotency/redis';
import { installIdempotencyGuard, verifyGuardSeesKeys } from 'mcp-request-idempotency/sdk-v2';
import { z } from 'zod';
import { type BearerTokens, parseBearerTokens, startHttpServer } from './hosting/http.js';
import { batchDecisionLines, DEFAULT_LOG_FLUSH_MS, log, logDecision, reportSdkError } from './hosting/log.js';
import { serveStdio } from './hosting/stdio.js';
import {
  DEFAULT_PROVIDER_TIMEOUT_MS,
  type Ledger,
  MemoryLedger,
  PostgresLedger,
  ProviderLedger,
  RedisLedger,
} from './ledger.js';

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

/** What a demo tool answers: text for people, structured content for programs. (A type alias:
 * both SDK lines type a tool result as a Record.) */
export type DemoToolResult = {
  content: Array<{ type: 'text'; text: string }>;
  structuredContent: Record<string, unknown>;
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
  return granted?.every((s) => s === DEMO_SCOPES.read) ? `${scope}:read-only` : scope;
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
  // Same body for both charge tools, as in the Python prototype. The provider's own key is passed
  // along as with any payment SDK; the guard's execution context derives it from the MCP call.
  const charge = async ({ amount }: { amount: number }) => {
    const balance = await ledger.charge(amount, { idempotencyKey: providerKey('charge') });
    return {
      content: [{ type: 'text' as const, text: `Charged ${amount}. New balance: ${balance}` }],
      structuredContent: { charged: amount, balance },
    };
  };
  const chargeAnnotations = { readOnlyHint: false, idempotentHint: false, openWorldHint: true };

  tools.withAmount(
    'charge_guarded',
    {
      description: 'Charge an amount. The demo always calls this tool with an idempotencyKey.',
      scope: DEMO_SCOPES.charge,
      inputSchema: chargeInput,
      outputSchema: chargeOutput,
      annotations: chargeAnnotations,
    },
    charge,
  );
  tools.withAmount(
    'charge_unguarded',
    {
      description: 'Charge an amount. Same body as charge_guarded; the demo calls it without a key.',
      scope: DEMO_SCOPES.charge,
      inputSchema: chargeInput,
      outputSchema: chargeOutput,
      annotations: chargeAnnotations,
    },
    charge,
  );
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
// guard's rules for continuations are in packages/idempotency/guard.ts.

/** What `refund_order` seals into its `requestState`: the refund the question was about. */
export interface RefundState {
  tool: 'refund_order';
  orderId: string;
  amount: number;
}

/** How long a question may wait for its answer; the guard keeps an awaiting key as long. */
export const REQUEST_STATE_TTL_SECONDS = 600;

/**
 * The codec sealing `requestState` (HMAC, the v2 SDK's), bound to the method and the caller: a
 * state minted for alice's call is refused on bob's. `key` must be at least 32 bytes, the same on
 * every instance a continuation may reach.
 */
export function refundStateCodec(
  key: string | Uint8Array,
  ttlSeconds = REQUEST_STATE_TTL_SECONDS,
): RequestStateCodec<RefundState> {
  return createRequestStateCodec<RefundState>({
    key,
    ttlSeconds,
    bind: (ctx) => {
      const authInfo = ctx.http?.authInfo;
      return `${ctx.mcpReq.method}\0${authInfo ? (principalOf(authInfo) ?? '') : ''}`;
    },
  });
}

let processCodec: RequestStateCodec<RefundState> | undefined;

/** A codec with a key of this process's own: enough when one process serves every round. */
function processRequestStateCodec(): RequestStateCodec<RefundState> {
  processCodec ??= refundStateCodec(crypto.getRandomValues(new Uint8Array(32)));
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
      // Verified by the SDK before this runs (`requestState.verify`): integrity, expiry, caller.
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
  // The SDK verifies every echoed `requestState` before the tool runs; a forged, expired or
  // another caller's state is refused with -32602 (reason `invalid_request_state`).
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

// --- Command line ---

const STORE_KINDS = ['memory', 'redis', 'postgres'] as const;
type StoreKind = (typeof STORE_KINDS)[number];

export interface ServerConfig {
  transport: 'stdio' | 'http';
  host: string;
  port: number;
  store: StoreKind;
  /** Where the balance lives: the store's own kind by default, or in this process. */
  ledger: StoreKind;
  postgresUrl: string | undefined;
  postgresPrefix: string;
  redisUrl: string;
  /** Seed nodes of a Redis Cluster: when set, the store and the ledger use it, not `redisUrl`. */
  redisCluster: string[] | undefined;
  redisPrefix: string;
  /** A payment provider over HTTP (docs/provider-wire.md); unset: the in-process ledger. */
  providerUrl: URL | undefined;
  /** Whether the tools' provider keys are sent: `none` shows the window they close. */
  providerKeys: 'derived' | 'none';
  providerTimeoutMs: number;
  /** How long the provider keeps a key: the records are kept at least as long. */
  providerKeyRetentionMs: number;
  chargeLatencyMs: number;
  retentionMs: number;
  maxRecords: number;
  maxRecordsPerCaller: number;
  maxBytesPerCaller: number;
  leaseMs: number;
  logFlushMs: number;
}

const USAGE = `Usage: tsx server.ts [options]
  --http                    serve stateless Streamable HTTP at /mcp instead of stdio
  --host H                  HTTP host (default 127.0.0.1)
  --port N                  HTTP port (default 3000; 0 picks a free one)
  --store memory|redis|postgres  where idempotency records live (default memory)
  --ledger memory|redis|postgres  where the balance lives (default: beside the records). With
                            postgres, each keyed charge commits in its record's transaction
  --postgres-url URL        default $DATABASE_URL (needs --store postgres)
  --postgres-prefix P       prefix of every table this server creates (default sep3182_)
  --redis-url URL           default $REDIS_URL, else redis://127.0.0.1:6379
  --redis-cluster URL,URL…  a Redis Cluster instead: some of its nodes' URLs (needs --store redis)
  --redis-prefix P          prefix of every Redis key this server writes (default sep3182:)
  --provider-url URL        charge a payment provider over HTTP (provider/provider.ts, or any that follows
                            docs/provider-wire.md), with an Idempotency-Key derived from the MCP call;
                            unset: the in-process ledger, the provider that takes no keys
  --provider-keys derived|none  send the derived key to the provider (default derived), or none,
                            to show the window the key closes
  --provider-timeout-ms N   how long one provider request may take (default ${DEFAULT_PROVIDER_TIMEOUT_MS})
  --provider-key-retention-seconds N  how long the provider keeps a key (default
                            ${DEFAULT_PROVIDER_KEY_RETENTION_MS / 1000}); --retention-seconds may not be shorter
  --charge-latency-ms N     the in-process ledger takes N ms per charge (default 0)
  --retention-seconds N     how long a completed key is remembered (default ${DEFAULT_RETENTION_MS / 1000})
  --max-records N           cap on records in the memory store (default ${DEFAULT_MAX_RECORDS})
  --max-records-per-caller N  quota of live records per caller, either store (default ${DEFAULT_MAX_RECORDS_PER_SCOPE})
  --max-bytes-per-caller N    quota of stored response characters per caller (default ${DEFAULT_MAX_BYTES_PER_SCOPE})
  --in-progress-lease-ms N  how long an unfinished claim holds its key (default ${DEFAULT_LEASE_MS})
  --log-flush-ms N          how long a decision log line may wait to be written with others
                            (default ${DEFAULT_LOG_FLUSH_MS}; 0 writes each at once)
Environment: DEMO_BEARER_TOKENS requires bearer auth over HTTP: comma-separated principal:token
  (every scope but admin) or principal:token:scope+scope, e.g.
  "alice:token-a,alice:token-r:read,bob:token-b,ops:token-o:admin".
  Scopes: ${Object.values(DEMO_SCOPES).join(', ')} (charge_* need charge, refund_order refund,
  get_balance read, reset_ledger admin: an operator's, which clears every caller's records).
  DEMO_REQUEST_STATE_KEY seals refund_order's requestState (at least 32 characters); every HTTP
  instance a continuation may reach needs the same one. Unset: a random key of this process's own.`;

export function parseServerArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const { values } = parseArgs({
    args: negativeNumbersAsValues(argv),
    strict: true,
    options: {
      http: { type: 'boolean', default: false },
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '3000' },
      store: { type: 'string', default: 'memory' },
      'redis-url': { type: 'string', default: env.REDIS_URL ?? 'redis://127.0.0.1:6379' },
      'redis-cluster': { type: 'string' },
      'redis-prefix': { type: 'string', default: 'sep3182:' },
      ledger: { type: 'string' },
      'postgres-url': { type: 'string' },
      'postgres-prefix': { type: 'string', default: 'sep3182_' },
      'provider-url': { type: 'string' },
      'provider-keys': { type: 'string', default: 'derived' },
      'provider-timeout-ms': { type: 'string', default: String(DEFAULT_PROVIDER_TIMEOUT_MS) },
      'provider-key-retention-seconds': {
        type: 'string',
        default: String(DEFAULT_PROVIDER_KEY_RETENTION_MS / 1000),
      },
      'charge-latency-ms': { type: 'string', default: '0' },
      'retention-seconds': { type: 'string', default: String(DEFAULT_RETENTION_MS / 1000) },
      'max-records': { type: 'string', default: String(DEFAULT_MAX_RECORDS) },
      'max-records-per-caller': { type: 'string', default: String(DEFAULT_MAX_RECORDS_PER_SCOPE) },
      'max-bytes-per-caller': { type: 'string', default: String(DEFAULT_MAX_BYTES_PER_SCOPE) },
      'in-progress-lease-ms': { type: 'string', default: String(DEFAULT_LEASE_MS) },
      'log-flush-ms': { type: 'string', default: String(DEFAULT_LOG_FLUSH_MS) },
    },
  });
  const store = storeKind('--store', values.store);
  const ledger = storeKind('--ledger', values.ledger ?? store);
  // The balance beside the records, or in this process; a ledger in one store and records in
  // another would share nothing a transaction could span.
  if (ledger !== store && ledger !== 'memory')
    throw new Error(`--ledger ${ledger} needs --store ${ledger} (the balance lives beside the records)`);
  const postgresUrl = values['postgres-url'] ?? env.DATABASE_URL;
  if (store === 'postgres' && !postgresUrl)
    throw new Error('--store postgres needs --postgres-url or $DATABASE_URL');
  if (store === 'postgres' && postgresUrl)
    storeUrl('--postgres-url', postgresUrl, ['postgres:', 'postgresql:']);
  if (values['postgres-url'] !== undefined && store !== 'postgres')
    throw new Error('--postgres-url needs --store postgres');
  const redisCluster = values['redis-cluster']?.split(',');
  if (redisCluster && store !== 'redis') throw new Error('--redis-cluster needs --store redis');
  if (redisCluster?.some((url) => url === ''))
    throw new Error(`--redis-cluster takes comma-separated URLs, got "${values['redis-cluster']}"`);
  if (store === 'redis')
    for (const url of redisCluster ?? [values['redis-url']])
      storeUrl(redisCluster ? '--redis-cluster' : '--redis-url', url, ['redis:', 'rediss:']);
  const providerUrl = values['provider-url'] === undefined ? undefined : httpUrl(values['provider-url']);
  const providerKeys = values['provider-keys'];
  if (providerKeys !== 'derived' && providerKeys !== 'none')
    throw new Error(`--provider-keys must be derived or none, got "${providerKeys}"`);
  const chargeLatencyMs = integerOption('--charge-latency-ms', values['charge-latency-ms'], 0);
  if (providerUrl && values.ledger !== undefined)
    throw new Error('--provider-url is the ledger: give --ledger or --provider-url, not both');
  if (providerUrl && chargeLatencyMs > 0)
    throw new Error("--charge-latency-ms is the in-process ledger's; give the provider its own --latency-ms");
  const retentionSeconds = integerOption('--retention-seconds', values['retention-seconds'], 1);
  const providerKeyRetentionSeconds = integerOption(
    '--provider-key-retention-seconds',
    values['provider-key-retention-seconds'],
    1,
  );
  // The guard's rule (DEFAULT_RETENTION_MS says why), said at start-up in the flags' words.
  if (providerUrl && providerKeys === 'derived' && retentionSeconds < providerKeyRetentionSeconds) {
    throw new Error(
      `--retention-seconds ${retentionSeconds} is shorter than the provider keeps keys ` +
        `(--provider-key-retention-seconds ${providerKeyRetentionSeconds}): a key reused once its record ` +
        'is gone would be answered the old charge; keep records at least as long',
    );
  }
  return {
    transport: values.http ? 'http' : 'stdio',
    host: values.host,
    port: integerOption('--port', values.port, 0, MAX_PORT),
    store,
    redisUrl: values['redis-url'],
    redisCluster,
    redisPrefix: values['redis-prefix'],
    ledger,
    postgresUrl,
    postgresPrefix: values['postgres-prefix'],
    providerUrl,
    providerKeys,
    providerTimeoutMs: integerOption('--provider-timeout-ms', values['provider-timeout-ms'], 1),
    providerKeyRetentionMs: 1000 * providerKeyRetentionSeconds,
    chargeLatencyMs,
    retentionMs: 1000 * retentionSeconds,
    maxRecords: integerOption('--max-records', values['max-records'], 1),
    maxRecordsPerCaller: integerOption('--max-records-per-caller', values['max-records-per-caller'], 1),
    maxBytesPerCaller: integerOption('--max-bytes-per-caller', values['max-bytes-per-caller'], 1),
    leaseMs: integerOption('--in-progress-lease-ms', values['in-progress-lease-ms'], 1),
    logFlushMs: integerOption('--log-flush-ms', values['log-flush-ms'], 0),
  };
}

function storeKind(name: string, raw: string): StoreKind {
  const kind = STORE_KINDS.find((k) => k === raw);
  if (!kind) throw new Error(`${name} must be ${STORE_KINDS.join(', ')}, got "${raw}"`);
  return kind;
}

function httpUrl(raw: string): URL {
  const url = URL.canParse(raw) ? new URL(raw) : undefined;
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:')
    throw new Error(`--provider-url must be an http(s) URL, got "${raw}"`);
  return url;
}

/** A store URL the store's client can parse, of its scheme; not echoed, as it may hold a password. */
function storeUrl(name: string, raw: string, protocols: readonly string[]): void {
  const url = URL.canParse(raw) ? new URL(raw) : undefined;
  if (!url || !protocols.includes(url.protocol))
    throw new Error(`${name} must be a ${protocols.map((p) => `${p}//`).join(' or ')} URL`);
}

/** The highest TCP port. */
const MAX_PORT = 65_535;

function integerOption(name: string, raw: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
    throw new Error(`${name} must be an integer ${range}, got "${raw}"`);
  }
  return value;
}

/**
 * `--retention-seconds -5` as `--retention-seconds=-5`: parseArgs takes a value that starts with
 * a dash for an option of its own ("argument is ambiguous"), where the mistake is the number,
 * which `integerOption` then names.
 */
function negativeNumbersAsValues(argv: readonly string[]): string[] {
  const joined: string[] = [];
  for (const arg of argv) {
    const option = joined.at(-1);
    if (/^-\d/.test(arg) && option?.startsWith('--') && !option.includes('='))
      joined[joined.length - 1] = `${option}=${arg}`;
    else joined.push(arg);
  }
  return joined;
}

/**
 * The dedup store and the ledger: both in this process, or both shared in Redis or in Postgres
 * (or the ledger in this process, whatever the store); or the ledger is a payment provider over
 * HTTP, which every instance shares by itself.
 */
async function openBackends(
  config: ServerConfig,
): Promise<{ store: IdempotencyStore; ledger: Ledger; close(): Promise<void> }> {
  const provider =
    config.providerUrl &&
    new ProviderLedger(config.providerUrl, {
      sendKeys: config.providerKeys === 'derived',
      timeoutMs: config.providerTimeoutMs,
      keyRetentionMs: config.providerKeyRetentionMs,
      onRetry: (retry) => log({ time: new Date().toISOString(), event: 'provider', retry: true, ...retry }),
    });
  const inProcess = config.ledger === 'memory' ? new MemoryLedger(config.chargeLatencyMs) : undefined;
  if (config.store === 'memory') {
    return {
      store: new MemoryIdempotencyStore({
        maxRecords: config.maxRecords,
        maxRecordsPerScope: config.maxRecordsPerCaller,
        maxBytesPerScope: config.maxBytesPerCaller,
      }),
      ledger: provider ?? new MemoryLedger(config.chargeLatencyMs),
      close: async () => {},
    };
  }
  if (config.store === 'postgres') {
    const store = await PostgresIdempotencyStore.connect(config.postgresUrl ?? '', {
      tablePrefix: `${config.postgresPrefix}idem_`,
      maxRecordsPerScope: config.maxRecordsPerCaller,
      maxBytesPerScope: config.maxBytesPerCaller,
      onError: (error) => log({ event: 'postgres', error: String(error) }),
    });
    return {
      store,
      ledger:
        provider ??
        inProcess ??
        (await PostgresLedger.open(store.pool, `${config.postgresPrefix}ledger_`, config.chargeLatencyMs)),
      close: () => store.close(),
    };
  }
  // Until connected, each failed attempt is the same error: the start-up failure names the
  // first, once, rather than the log repeating it for every retry.
  let connecting = true;
  let firstError: unknown;
  const onError = (error: unknown) => {
    if (!connecting) log({ event: 'redis', error: String(error) });
    else firstError ??= error;
  };
  const client = await (config.redisCluster
    ? connectRedisCluster(config.redisCluster, { onError })
    : connectRedis(config.redisUrl, { onError })
  ).catch((error: unknown) => {
    throw firstError ?? error;
  });
  connecting = false;
  return {
    store: new RedisIdempotencyStore(client, {
      keyPrefix: `${config.redisPrefix}idem:`,
      maxRecordsPerScope: config.maxRecordsPerCaller,
      maxBytesPerScope: config.maxBytesPerCaller,
    }),
    ledger:
      provider ??
      inProcess ??
      new RedisLedger(client, config.chargeLatencyMs, `${config.redisPrefix}ledger:balance`),
    close: () => closeRedis(client),
  };
}

async function main(): Promise<void> {
  let config: ServerConfig;
  let bearerTokens: BearerTokens | undefined;
  let requestState: RequestStateCodec<RefundState> | undefined;
  // Asked for, the usage is the answer (stdout, success), not a complaint about an unknown option.
  if (process.argv.slice(2).some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  try {
    config = parseServerArgs(process.argv.slice(2));
    const tokens = process.env.DEMO_BEARER_TOKENS;
    bearerTokens =
      tokens === undefined ? undefined : parseBearerTokens(tokens, Object.values(DEMO_SCOPES), CALLER_SCOPES);
    const stateKey = process.env.DEMO_REQUEST_STATE_KEY;
    requestState = stateKey === undefined ? undefined : refundStateCodec(stateKey);
  } catch (error) {
    // parseArgs' own messages run to three lines; the first names the option.
    const [mistake] = messageOf(error).split('\n');
    process.stderr.write(`${mistake} (--help lists the options)\n`);
    process.exit(2);
  }
  batchDecisionLines(config.logFlushMs);
  await verifyGuardSeesKeys();
  const backends = await openBackends(config).catch((error: unknown) => {
    throw new Error(unreachableStore(config, error));
  });
  const claims = new ClaimsInFlight(backends.store);
  const serverOptions: DemoServerOptions = {
    ...backends,
    store: claims,
    requestState,
    retentionMs: config.retentionMs,
    leaseMs: config.leaseMs,
    onDecision: logDecision,
  };
  // Redis URLs may carry a password; host and port mean nothing over stdio (HTTP logs its url).
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
      // Stop taking requests (HTTP), let the keyed calls under way be recorded (waiting a
      // lease at most), then close.
      for (const close of closers.reverse()) await close();
      await claims.settled(config.leaseMs);
      await backends.close();
      process.exit(0);
    })();
    return stopping;
  };
  process.on('SIGTERM', shutdown).on('SIGINT', shutdown);

  if (config.transport === 'stdio') {
    // One server per connection; the connection's opening message picks its era.
    const { input } = serveStdio(() => createDemoServer(serverOptions), reportSdkError);
    // When the client closes stdin the SDK aborts the calls in flight, unanswered; the guard lets
    // each keyed one run to its end and records it, so its retry replays. Stopping waits for
    // that, and for the Redis connection, which would otherwise keep the process alive.
    input.on('end', shutdown);
    // A client that hung up mid-call cannot read its answer; the call is recorded all the same.
    process.stdout.on('error', () => {});
    log({ event: 'listening', ...shown });
    return;
  }
  const http = await startHttpServer({
    host: config.host,
    port: config.port,
    bearerTokens,
    // Stateless: a fresh server for every request, its scope the principal of the request's
    // verified token (the guard's default).
    createServer: () => createDemoServer(serverOptions),
    onerror: reportSdkError,
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

/** What an operator reads when the store does not answer at start-up: where, why, and what to do. */
function unreachableStore(config: ServerConfig, error: unknown): string {
  const [store, where, flag] =
    config.store === 'postgres'
      ? ['Postgres', withoutPassword(config.postgresUrl ?? ''), '--postgres-url']
      : config.redisCluster
        ? ['the Redis Cluster', config.redisCluster.map(withoutPassword).join(','), '--redis-cluster']
        : ['Redis', withoutPassword(config.redisUrl), '--redis-url'];
  // The store's own wrapper says only "unavailable"; its cause says why.
  const why = error instanceof StoreUnavailableError && error.cause !== undefined ? error.cause : error;
  return `cannot reach ${store} at ${where} (${messageOf(why)}): start it, or give ${flag} of one that runs`;
}

function withoutPassword(raw: string): string {
  const url = new URL(raw);
  if (url.password) url.password = '***';
  return url.href;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  // Whatever stops the server starting is an operator's to fix: one line saying what, no stack.
  main().catch((error: unknown) => {
    process.stderr.write(`server.ts: ${messageOf(error)}\n`);
    process.exit(1);
  });
}
