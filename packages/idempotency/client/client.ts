// --- The client side of SEP-3182 ---
//
// Sending the key, retrying with it, and discovering the capability, with the SDK's client
// as it is: its `callTool` has no place for the key, and it drops `tools.idempotency` from
// the capabilities it parses. `IdempotentClient` puts the three together behind one `callTool`.
//
// Retrying is safe only where the server deduplicates, so both retrying entry points read the
// capability first, and neither retries where it is not advertised (or cannot be read). Both retry
// an answer that says its outcome is unknown (`outcomeUnknownOf`) under the same key, and when the
// policy gives up without a settled answer they reject with `OutcomeUnknownError`, which carries
// the key: the application's own retry, later, under that key, is the same operation.

import { randomUUID } from 'node:crypto';
import {
  type CallToolResult,
  type Client,
  type JSONRPCMessage,
  type RequestOptions,
  SdkError,
  SdkErrorCode,
  SdkHttpError,
  type Transport,
  type TransportSendOptions,
} from '@modelcontextprotocol/client';
import { z } from 'zod';
import { advertisesIdempotency, field } from '../core/capability.js';
import { IdempotencyErrorType, idempotencyErrorOf, outcomeUnknownOf } from '../core/errors.js';

export { advertisesIdempotency } from '../core/capability.js';

export { LEGACY_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSION } from '../core/protocol.js';

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
  /** Attempts in all, the first included. */
  maxAttempts: number;
  /** Per-attempt timeout; the SDK rejects with `SdkError` REQUEST_TIMEOUT and tells the server it gave up. */
  timeoutMs: number;
  /** The ceiling of the first wait; each later one doubles it. */
  initialBackoffMs: number;
  /** No wait's ceiling grows past this. */
  maxBackoffMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  // Seven waits whose ceilings add up to about 11 s: enough to outlast a charge still running or a
  // store that blinks, few enough that the user hears of a lasting outage in seconds, not minutes.
  maxAttempts: 8,
  // Half the SDK's own default (60 s): a payment provider answers in seconds, and giving up early
  // costs only a replay, since the retry carries the same key.
  timeoutMs: 30_000,
  // An in-progress answer comes at once, and most calls finish in a few hundred milliseconds.
  initialBackoffMs: 100,
  // Well inside the server's retention (24 h by default) and its in-progress lease (120 s), so a late
  // retry still finds the record its first attempt left.
  maxBackoffMs: 5_000,
};

export type AttemptOutcome =
  | 'answered'
  /** The server answered that it cannot tell whether the call took effect, and recorded nothing. */
  | 'outcomeUnknown'
  | 'timedOut'
  | 'connectionLost'
  | 'gatewayError'
  | 'inProgress'
  | 'storeUnavailable'
  | 'storeFull';

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
  /** Observe each attempt: to log or narrate it. */
  onAttempt?: (attempt: Attempt) => void;
  /**
   * The server's capabilities as it sent them (`discoverCapabilities`, `captureInitializeCapabilities`),
   * for every client given. Without them, a 2026-07-28 connection is asked (`server/discover`, once
   * per client); a 2025-11-25 one cannot be (the SDK keeps no `tools.idempotency` of its initialize
   * result), so its call is sent once and not retried.
   */
  serverCapabilities?: unknown;
  /** Told once per client when its calls are not retried, and why (default `console.warn`). */
  onWarning?: (message: string) => void;
}

export const NOT_RETRIED_WARNING =
  'The server does not advertise capabilities.tools.idempotency: callToolIdempotently sends each call once, and does not retry it';

export const CAPABILITY_UNREAD_WARNING =
  'callToolIdempotently cannot read capabilities.tools.idempotency on a 2025-11-25 connection (the SDK drops it from the initialize result; pass serverCapabilities as captureInitializeCapabilities read them): it sends each call once, and does not retry it';

