// --- The client side of SEP-3182 ---
//
// Sending the key, retrying with it, and discovering the capability, with the SDK's client
// as it is: its `callTool` has no place for the key, and it drops `tools.idempotency` from
// the capabilities it parses.

import { randomUUID } from 'node:crypto';
import {
  type CallToolResult,
  type Client,
  type JSONRPCMessage,
  type RequestOptions,
  SdkError,
  SdkErrorCode,
  type Transport,
} from '@modelcontextprotocol/client';
import { z } from 'zod';
import { IdempotencyErrorType, idempotencyErrorOf } from './errors.js';

/** The stateless protocol revision the SEP is written for. */
export const MODERN_PROTOCOL_VERSION = '2026-07-28';

/** The last protocol revision with initialize; 2025-era clients still speak it. */
export const LEGACY_PROTOCOL_VERSION = '2025-11-25';

// Type aliases, not interfaces: the SDK's typed `request` takes params as a Record.
export type ToolCall = {
  name: string;
  arguments?: Record<string, unknown>;
};

export type KeyedToolCall = ToolCall & {
  /** SEP: a sibling of `name` and `arguments`, not inside `arguments`, not in `_meta`. */
  idempotencyKey: string;
};

/**
 * `tools/call`, with `params.idempotencyKey` when the call carries one. The SDK client's
 * `callTool` has no place for the key; its typed `request` sends extra params fields unchanged
 * (and, on a 2026-07-28 connection, adds the per-request envelope).
 */
export function callTool(
  client: Client,
  call: ToolCall | KeyedToolCall,
  options?: RequestOptions,
): Promise<CallToolResult> {
  return client.request({ method: 'tools/call', params: call }, options);
}

export interface RetryPolicy {
  maxAttempts: number;
  /** Per-attempt timeout; the SDK rejects with `SdkError` REQUEST_TIMEOUT and tells the server it gave up. */
  timeoutMs: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 8,
  timeoutMs: 30_000,
  initialBackoffMs: 100,
  maxBackoffMs: 5_000,
};

export type AttemptOutcome = 'answered' | 'timedOut' | 'inProgress' | 'storeUnavailable' | 'storeFull';

export interface Attempt {
  attempt: number;
  /** Which of the given clients carried it (always 0 with one client). */
  client: number;
  outcome: AttemptOutcome;
  idempotencyKey: string;
  elapsedMs: number;
}

export interface IdempotentCallOptions {
  policy?: Partial<RetryPolicy>;
  /** Observe each attempt (the demo narrates them). */
  onAttempt?: (attempt: Attempt) => void;
}

/**
 * One logical operation, one key: the key is generated here, once, and sent unchanged on
 * every retry. A new key on retry is exactly the double charge this mechanism prevents.
 * Retries after a timeout (the answer may be lost, not the work) and after an answer that
 * says "nothing happened yet, try again later"; any other failure is the caller's to see.
 * Given several clients (instances behind a load balancer, in miniature), attempt n goes to
 * client n mod count, so a retry lands on another instance, as it would in production.
 */
export async function callToolIdempotently(
  clients: Client | readonly Client[],
  call: ToolCall,
  options: IdempotentCallOptions = {},
): Promise<{ result: CallToolResult; idempotencyKey: string; attempts: Attempt[] }> {
  const policy = { ...DEFAULT_RETRY_POLICY, ...options.policy };
  const pool = Array.isArray(clients) ? clients : [clients];
  const idempotencyKey = randomUUID();
  const attempts: Attempt[] = [];
  const started = performance.now();
  const note = (outcome: AttemptOutcome) => {
    const attempt: Attempt = {
      attempt: attempts.length + 1,
      client: attempts.length % pool.length,
      outcome,
      idempotencyKey,
      elapsedMs: performance.now() - started,
    };
    attempts.push(attempt);
    options.onAttempt?.(attempt);
  };

  for (;;) {
    try {
      const client = pool[attempts.length % pool.length];
      if (!client) throw new Error('callToolIdempotently needs at least one client');
      const result = await callTool(client, { ...call, idempotencyKey }, { timeout: policy.timeoutMs });
      note('answered');
      return { result, idempotencyKey, attempts };
    } catch (error) {
      const outcome = retryableOutcome(error);
      if (outcome === undefined) throw error;
      note(outcome);
      if (attempts.length >= policy.maxAttempts) throw error;
    }
    await sleep(backoff(attempts.length, policy));
  }
}

function retryableOutcome(error: unknown): AttemptOutcome | undefined {
  const sep = idempotencyErrorOf(error);
  if (sep?.type === IdempotencyErrorType.inProgress) return 'inProgress';
  if (sep?.type === IdempotencyErrorType.storeUnavailable) return 'storeUnavailable';
  if (sep?.type === IdempotencyErrorType.storeFull) return 'storeFull';
  // The answer may be lost, not the work: the one failure worth retrying with the same key.
  return error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout ? 'timedOut' : undefined;
}

/** Exponential backoff with full jitter, so a crowd of retries does not arrive together. */
function backoff(failures: number, policy: RetryPolicy): number {
  const ceiling = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** (failures - 1));
  return Math.random() * ceiling;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// --- Discovery: capabilities.tools.idempotency, as the server sent it ---
//
// The SDK client parses capabilities with a schema that drops `tools.idempotency`, in both eras,
// so each era's answer is read before that schema sees it.

/**
 * 2026-07-28: asks `server/discover` and returns its `capabilities` as the server sent them
 * (SEP: a client that requires deduplication SHOULD check here).
 */
export async function discoverCapabilities(client: Client, options?: RequestOptions): Promise<unknown> {
  const result = await client.request({ method: 'server/discover' }, LooseDiscoverResult, options);
  return result.capabilities;
}

const LooseDiscoverResult = z.looseObject({ capabilities: z.unknown() });

/**
 * 2025-11-25: call before `client.connect(transport)`. Resolves with the `capabilities` object of
 * the initialize result exactly as it arrived. (Protocol.connect chains an `onmessage` that is
 * already set.)
 */
export function captureInitializeCapabilities(transport: Transport): Promise<unknown> {
  return new Promise((resolve) => {
    transport.onmessage = (message: JSONRPCMessage) => {
      if ('result' in message && typeof message.result.protocolVersion === 'string') {
        resolve(message.result.capabilities);
      }
    };
  });
}

/** SEP: `{"capabilities":{"tools":{"idempotency":{}}}}`, intentionally empty. */
export function advertisesIdempotency(capabilities: unknown): boolean {
  const tools: unknown = field(capabilities, 'tools');
  const idempotency: unknown = field(tools, 'idempotency');
  return typeof idempotency === 'object' && idempotency !== null;
}

function field(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}
