// --- Around one execution: what the guard does beside the SEP while a tool runs ---
//
// The guard (guard.ts) decides; this file is the seam around the one execution it allows: the
// tool runs in an execution context (its provider key, the record's transaction), its claim's
// lease is renewed while it runs, and what it answers, returned or thrown, is captured for the
// record. A server author changing what surrounds a tool call changes this file, not the algorithm.
//
// The other hop: the call's identity, handed to the tool that calls a provider.
// The guard makes a keyed `tools/call` execute at most once per record. It cannot make the
// tool's own call to a payment provider safe: that call crosses another network, where a reset
// socket or a 502 after the provider committed leaves the server as blind as a client that lost
// its answer. The cure is the same one, one hop further: the provider's own idempotency key
// (Stripe's, Adyen's, the IETF `Idempotency-Key` header), which the layer that performs the
// outbound call owns, and which must never change on a retry.
//
// So the guard runs every dispatch inside an execution context (AsyncLocalStorage), and a tool
// asks it for `providerKey(operation)`:
// - a keyed call gets a key derived from its record's identity (the caller's scope, the MCP
//   `idempotencyKey`) and the tool: the same on every re-execution of that record, on any
//   instance, after any restart, so a retry that executes again after a crash sends the provider
//   the key it already committed, and the provider replays instead of charging twice;
// - a call without an MCP key gets a fresh key per execution, the same for every provider call
//   of that execution: the server's own retries toward the provider are safe with no client key.
// The derived key is never the client's key itself: two callers who chose the same MCP key are
// two scopes, hence two provider keys, and a client cannot pick the key the provider sees.

import { AsyncLocalStorage } from 'node:async_hooks';
import { hash, randomUUID } from 'node:crypto';
import type {
  ClaimTicket,
  IdempotencyStore,
  JsonObject,
  StoredResponse,
  WireError,
} from '../stores/contract.js';
import { INTERNAL_ERROR, Messages } from './errors.js';
import type { GuardSettings } from './options.js';
import type { Caller } from './scope.js';

/** The server's own `tools/call` dispatch: parse, run the tool, answer (or throw a JSON-RPC error). */
export type Dispatch = () => Promise<JsonObject>;

/** What the dispatch answered, returned or thrown, and the response a store keeps of it. */
export type Answer =
  | { threw: false; result: JsonObject; stored: StoredResponse }
  | { threw: true; error: unknown; stored: { error: WireError } };

/**
 * Runs a claimed call's dispatch once, in an execution context naming its record (its provider's
 * key, and the store's transaction should the tool write where the record lives), with the claim's
 * lease renewed while it runs: a live call never loses its claim, however long it takes.
 */
export async function aroundExecution(
  call: { id: { scope: string; idempotencyKey: string }; tool: unknown; ticket: ClaimTicket },
  dispatch: Dispatch,
  settings: GuardSettings,
  signal: AbortSignal | undefined,
): Promise<{ answer: Answer; execution: ToolExecution }> {
  const { store } = settings;
  const { begin } = store;
  const execution = new ToolExecution(
    call.id.scope,
    typeof call.tool === 'string' ? call.tool : '',
    call.id.idempotencyKey,
    begin && (() => begin.call(store, call.ticket)),
  );
  const answer = await settings.leases.whileRunning(call.ticket, () =>
    capture(() => runExecution(execution, dispatch)),
  );
  // An error answered after the request was aborted is, as likely as not, the abort itself,
  // reaching a tool that honours it mid-call (a provider call given the signal): whether its
  // side effect happened is unknown. (Over HTTP the SDK fires the signal once the exchange ends,
  // which is after this: a signal aborted now was aborted while the tool ran.)
  if (signal?.aborted && (answer.threw || answer.result.isError === true))
    execution.markOutcomeUnknown(Messages.cancelledMidCall);
  return { answer, execution };
}

/**
 * A call without a key: it executes, with provider keys of its own (unique to the execution, so a
 * scope that cannot be told matters to none of them).
 */
