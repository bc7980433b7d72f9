// --- A payment API over HTTP, with the provider's own idempotency key ---
//
// What a payment SDK does for the tool (stripe-node is the model): one key per operation, sent
// as `Idempotency-Key` on the first attempt and on every retry of it, so a retry after a reset
// socket or a 502 that came after the provider committed is replayed by the provider, not
// committed again. Retried, with the same key: connection failures, timeouts, 502/503/504, and
// 409 (the IETF draft: the same key is still being processed; the only answer a client may
// retry unchanged). Not retried: any other 4xx (the request itself is wrong; a 422 means a key
// met other parameters, a bug in the caller's key derivation; a 402 is a declined charge, which
// the provider stores under the key like a success), and a 500 or an unreadable 200 (the
// provider answered, badly; trying again at once would not make it answer better).
//
// A 409 spends no attempt: the key is held by a request still being processed (this ledger's own
// earlier attempt, abandoned at its timeout, or an earlier execution's), and an answer comes once it
// ends. So 409s are retried for as long as the provider may hold a key in progress
// (`inProgressWindowMs`), counted from the first of them, however many attempts that takes.
//
// When the attempts run out on failures that leave open whether the provider committed, the
// tool's outcome is unknown: the guard is told (`markOutcomeUnknown`), records nothing, and marks
// the answer so a client reads it (`outcomeUnknownOf`), so the client's retry executes again with
// the same key. A hand-written loop, not a retry library: the loop is twenty lines, and which
// answers may be retried under the same key is the lesson.

import { setTimeout as sleep } from 'node:timers/promises';
import { currentExecution, DEFAULT_PROVIDER_KEY_RETENTION_MS } from 'mcp-request-idempotency';
import { ChargeDeclined, type ChargeOptions, type Ledger, type RefundOptions } from '../../../ledger.js';

/** A provider's answer to one operation (docs/provider-wire.md). */
interface ProviderReceipt {
  id: string;
  amount: number;
  balance: number;
}

export interface ProviderLedgerOptions {
  /** Attempts per operation, the first included. Four spans about 1.5 s of backoff at the defaults. */
  attempts?: number;
  /** The first backoff, doubled each retry (full jitter: a random wait up to it). */
  baseDelayMs?: number;
  /** The longest backoff, and the cap on a provider's `Retry-After`. */
  maxDelayMs?: number;
  /** How long one attempt may take: a payment API answers in well under a second, or is in trouble. */
  timeoutMs?: number;
  /**
   * How long the provider may hold a key in progress, processing one request under it: while it
   * answers 409 for the key, the ledger retries for this long after the first 409 (see
   * `defaultInProgressWindowMs`).
   */
  inProgressWindowMs?: number;
  /** Send no `Idempotency-Key` at all: the demo's provider that takes no keys, for contrast. */
  sendKeys?: boolean;
  /** Told of every attempt that failed and will be retried, for the operator's log. */
  onRetry?: (event: ProviderRetry) => void;
  /** How long the provider keeps a key (default 24 h, as the demo's provider and Stripe do). */
  keyRetentionMs?: number;
}

/** One failed attempt, about to be retried with the same key. */
export interface ProviderRetry {
  path: string;
  attempt: number;
  failure: string;
  idempotencyKey?: string;
  delayMs: number;
}

export const DEFAULT_PROVIDER_ATTEMPTS = 4;
export const DEFAULT_PROVIDER_BASE_DELAY_MS = 100;
export const DEFAULT_PROVIDER_MAX_DELAY_MS = 2_000;
export const DEFAULT_PROVIDER_TIMEOUT_MS = 10_000;

/**
 * How long a provider is taken to hold a key in progress, when not told: as long as the ledger waits
 * for one answer (`timeoutMs`), and never less than the default timeout, 10 s, so that a short
 * timeout, set to notice a dead provider quickly, does not cut short the wait for a slow one. A
 * provider is the one to say how long it processes a request (Stripe does not publish it; this
 * project's takes its `--latency-ms`, and well under a second by default): tell the ledger yours.
 *
 * Why not longer by default: past the window the tool's outcome is unknown, the answer says so, and
 * the client retries under the same key (docs/other-hop.md), which the provider then replays or
 * executes once. Waiting longer buys a quicker answer, not a safer one, and past the client's own
 * patience (30 s per attempt in `IdempotentClient`) it answers a client that has given up.
 */
export function defaultInProgressWindowMs(timeoutMs: number): number {
  return Math.max(timeoutMs, DEFAULT_PROVIDER_TIMEOUT_MS);
}