/**
 * One logical operation, one key: the key is generated here, once, and sent unchanged on
 * every retry. A new key on retry is exactly the double charge this mechanism prevents.
 * Given several clients (instances behind a load balancer, in miniature), attempt n goes to
 * client n mod count, so a retry lands on another instance, as it would in production.
 * Which failures are retried: `untilAnswered`; when they run out, it rejects with
 * `OutcomeUnknownError`, which carries the key.
 *
 * Only against a server that deduplicates: it reads the capability first (see
 * `IdempotentCallOptions.serverCapabilities`). Where it is not advertised, or cannot be read, the
 * call is sent once, with its key (the SEP lets a client send one anyway), and not retried: a
 * retry there could execute again. Its failure is then the call's.
 */
export async function callToolIdempotently(
  clients: Client | readonly Client[],
  call: ToolCall,
  options: IdempotentCallOptions = {},
): Promise<{ result: CallToolResult; idempotencyKey: string; attempts: Attempt[] }> {
  const policy = { ...DEFAULT_RETRY_POLICY, ...options.policy };
  const pool = Array.isArray(clients) ? clients : [clients];
  if (pool.length === 0) throw new Error('callToolIdempotently needs at least one client');
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
  const keyed = { ...call, idempotencyKey };
  const clientOf = (attempt: number): Client => pool[(attempt - 1) % pool.length] as Client;
  const warning = await notRetriedBecause(pool, options.serverCapabilities);
  if (warning !== undefined) {
    warnOnce(pool[0] as Client, warning, options.onWarning ?? console.warn);
    const result = await callTool(clientOf(1), keyed, { timeout: policy.timeoutMs });
    note('answered');
    return { result, idempotencyKey, attempts };
  }
  const result = await untilAnswered(
    policy,
    keyed,
    (attempt) => callTool(clientOf(attempt), keyed, { timeout: policy.timeoutMs }),
    note,
  );
  return { result, idempotencyKey, attempts };
}

/** Why the clients' calls may not be retried, if they may not: the capability is missing or unread. */
async function notRetriedBecause(
  pool: readonly Client[],
  capabilities: unknown,
): Promise<string | undefined> {
  if (capabilities !== undefined)
    return advertisesIdempotency(capabilities) ? undefined : NOT_RETRIED_WARNING;
  for (const client of pool) {
    const advertised = await advertisedBy(client);
    if (advertised === undefined) return CAPABILITY_UNREAD_WARNING;
    if (!advertised) return NOT_RETRIED_WARNING;
  }
  return undefined;
}

/** What each client's server said of the capability, asked once (a failed ask is asked again next time). */
const advertisedByClient = new WeakMap<Client, Promise<boolean>>();

/** Whether `client`'s server advertises the capability; undefined where it cannot be asked (2025-11-25). */
function advertisedBy(client: Client): Promise<boolean> | undefined {
  if (client.getProtocolEra() !== 'modern') return undefined;
  let advertised = advertisedByClient.get(client);
  if (advertised === undefined) {
    advertised = discoverCapabilities(client).then(advertisesIdempotency);
    advertised.catch(() => advertisedByClient.delete(client));
    advertisedByClient.set(client, advertised);
  }
  return advertised;
}

const warnedClients = new WeakSet<Client>();

function warnOnce(client: Client, message: string, warn: (message: string) => void): void {
  if (warnedClients.has(client)) return;
  warnedClients.add(client);
  warn(message);
}

/**
 * A keyed call the client gave up on before it had a settled answer: the retries ran out (or the
 * connection closed for good) on timeouts, lost connections, gateway errors, answers that said
 * "in progress" or "nothing ran, retry later", or answers that said the outcome is unknown.
 * Whether the operation took effect is unknown. `idempotencyKey` is its key: send the same call
 * again under it, now or later (`IdempotentClient.callTool(name, args, { idempotencyKey })`), and
 * it takes effect at most once. Under a new key it is a second operation.
 */
export class OutcomeUnknownError extends Error {
  override readonly name = 'OutcomeUnknownError';