export function runUnkeyed(tool: unknown, caller: Caller, settings: GuardSettings, dispatch: Dispatch) {
  let scope = '';
  try {
    scope = settings.scopeOf(caller);
  } catch {
    // Only salts this execution's own provider keys.
  }
  return runExecution(new ToolExecution(scope, typeof tool === 'string' ? tool : ''), dispatch);
}

/** Runs the dispatch, catching a synchronous throw too: an SDK's own parse may throw before any promise exists. */
async function capture(run: Dispatch): Promise<Answer> {
  try {
    const result = await run();
    return { threw: false, result, stored: { result } };
  } catch (error) {
    return { threw: true, error, stored: { error: asWireError(error) } };
  }
}

/** The error object both SDK lines' Protocol write for a thrown value: its code, message and data. */
function asWireError(error: unknown): WireError {
  const field = (name: string): unknown =>
    typeof error === 'object' && error !== null ? Reflect.get(error, name) : undefined;
  const code = field('code');
  const message = field('message');
  const data = field('data');
  return {
    code: typeof code === 'number' && Number.isSafeInteger(code) ? code : INTERNAL_ERROR,
    message: typeof message === 'string' ? message : 'Internal error',
    ...(data !== undefined && { data }),
  };
}

/** What the guard knows of one execution of a tool, for the tool's outbound calls. */
export class ToolExecution {
  private unknownOutcome: string | undefined;
  /** What makes an unkeyed execution's provider keys its own, minted on first use. */
  private seed: string | undefined;
  private begun: Promise<unknown> | undefined;
  private failedStore: unknown;

  constructor(
    /** The caller's authorization boundary, as the record is kept under it. */
    readonly scope: string,
    /** The tool's name as the client sent it. */
    readonly tool: string,
    /** The client's key; undefined when the call carried none. */
    readonly idempotencyKey?: string,
    /** Begins the store's transaction for this call's record, when the store has them. */
    private readonly begin?: () => Promise<unknown>,
  ) {}

  /**
   * The transaction this call's response will be recorded in, begun on first use: what the tool
   * writes through so that its writes and the record commit together, or neither (a crash at any
   * point leaves both undone, and the retry executes once). Undefined when the call carries no
   * key or the store keeps its records elsewhere: then the tool writes as it would unguarded.
   * The store says what the handle is (the Postgres store: a `pg` client inside `BEGIN`).
   */
  transaction(): Promise<unknown> | undefined {
    if (!this.begin) return undefined;
    this.begun ??= this.begin().catch((error: unknown) => {
      // Nothing the tool meant to write there was written: the guard records nothing of this
      // execution and answers that the store is unavailable (see `settlementOf` in guard.ts).
      this.failedStore = error ?? new Error('the store failed to begin a transaction');
      throw error;
    });
    return this.begun;
  }

  /** Why the record's transaction could not begin, if the tool asked for it and it could not. */
  get storeFailure(): unknown {
    return this.failedStore;
  }

  /** Whether the tool asked for the transaction, so its writes stand or fall with the record. */
  get inTransaction(): boolean {
    return this.begun !== undefined;
  }

  /**
   * The provider's idempotency key for `operation` (one name per distinct provider call the
   * tool makes: `charge`, `refund`). See the file header for why each part is in it.
   */
  providerKey(operation: string): string {
    const origin =
      this.idempotencyKey === undefined ? ['execution', this.unkeyedSeed()] : ['mcp', this.idempotencyKey];
    // JSON of an array of strings is an unambiguous encoding: no two tuples give one string.
    const tuple = JSON.stringify([PROVIDER_KEY_VERSION, this.scope, ...origin, this.tool, operation]);
    return `${PROVIDER_KEY_PREFIX}${hash('sha256', tuple, 'base64url')}`;
  }

  /**
   * Says the tool's outcome is unknown: a provider call gave up on failures that leave open
   * whether it committed (a reset, a timeout, a 502 on every attempt). The guard then records
   * nothing for this execution, so the client's retry with the same MCP key executes again, with
   * the same provider key, and the provider replays or executes: recording the failure instead
   * would leave the client one way forward, a new key, whose new provider key could charge twice.
   */
  markOutcomeUnknown(reason: string): void {
    this.unknownOutcome ??= reason;
  }