/** A provider's answer that settles the operation: it did not commit, and retrying will not help. */
export class ProviderRefusal extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(`The payment provider refused the request (${status} ${type}): ${message}`);
    this.name = 'ProviderRefusal';
  }
}

/** The provider could not be heard from: whether it committed is unknown. */
export class ProviderUnavailable extends Error {
  constructor(
    readonly attempts: number,
    readonly last: string,
  ) {
    super(
      `The payment provider did not answer after ${attempts} attempt(s) (last: ${last}); ` +
        'whether it committed is unknown. Retry the call with the same idempotencyKey.',
    );
    this.name = 'ProviderUnavailable';
  }
}

export class ProviderLedger implements Ledger {
  private readonly attempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly timeoutMs: number;
  private readonly inProgressWindowMs: number;
  private readonly sendKeys: boolean;
  private readonly onRetry: (event: ProviderRetry) => void;
  readonly providerKeyRetentionMs: number | undefined;

  /** @param url the provider's base URL, e.g. http://127.0.0.1:4242 or https://gateway.example/pay/v1 */
  constructor(
    readonly url: URL,
    options: ProviderLedgerOptions = {},
  ) {
    this.attempts = options.attempts ?? DEFAULT_PROVIDER_ATTEMPTS;
    this.baseDelayMs = options.baseDelayMs ?? DEFAULT_PROVIDER_BASE_DELAY_MS;
    this.maxDelayMs = options.maxDelayMs ?? DEFAULT_PROVIDER_MAX_DELAY_MS;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_PROVIDER_TIMEOUT_MS;
    this.inProgressWindowMs = options.inProgressWindowMs ?? defaultInProgressWindowMs(this.timeoutMs);
    this.sendKeys = options.sendKeys ?? true;
    this.onRetry = options.onRetry ?? (() => {});
    this.providerKeyRetentionMs = this.sendKeys
      ? (options.keyRetentionMs ?? DEFAULT_PROVIDER_KEY_RETENTION_MS)
      : undefined;
  }

  async charge(amount: number, { idempotencyKey }: ChargeOptions = {}): Promise<number> {
    return (await this.post('/charges', { amount }, idempotencyKey)).balance;
  }

  async refund(amount: number, { orderId, idempotencyKey }: RefundOptions = {}): Promise<number> {
    return (await this.post('/refunds', { orderId: orderId ?? 'unnamed', amount }, idempotencyKey)).balance;
  }