  constructor(
    /** The key every attempt carried: the one to retry the operation under. */
    readonly idempotencyKey: string,
    /** The tool called. */
    readonly tool: string,
    /** How many attempts were made. */
    readonly attempts: number,
    /** What the last attempt got. */
    readonly lastOutcome: AttemptOutcome,
    /** The last answer, when it was a tool result that said its outcome is unknown. */
    readonly result: CallToolResult | undefined,
    /** The last attempt's error, when it failed. */
    cause: unknown,
  ) {
    super(
      `${tool}: no settled answer after ${attempts} attempt(s) (last: ${lastOutcome}), so whether it took effect is unknown. ` +
        `Send it again under the same idempotencyKey, ${idempotencyKey}: it takes effect at most once (under a new key it would be a second operation)`,
      { cause },
    );
  }
}

/**
 * Sends one keyed operation until it is answered or the policy gives up, and reports each
 * attempt's outcome. Retried: a timeout, a lost connection or a gateway's 502/503/504 (the answer
 * may be lost, not the work), the answers that say "nothing happened yet, try again later
 * with the same key", and the answers that say "whether it happened is unknown, retry with the
 * same key" (`outcomeUnknownOf`: a tool result marked so, or its error form).
 * Anything else (a conflict, an invalid key, any other tool result, `isError` or not) is the answer.
 * Given up on, it rejects with `OutcomeUnknownError`, the key in it.
 * `connected` says whether a retry has a way to the server at all: a closed stdio connection
 * stays closed.
 */
async function untilAnswered(
  policy: RetryPolicy,
  call: KeyedToolCall,
  send: (attempt: number) => Promise<CallToolResult>,
  note: (outcome: AttemptOutcome) => void,
  connected: () => boolean = () => true,
  signal?: AbortSignal,
): Promise<CallToolResult> {
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    let outcome: AttemptOutcome;
    let unknown: CallToolResult | undefined;
    let failure: unknown;
    try {
      const result = await send(attempt);
      if (outcomeUnknownOf(result) === undefined) {
        note('answered');
        return result;
      }
      outcome = 'outcomeUnknown';
      unknown = result;
    } catch (error) {
      // The SDK rejects an aborted request as a timeout: the caller's abort is not one to retry.
      signal?.throwIfAborted();
      const retryable = retryableOutcome(error);
      if (retryable === undefined) throw error;
      outcome = retryable;
      failure = error;
    }
    note(outcome);
    if (attempt >= policy.maxAttempts || (outcome === 'connectionLost' && !connected()))
      throw new OutcomeUnknownError(call.idempotencyKey, call.name, attempt, outcome, unknown, failure);
    await sleep(backoff(attempt, policy), signal);
  }
}

function retryableOutcome(error: unknown): AttemptOutcome | undefined {
  const sep = idempotencyErrorOf(error);
  if (sep?.type === IdempotencyErrorType.outcomeUnknown) return 'outcomeUnknown';
  if (sep?.type === IdempotencyErrorType.inProgress) return 'inProgress';
  if (sep?.type === IdempotencyErrorType.storeUnavailable) return 'storeUnavailable';
  if (sep?.type === IdempotencyErrorType.storeFull) return 'storeFull';
  if (error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout) return 'timedOut';
  if (error instanceof SdkError && error.code === SdkErrorCode.ConnectionClosed) return 'connectionLost';
  // fetch rejects a refused, reset or cut connection with a TypeError whose `cause` is the
  // socket's error; a TypeError from a bug has no cause, and is not retried.
  if (error instanceof TypeError && error.cause instanceof Error) return 'connectionLost';
  if (error instanceof SdkHttpError && GATEWAY_STATUSES.has(error.status)) return 'gatewayError';
  return undefined;
}

/**
 * What a load balancer or proxy answers when the server behind it failed, timed out or went away:
 * possibly after the server ran the call, so exactly an answer lost on the way. The server's own
 * provider hop retries the same statuses. Any other HTTP status (a 400, a 401, a 413) says the
 * request itself is wrong, and a retry would only be refused again.
 */
const GATEWAY_STATUSES: ReadonlySet<number> = new Set([502, 503, 504]);

/** Exponential backoff with full jitter, so a crowd of retries does not arrive together. */
function backoff(failures: number, policy: RetryPolicy): number {
  const ceiling = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** (failures - 1));
  return Math.random() * ceiling;
}