  /** Why the outcome is unknown, if a provider call said so. */
  get outcomeUnknown(): string | undefined {
    return this.unknownOutcome;
  }

  private unkeyedSeed(): string {
    this.seed ??= `${PROCESS_NONCE}.${++unkeyedExecutions}`;
    return this.seed;
  }
}

/**
 * With a count of executions, what makes an unkeyed execution's seed unique: random once per
 * process, so no two processes (nor one restarted) count from the same place, with no call into
 * the CSPRNG per execution.
 */
const PROCESS_NONCE = randomUUID();
let unkeyedExecutions = 0;

/** Bump to change every derived key at once (a new derivation must not replay old answers). */
const PROVIDER_KEY_VERSION = 'mcp-provider-key/1';

/** Marks the keys this derivation made, for whoever reads a provider's dashboard. 47 characters in all, within Stripe's 255. */
const PROVIDER_KEY_PREFIX = 'mcp_';

const executions = new AsyncLocalStorage<ToolExecution>();

/** Runs `dispatch` with `execution` as the current one (the guard's part). */
export function runExecution<T>(execution: ToolExecution, dispatch: () => Promise<T>): Promise<T> {
  return executions.run(execution, dispatch);
}

/** The execution the running tool belongs to; undefined outside a guarded `tools/call`. */
export function currentExecution(): ToolExecution | undefined {
  return executions.getStore();
}

/**
 * What a multi-round-trip tool's sealed `requestState` should be bound to (a request-state codec's
 * `bind`, at mint and at verify): the running call's record, its caller's scope and its
 * idempotency key, or that it carries no key. A state minted by the opening round under one key is
 * then refused under any other key and without one, so an answer to one question authorizes one
 * operation: the guard lets a continuation in only where its key awaits input, and once it has
 * completed, replays. (A state minted without a key binds to no key: a call without one executes
 * every time it is sent, its continuation too, as the SEP leaves such calls.) Outside a guarded
 * call, a constant: there is no record to bind to.
 */
export function continuationBinding(): string {
  const execution = currentExecution();
  if (!execution) return 'unguarded';
  return JSON.stringify([execution.scope, execution.idempotencyKey ?? null]);
}

/**
 * The provider key for `operation` in the running tool call (see `ToolExecution.providerKey`).
 * Outside a guarded call (a tool called directly, a server without the guard), a fresh key: it
 * still makes that one provider call's own retries safe, which is all that can be promised there.
 */
export function providerKey(operation: string): string {
  return currentExecution()?.providerKey(operation) ?? `${PROVIDER_KEY_PREFIX}${randomUUID()}`;
}

// --- Lease renewal: a live call never loses its claim ---

/**
 * Renews the lease of every claim whose call is still running, every third of the lease, so only
 * the claim of a process that died (or froze) expires and frees its key for a retry. A third: two
 * renewals in a row can fail (a store blip) before a live claim would expire. A failed renewal is
 * not the caller's problem: the next one may succeed, and at worst the lease runs out, as it would
 * with no renewal at all.
 * One timer for all of a guard's calls, not one per call: a claim joins a set and leaves it, with
 * no Timeout of its own. Its first renewal comes within a third of the lease; a call shorter than
 * that is renewed only if a tick falls inside it.
 */
export class LeaseRenewals {
  private readonly running = new Set<ClaimTicket>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly leaseMs: number,
  ) {}

  private add(ticket: ClaimTicket): void {
    this.running.add(ticket);
    if (this.timer) return;
    this.timer = setInterval(() => this.renewAll(), this.leaseMs / 3);
    // A running call keeps the process alive by itself; its renewal timer must not.
    this.timer.unref();
  }

  /** Runs `run` with `ticket`'s lease renewed until it ends. */
  async whileRunning<T>(ticket: ClaimTicket, run: () => Promise<T>): Promise<T> {
    this.add(ticket);
    try {
      return await run();
    } finally {
      this.running.delete(ticket);
    }
  }

  private renewAll(): void {
    // Stopped at a tick with nothing to renew, not when the last call ends: calls one after
    // another would otherwise start and stop it each time.
    if (this.running.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const ticket of this.running) this.store.renew(ticket, this.leaseMs).catch(() => {});
  }
}