  async balance(): Promise<number> {
    const answer = await fetch(this.endpoint('/balance'), {
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    return numberField(await answer.json(), 'balance');
  }

  async reset(): Promise<void> {
    await fetch(this.endpoint('/reset'), { method: 'POST', signal: AbortSignal.timeout(this.timeoutMs) });
  }

  /**
   * `path` under the base URL, its own path kept: `new URL('/charges', base)` would send a
   * provider reached at `https://gateway.example/pay/v1` its charges at `/charges`.
   */
  private endpoint(path: string): URL {
    const base = this.url.pathname.endsWith('/') ? this.url : new URL(`${this.url.pathname}/`, this.url);
    return new URL(`.${path}`, base);
  }

  /**
   * One operation: the same body and the same key on every attempt. Each failure spends one of
   * `attempts`, but a 409: the key is in use until `inProgressWindowMs` after the first 409.
   */
  private async post(
    path: string,
    body: object,
    idempotencyKey: string | undefined,
  ): Promise<ProviderReceipt> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const key = this.sendKeys ? idempotencyKey : undefined;
    if (key !== undefined) headers['idempotency-key'] = key;
    const payload = JSON.stringify(body);
    let last = '';
    let failures = 0;
    let inUseUntil: number | undefined;
    for (let attempt = 1; ; attempt += 1) {
      let retryAfterMs: number | undefined;
      let inUse = false;
      try {
        const answer = await fetch(this.endpoint(path), {
          method: 'POST',
          headers,
          body: payload,
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        const text = await answer.text();
        if (answer.ok) return receiptOf(text);
        const error = errorOf(text);
        if (answer.status === DECLINED_STATUS && error.type === DECLINED_TYPE) throw declinedOf(text, error);
        if (!RETRIED_STATUSES.has(answer.status)) {
          if (answer.status >= 500)
            throw unknownOutcome(new ProviderUnavailable(attempt, `${answer.status} ${error.type}`));
          throw new ProviderRefusal(answer.status, error.type, error.message);
        }
        last = `${answer.status} ${error.type}`;
        inUse = answer.status === IN_USE_STATUS;
        retryAfterMs = retryAfterOf(answer.headers.get('retry-after'));
      } catch (error) {
        if (
          error instanceof ProviderRefusal ||
          error instanceof ProviderUnavailable ||
          error instanceof ChargeDeclined
        )
          throw error;
        // A reset, a refused connection, a timeout: the request may or may not have arrived.
        last = describeFailure(error);
      }
      if (inUse) inUseUntil ??= performance.now() + this.inProgressWindowMs;
      else failures += 1;
      const again = inUse ? performance.now() < (inUseUntil ?? 0) : failures < this.attempts;
      if (!again) throw unknownOutcome(new ProviderUnavailable(attempt, last));
      const delayMs = Math.round(this.backoff(attempt, retryAfterMs));
      this.onRetry({ path, attempt, failure: last, idempotencyKey: key, delayMs });
      await sleep(delayMs);
    }
  }

  /** Full jitter (a random wait up to the doubled ceiling), so retrying instances don't stampede. */
  private backoff(attempt: number, retryAfterMs: number | undefined): number {
    const ceiling = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (attempt - 1));
    return Math.min(this.maxDelayMs, Math.max(retryAfterMs ?? 0, Math.random() * ceiling));
  }
}

/** Answers that leave the operation to be retried with the same key (the IETF draft: 409 is one). */
const RETRIED_STATUSES = new Set([409, 502, 503, 504]);

/** The key is still being processed (docs/provider-wire.md: `idempotency_key_in_use`). */
const IN_USE_STATUS = 409;

/** A declined charge on the wire (docs/provider-wire.md): Stripe's status and type for a card decline. */
const DECLINED_STATUS = 402;
const DECLINED_TYPE = 'card_declined';

/**
 * The provider's decline as every ledger says one: its amount, the limit and the provider's
 * number for it. A decline that lacks them is still a refusal, never a reason to retry.
 */
function declinedOf(
  text: string,
  error: { type: string; message: string },
): ChargeDeclined | ProviderRefusal {
  // errorOf read this type from the body, so the body is JSON.
  const body = fieldOf(JSON.parse(text), 'error');
  const [amount, limit, decline] = ['amount', 'limit', 'decline'].map((name) => fieldOf(body, name));
  return typeof amount === 'number' && typeof limit === 'number' && typeof decline === 'number'
    ? new ChargeDeclined(amount, limit, decline)
    : new ProviderRefusal(DECLINED_STATUS, error.type, error.message);
}

/** Tells the guard this call's outcome is unknown, and hands the error on for the tool to throw. */
function unknownOutcome(error: ProviderUnavailable): ProviderUnavailable {
  currentExecution()?.markOutcomeUnknown(error.last);
  return error;
}

function receiptOf(text: string): ProviderReceipt {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const id = fieldOf(parsed, 'id');
  const amount = fieldOf(parsed, 'amount');
  const balance = fieldOf(parsed, 'balance');
  if (typeof id !== 'string' || typeof amount !== 'number' || typeof balance !== 'number')
    // It answered 200 and may well have committed, but not what it committed: unknown.
    throw unknownOutcome(
      new ProviderUnavailable(1, `an unreadable 200 (${JSON.stringify(text.slice(0, 40))})`),
    );
  return { id, amount, balance };
}

function errorOf(text: string): { type: string; message: string } {
  let error: unknown;
  try {
    error = fieldOf(JSON.parse(text), 'error');
  } catch {
    return { type: 'unknown', message: text.slice(0, 200) };
  }
  const type = fieldOf(error, 'type');
  const message = fieldOf(error, 'message');
  return {
    type: typeof type === 'string' ? type : 'unknown',
    message: typeof message === 'string' ? message : text.slice(0, 200),
  };
}

function numberField(value: unknown, name: string): number {
  const field = fieldOf(value, name);
  if (typeof field !== 'number')
    throw new Error(`the payment provider's answer has no ${name}: ${JSON.stringify(value)}`);
  return field;
}

function fieldOf(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}

/** `Retry-After` in seconds (the only form the wire uses); anything else is ignored. */
function retryAfterOf(header: string | null): number | undefined {
  const seconds = header === null ? Number.NaN : Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

function describeFailure(error: unknown): string {
  if (error instanceof Error && error.name === 'TimeoutError') return 'timed out';
  const cause = error instanceof Error ? error.cause : undefined;
  const code = fieldOf(cause, 'code');
  return typeof code === 'string' ? code : error instanceof Error ? error.message : String(error);
}