/** Waits `ms`, or rejects with the signal's reason as soon as it is aborted. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const aborted = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }, ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });
}

// --- A client that owns its keys and its retries ---
//
// The rule the seed post states: key generation and retry logic belong to one component, or
// they drift, and the bug is a new key on a retry. Under this wrapper the call site names a
// tool and its arguments; the key, the retries and the capability check are all in here.

export interface IdempotentClientOptions extends Partial<RetryPolicy> {
  /** Told once when the server does not advertise the capability (default `console.warn`). */
  onWarning?: (message: string) => void;
  /** Observe each attempt of a keyed call. */
  onAttempt?: (attempt: Attempt) => void;
}

/** What one `IdempotentClient.callTool` may add to the client's own options. */
export interface CallOptions {
  /**
   * The operation's key, when the caller has one: chosen and stored with the order before the
   * first attempt, or handed back by an `OutcomeUnknownError` of an earlier call, so that the call
   * is the same operation again. Default: a new UUID. Ignored when the call is not keyed (a read,
   * or a server without the capability).
   */
  idempotencyKey?: string;
  /** Gives up: the attempt under way is abandoned, no retry follows, and the call rejects with the reason. */
  signal?: AbortSignal;
  /** Observe each attempt of this call (besides the client's own `onAttempt`). */
  onAttempt?: (attempt: Attempt) => void;
}

export const NO_CAPABILITY_WARNING =
  'The server does not advertise capabilities.tools.idempotency: tool calls go out without an idempotencyKey and are not retried';

/**
 * A v2 SDK `Client` whose `callTool` gives every call of a side-effecting tool its own key,
 * reused across the retries it makes itself. Named for what its calls are: safe to retry.
 * A tool annotated `readOnlyHint: true` in the server's tools/list is called once, with no key:
 * a read changes nothing, so there is nothing to deduplicate. Any other tool (one the list does
 * not name included) is taken to have side effects.
 */
export class IdempotentClient {
  /** Whether the server advertises `capabilities.tools.idempotency`: only then are calls keyed. */
  readonly deduplicates: boolean;
  private readonly policy: RetryPolicy;
  private readonly onAttempt?: (attempt: Attempt) => void;
  private readOnlyTools?: Promise<ReadonlySet<string>>;
  /** Told when the answer stream of the attempt under way with this key ends (see `reportStreamEnds`). */
  private readonly streamEnded = new Map<string, () => void>();

  /**
   * Connects `client` over `transport` and reads the capabilities as the server sent them
   * (the SDK drops `tools.idempotency` from the ones it parses): from the initialize result on a
   * 2025-11-25 connection, from `server/discover` on 2026-07-28.
   */
  static async connect(
    client: Client,
    transport: Transport,
    options: IdempotentClientOptions = {},
  ): Promise<IdempotentClient> {
    const initialize = captureInitializeCapabilities(transport);
    await client.connect(transport);
    const capabilities =
      client.getProtocolEra() === 'legacy' ? await initialize : await discoverCapabilities(client);
    return new IdempotentClient(client, capabilities, options);
  }

  /** `serverCapabilities`: as the server sent them, read with the discovery helpers below. */
  constructor(
    readonly client: Client,
    serverCapabilities: unknown,
    { onWarning = console.warn, onAttempt, ...policy }: IdempotentClientOptions = {},
  ) {
    this.policy = { ...DEFAULT_RETRY_POLICY, ...policy };
    this.onAttempt = onAttempt;
    this.deduplicates = advertisesIdempotency(serverCapabilities);
    if (client.transport) reportStreamEnds(client.transport, (key) => this.streamEnded.get(key));
    // SEP: a client MAY send a key anyway, but without the capability nothing promises a retry
    // will not execute again; such a server gets today's calls, and the caller is told once.
    if (!this.deduplicates) onWarning(NO_CAPABILITY_WARNING);
  }

  /**
   * Calls `name`: keyed and retried if it has side effects and the server deduplicates, else
   * once. Every attempt, keyed or not, gives up after `timeoutMs`. Resolves with the tool's
   * result (`isError` included), but for a result that says its outcome is unknown, which is
   * retried under the same key. Rejects with `OutcomeUnknownError` when the retries run out
   * without a settled answer: whether the call took effect is unknown, and the error carries its
   * key, to send the call again under (`options.idempotencyKey`), now or later, as the same
   * operation. Rejects at once with an error no retry can fix (a conflict, an invalid key,
   * anything unexpected), or with the reason `options.signal` was aborted for.
   */
  async callTool(
    name: string,
    args: Record<string, unknown> = {},
    options: CallOptions = {},
  ): Promise<CallToolResult> {
    const call = { name, arguments: args };
    const once = { timeout: this.policy.timeoutMs, signal: options.signal };
    if (!this.deduplicates || (await this.isReadOnly(name))) return callTool(this.client, call, once);
    const idempotencyKey = options.idempotencyKey ?? randomUUID();
    const started = performance.now();
    let attempt = 0;
    const keyed = { ...call, idempotencyKey };
    return untilAnswered(
      this.policy,
      keyed,
      () => this.attempt(keyed, once),
      (outcome) => {
        attempt += 1;
        const elapsedMs = performance.now() - started;
        const noted: Attempt = { attempt, client: 0, outcome, idempotencyKey, elapsedMs };
        this.onAttempt?.(noted);
        options.onAttempt?.(noted);
      },
      () => this.client.transport !== undefined,
      options.signal,
    );
  }

  close(): Promise<void> {
    return this.client.close();
  }

  /**
   * One attempt, given up as a lost connection as soon as its answer stream ends without the
   * answer: on a 2025-11-25 connection the answer comes on an SSE stream, and a stream cut short
   * would otherwise leave the attempt waiting out its whole timeout (30 s by default).
   */
  private async attempt(call: KeyedToolCall, options: RequestOptions): Promise<CallToolResult> {
    const cut = new AbortController();
    const { idempotencyKey } = call;
    // Deferred by a turn of the event loop: an answer that did arrive settles the attempt first.
    this.streamEnded.set(idempotencyKey, () => setTimeout(() => cut.abort(), 0));
    const signal = options.signal ? AbortSignal.any([options.signal, cut.signal]) : cut.signal;
    try {
      return await callTool(this.client, call, { ...options, signal });
    } catch (error) {
      if (!cut.signal.aborted || options.signal?.aborted) throw error;
      throw new SdkError(SdkErrorCode.ConnectionClosed, 'The answer stream ended before the answer', {
        cause: error,
      });
    } finally {
      this.streamEnded.delete(idempotencyKey);
    }
  }

  /** The server's read-only tools, listed once: annotations are the server's to change, rarely. */
  private async isReadOnly(name: string): Promise<boolean> {
    this.readOnlyTools ??= this.client.listTools().then(
      ({ tools }) => new Set(tools.filter((t) => t.annotations?.readOnlyHint === true).map((t) => t.name)),
      (error: unknown) => {
        this.readOnlyTools = undefined; // the next call asks again
        throw error;
      },
    );
    return (await this.readOnlyTools).has(name);
  }
}

/**
 * The SDK's Streamable HTTP transport tells `onRequestStreamEnd` when a request's own answer
 * stream ends, answered or not, but its Protocol never asks (SDK 2.4), so a stream broken before
 * the answer is noticed only when the request times out. This wraps `transport.send` once so that
 * every keyed `tools/call` asks, and tells the listener `listenerOf` names for its key at the time
 * it is sent: that attempt's, not a later one's (an abandoned attempt's stream may end while its
 * retry runs). (Transports with one shared channel, stdio, ignore the option.)
 */
function reportStreamEnds(
  transport: Transport,
  listenerOf: (idempotencyKey: string) => (() => void) | undefined,
): void {
  const send = transport.send.bind(transport);
  transport.send = (message: JSONRPCMessage, options?: TransportSendOptions) => {
    const params = 'method' in message && message.method === 'tools/call' ? message.params : undefined;
    const key: unknown = field(params, 'idempotencyKey');
    const ended = typeof key === 'string' ? listenerOf(key) : undefined;
    if (ended === undefined) return send(message, options);
    const onRequestStreamEnd = () => {
      options?.onRequestStreamEnd?.();
      ended();
    };
    return send(message, { ...options, onRequestStreamEnd });
  };
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
