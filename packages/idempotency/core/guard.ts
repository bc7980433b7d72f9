// --- Protocol-level idempotency dispatch (SEP-3182) ---
//
// The guard sits in front of a server's `tools/call` dispatch, so it applies to every tool and
// no tool body carries idempotency logic. It knows no SDK: it takes the raw params as they came
// off the wire, the caller's scope and a dispatch to call, and an adapter per SDK line
// (`sdk/v2.ts`, `sdk/v1.ts`) puts it in front of that line's dispatch. `guardToolCall` reads top
// to bottom as the SEP's algorithm: no key → validate → fingerprint → claim → conflict? → in
// progress? → replay → execute once and record. The last step is `executeOnce`: run the dispatch
// (its lease renewed), `settle` the claim with the answer (complete it, await input, or release
// it), and answer the caller.
//
// One word per concept: the dispatch *answers*; the guard *settles* the claim with that answer;
// a tool's *outcome* is whether its side effect happened, which a provider call may leave unknown.
// Multi-round-trip calls (2026-07-28) are this project's choice, since the SEP leaves them out of
// its scope: a round that answers `input_required` is not final; the key waits for its
// continuation ("awaiting input"), and `settlementOf` says how each answer settles it.

import type {
  Claim,
  ClaimTicket,
  IdempotencyStore,
  JsonObject,
  RecordId,
  StoredResponse,
  WireError,
} from '../stores/contract.js';
import { MAX_RETENTION_MS } from '../stores/contract.js';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  idempotencyError,
  isRefusedContinuation,
  JsonRpcError,
  Messages,
} from './errors.js';
import { runExecution, ToolExecution } from './execution.js';
import { fingerprintToolCall } from './fingerprint.js';
import { checkIdempotencyKey } from './key.js';
import { type Caller, principalScope, ScopeUnknownError } from './scope.js';

/**
 * How long the providers a tool calls with `providerKey` keep an idempotency key and replay its
 * answer: Stripe's 24 hours (the longest of the payment APIs'; Adyen and the IETF draft leave it
 * to the provider). Tell the guard your provider's (`providerKeyRetentionMs`), or 0 when no tool
 * sends a derived key anywhere.
 */
export const DEFAULT_PROVIDER_KEY_RETENTION_MS = 24 * 60 * 60 * 1000;

/**
 * How long a completed record is kept and replayed: as long as the provider keeps its key, so a
 * key reused for a new operation once its record is gone reaches a provider that has forgotten
 * the old one. The derived provider key depends only on the caller's scope, the MCP key and the
 * tool, and must, so that a retry that executes again after a crash (on another instance, after a
 * restart) sends the key the provider already committed. Forgotten by the guard and still known to
 * the provider, a reused key would be replayed the old operation's answer: charged nothing,
 * told it succeeded. (The prototype kept 300 s.)
 */
export const DEFAULT_RETENTION_MS = DEFAULT_PROVIDER_KEY_RETENTION_MS;

/**
 * How long an in-progress claim holds its key if the instance running it dies and never
 * completes it: the wait a retry of a crashed call faces before it may execute. A live call
 * renews its claim every third of this, so it bounds no call's duration. Twice the SDK
 * client's default request timeout (60 s).
 */
export const DEFAULT_LEASE_MS = 120_000;

/**
 * How long a key awaits the continuation of a round that answered `input_required`: the v2 SDK's
 * request-state codec's default TTL (600 s). A continuation after that carries an expired
 * `requestState` anyway, so holding the key longer would only replay a question nobody can answer.
 */
export const DEFAULT_AWAITING_INPUT_RETENTION_MS = 600_000;

export type Decision =
  | 'executed'
  /** A round ran and answered `input_required`: the key awaits its continuation. */
  | 'awaitingInput'
  /** A continuation was refused before anything ran: the key is as it was. */
  | 'continuationRefused'
  | 'replayed'
  | 'conflict'
  | 'inProgress'
  | 'invalid'
  /** The caller's scope could not be told (`scopeOf` threw): refused, nothing executed. */
  | 'scopeUnknown'
  | 'storeFull'
  | 'quotaExceeded'
  | 'storeUnavailable'
  /** Executed and answered, but not recorded (store failure, or the lease ran out): a retry may execute again. */
  | 'unrecorded';

export interface DecisionEvent {
  decision: Decision;
  scope?: string;
  idempotencyKey?: string;
  tool?: string;
  message?: string;
  durationMs: number;
}

export interface IdempotencyGuardOptions {
  store: IdempotencyStore;
  /** How long a completed record is replayed; at least `providerKeyRetentionMs`. */
  retentionMs?: number;
  /**
   * How long the providers your tools call with `providerKey` keep a key (0: no tool does). The
   * guard refuses a `retentionMs` shorter than this: see `DEFAULT_RETENTION_MS`.
   */
  providerKeyRetentionMs?: number;
  leaseMs?: number;
  /** How long a key awaits a continuation; match it to the TTL of your `requestState`. */
  awaitingInputRetentionMs?: number;
  /**
   * The caller's authorization boundary (an OAuth principal, the local user, a workspace).
   * SEP: one caller's key must never replay another caller's result. By default
   * `principalScope`: the verified token's subject, or the local user without a token. A
   * function that cannot tell throws; the keyed call is then refused, nothing executed.
   */
  scopeOf?: (caller: Caller) => string;
  /** One call per keyed decision, for the operator's log. */
  onDecision?: (event: DecisionEvent) => void;
}

/** The capability a server advertises: `capabilities.tools.idempotency`, intentionally empty. */
export const IDEMPOTENCY_CAPABILITY = { idempotency: {} } as const;

/** The server's own `tools/call` dispatch: parse, run the tool, answer (or throw a JSON-RPC error). */
export type Dispatch = () => Promise<JsonObject>;

/**
 * The guard an adapter installs: raw `tools/call` params (before any SDK schema strips the
 * key), the caller, the dispatch to run at most once per key, and the request's abort signal
 * (which the SDK fires when the client cancels or hangs up).
 */
export type ToolCallGuard = (
  params: Readonly<Record<string, unknown>>,
  caller: Caller,
  dispatch: Dispatch,
  signal?: AbortSignal,
) => Promise<JsonObject>;

export function createToolCallGuard(options: IdempotencyGuardOptions): ToolCallGuard {
  const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
  const providerKeyRetentionMs = options.providerKeyRetentionMs ?? DEFAULT_PROVIDER_KEY_RETENTION_MS;
  const awaitingInputRetentionMs = options.awaitingInputRetentionMs ?? DEFAULT_AWAITING_INPUT_RETENTION_MS;
  // At most what every store keeps: one that took less would fail each key closed, for good.
  for (const [name, ms] of Object.entries({ retentionMs, leaseMs, awaitingInputRetentionMs })) {
    if (!(Number.isFinite(ms) && ms > 0 && ms <= MAX_RETENTION_MS))
      throw new RangeError(`${name} must be a positive number of ms up to ${MAX_RETENTION_MS}, got ${ms}`);
  }
  if (!(retentionMs >= providerKeyRetentionMs)) {
    throw new RangeError(Messages.retentionBelowProviderKeys(retentionMs, providerKeyRetentionMs));
  }
  const settings: GuardSettings = {
    store: options.store,
    retentionMs,
    providerKeyRetentionMs,
    leaseMs,
    awaitingInputRetentionMs,
    scopeOf: options.scopeOf ?? principalScope,
    onDecision: options.onDecision ?? (() => {}),
    leases: new LeaseRenewals(options.store, leaseMs),
  };
  return (params, caller, dispatch, signal) => guardToolCall(params, caller, dispatch, settings, signal);
}

type GuardSettings = Required<IdempotencyGuardOptions> & { leases: LeaseRenewals };

/** The SEP's algorithm for one `tools/call`, in its order. */
async function guardToolCall(
  params: Readonly<Record<string, unknown>>,
  caller: Caller,
  dispatch: Dispatch,
  settings: GuardSettings,
  signal: AbortSignal | undefined,
): Promise<JsonObject> {
  const tool = typeof params.name === 'string' ? params.name : '';
  // SEP: no key, exactly today's behaviour. Every call executes, with provider keys of its own
  // (unique to the execution, so a scope that cannot be told matters to none of them).
  if (!Object.hasOwn(params, 'idempotencyKey'))
    return runExecution(new ToolExecution(unkeyedScope(caller, settings.scopeOf), tool), dispatch);

  const log = new DecisionLog(settings.onDecision, params.name);

  // The key must be something a store can hold and a log can print.
  const key = checkIdempotencyKey(params.idempotencyKey);
  if (!key.ok) {
    log.decide('invalid', {}, key.message);
    throw idempotencyError(IdempotencyErrorType.invalid, key.message);
  }
  const { key: idempotencyKey } = key;

  // SEP equivalence: same tool name, `arguments` equal as parsed JSON, as sent on the wire.
  const fingerprint = fingerprintToolCall(params.name, params.arguments);
  if (!fingerprint.ok) {
    const message = Messages.argumentsUnfingerprintable(fingerprint.reason);
    log.decide('invalid', { idempotencyKey }, message);
    throw idempotencyError(IdempotencyErrorType.invalid, message, idempotencyKey);
  }

  // MRTR: a continuation is the same call again, with the client's `inputResponses` and the
  // echoed `requestState` beside the same name, arguments and key (neither enters the fingerprint).
  const continuation = Object.hasOwn(params, 'inputResponses') || Object.hasOwn(params, 'requestState');

  // SEP: the record is scoped to the authorization boundary that governs the call. A caller whose
  // boundary cannot be told is refused: any guess could replay another caller's response.
  let scope: string;
  try {
    scope = settings.scopeOf(caller);
  } catch (error) {
    const message = error instanceof ScopeUnknownError ? error.message : Messages.scopeUnknown(String(error));
    log.decide('scopeUnknown', { idempotencyKey }, message);
    throw idempotencyError(IdempotencyErrorType.scopeUnknown, message, idempotencyKey);
  }

  // One atomic store operation either claims the key or returns what already holds it. A
  // continuation of a key awaiting input claims it; a repeat of the opening round does not.
  const id: RecordId = { scope, idempotencyKey };
  let claim: Claim;
  try {
    claim = await settings.store.claim(id, fingerprint.fingerprint, settings.leaseMs, continuation);
  } catch (error) {
    // Fail closed: executing without a record would let the retry charge again.
    log.decide('storeUnavailable', id, String(error));
    throw idempotencyError(IdempotencyErrorType.storeUnavailable, Messages.storeUnavailable, idempotencyKey);
  }

  if (claim.state === 'full') {
    log.decide('storeFull', id);
    throw idempotencyError(IdempotencyErrorType.storeFull, Messages.storeFull, idempotencyKey);
  }
  // SEP: "Servers SHOULD apply the same rate-limiting and resource-quota mechanisms … to their
  // idempotency records." One caller past its own quota is refused; every other caller goes on.
  if (claim.state === 'quotaExceeded') {
    log.decide('quotaExceeded', id);
    throw idempotencyError(IdempotencyErrorType.quotaExceeded, Messages.quotaExceeded, idempotencyKey);
  }

  if (claim.state !== 'claimed') {
    // SEP: another request under this key is rejected, never executed and never replayed.
    // Checked before "in progress" because it is final: retrying later cannot help.
    if (claim.fingerprint !== fingerprint.fingerprint) {
      log.decide('conflict', id);
      throw idempotencyError(IdempotencyErrorType.conflict, Messages.conflict, idempotencyKey);
    }
    // SEP: never a second execution, and never block the duplicate: answer at once.
    if (claim.state === 'inProgress') {
      log.decide('inProgress', id);
      throw idempotencyError(IdempotencyErrorType.inProgress, Messages.inProgress, idempotencyKey);
    }
    // SEP: the stored response, success or error, with nothing marking it as a replay. For a key
    // awaiting input that is its `input_required` again: the opening round never runs twice.
    log.decide('replayed', id);
    return replay(claim.response);
  }

  // The only path that executes: the claim is ours.
  return executeOnce({ id, tool, continuation, ticket: claim.ticket, log }, dispatch, settings, signal);
}

// --- Execute once and record ---

/** A keyed call whose claim the guard holds: what executing it and settling its claim need. */
interface ClaimedCall {
  id: RecordId;
  tool: string;
  continuation: boolean;
  ticket: ClaimTicket;
  log: DecisionLog;
}

/**
 * Runs the dispatch once and settles the claim with its answer. Whatever the dispatch answers is
 * recorded, errors included, but for an answer that does not say what happened (see
 * `settlementOf`). A tool that ignores the SDK's abort (a client that hung up, a stdio input
 * that ended) runs to its end and its answer is recorded, so the retry replays it.
 */
async function executeOnce(
  call: ClaimedCall,
  dispatch: Dispatch,
  settings: GuardSettings,
  signal: AbortSignal | undefined,
): Promise<JsonObject> {
  // The tool runs in an execution context naming this record: its provider's key, and the
  // store's transaction, should the tool write where the record lives.
  const { store } = settings;
  const { begin } = store;
  const execution = new ToolExecution(
    call.id.scope,
    call.tool,
    call.id.idempotencyKey,
    begin && (() => begin.call(store, call.ticket)),
  );
  // While it runs, the lease is renewed: a live call never loses its claim, however long it takes.
  const answer = await settings.leases.whileRunning(call.ticket, () =>
    capture(() => runExecution(execution, dispatch)),
  );
  // An error answered after the request was aborted is, as likely as not, the abort itself,
  // reaching a tool that honours it mid-call (a provider call given the signal): whether its
  // side effect happened is unknown. (Over HTTP the SDK fires the signal once the exchange ends,
  // which is after this: a signal aborted now was aborted while the tool ran.)
  if (signal?.aborted && answeredError(answer)) execution.markOutcomeUnknown(Messages.cancelledMidCall);
  const settlement = settlementOf(answer, call.continuation, execution);
  const settled = await settle(call, settlement, answer, settings, execution);
  return answerTheCaller(call, settlement, settled, answer, settings, execution);
}

/**
 * Settles the claim as `settlement` says (complete it, await input, or release it) and tells the
 * operator what became of the call. True if the store settled it; false if the claim had lost its
 * key or the store failed. A store failing here costs the record, not the answer: the caller still
 * gets it, and only a retry of a lost answer could execute again, once the lease expires. That is
 * the at-least-once window the SEP leaves to servers.
 */
async function settle(
  { id, ticket, log }: ClaimedCall,
  settlement: Settlement,
  answer: Answer,
  settings: GuardSettings,
  execution: ToolExecution,
): Promise<boolean> {
  try {
    const settled = await settleInStore(ticket, settlement, answer, settings);
    // A store failure is logged with the answer (`answerTheCaller`).
    if (settlement === 'storeFailed') return settled;
    if (settlement === 'outcomeUnknown')
      log.decide('unrecorded', id, Messages.outcomeUnknown(execution.outcomeUnknown));
    else if (settled || settlement === 'continuationRefused') log.decide(settlement, id);
    // Not recorded: the claim lost its key while the call ran (its renewals failed until the lease
    // ran out and a retry claimed the key, or the store was cleared). The operator should know.
    else log.decide('unrecorded', id, Messages.leaseOutlived);
    return settled;
  } catch (error) {
    if (settlement !== 'storeFailed') log.decide('unrecorded', id, String(error));
    return false;
  }
}

/** The store's side of settling: an answer to keep is completed or awaits input; nothing to keep, released. */
function settleInStore(
  ticket: ClaimTicket,
  settlement: Settlement,
  answer: Answer,
  { store, retentionMs, awaitingInputRetentionMs, leaseMs }: GuardSettings,
): Promise<boolean> {
  switch (settlement) {
    case 'executed':
      return store.complete(ticket, answer.stored, retentionMs);
    case 'awaitingInput':
      return store.awaitInput(ticket, answer.stored, awaitingInputRetentionMs);
    default:
      return releaseSoon(store, ticket, leaseMs);
  }
}

/** What the caller gets once the claim is settled: the dispatch's answer, unless it cannot be kept. */
async function answerTheCaller(
  { id, ticket, log }: ClaimedCall,
  settlement: Settlement,
  settled: boolean,
  answer: Answer,
  settings: GuardSettings,
  execution: ToolExecution,
): Promise<JsonObject> {
  // The tool could not get the record's transaction, so nothing it meant to write there was
  // written: its answer (an error of the store's) is not the operation's, and is not recorded.
  // The caller gets the store's own answer: nothing happened, retry later with the same key.
  if (settlement === 'storeFailed') {
    log.decide('storeUnavailable', id, String(execution.storeFailure));
    throw idempotencyError(
      IdempotencyErrorType.storeUnavailable,
      Messages.storeUnavailable,
      id.idempotencyKey,
    );
  }
  // The tool wrote in the record's transaction: unrecorded, its writes were rolled back with it
  // (or, if the commit's answer was lost, committed with it). Its answer would be a lie either way;
  // the retry with the same key replays or executes, once.
  if (execution.inTransaction && !settled && settlement !== 'continuationRefused') {
    await releaseSoon(settings.store, ticket, settings.leaseMs).catch(() => {});
    throw idempotencyError(IdempotencyErrorType.storeUnavailable, Messages.rolledBack, id.idempotencyKey);
  }
  if (answer.threw) throw answer.error;
  return answer.result;
}

/**
 * Releases the claim of a call that recorded nothing. If the store fails to, the release is tried
 * again in the background, backing off from 100 ms to 5 s, until it succeeds or the lease would
 * have ended anyway: a claim left standing after a short store stall would answer every retry
 * "in progress" for the rest of its lease, though nothing holds it.
 */
async function releaseSoon(store: IdempotencyStore, ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
  try {
    return await store.release(ticket);
  } catch (error) {
    const deadline = performance.now() + leaseMs;
    const retry = (delayMs: number) => {
      if (performance.now() + delayMs >= deadline) return;
      const timer = setTimeout(() => {
        store.release(ticket).catch(() => retry(Math.min(delayMs * 2, 5_000)));
      }, delayMs);
      // A process with nothing else to do may exit: its claim then ends with its lease.
      timer.unref();
    };
    retry(100);
    throw error;
  }
}

/** An unkeyed call's scope, which only salts its execution's own provider keys. */
function unkeyedScope(caller: Caller, scopeOf: (caller: Caller) => string): string {
  try {
    return scopeOf(caller);
  } catch {
    return '';
  }
}

/**
 * How one round's answer settles its key. The SEP covers single-round calls: whatever they
 * answer is final. For multi-round-trip calls, which it leaves open, this project chooses:
 * - `input_required` is never final. The key awaits the continuation, holding that answer, which
 *   a repeat of the opening round gets again; the continuation runs (`claim` lets it in).
 * - Any other answer, a result or an error, is final, from whichever round gave it: replayed to
 *   every later call with the key and equivalent arguments, continuation fields or not.
 * - A continuation refused before anything ran (a forged, expired or another caller's
 *   `requestState`: see `isRefusedContinuation`) settles nothing. Recording it would poison the
 *   key; the key goes back to awaiting input, or to no record if there was none. (An answer the
 *   tool cannot use is the tool's to handle: the SDK's way is to ask again.)
 * - A round whose tool said its outcome is unknown (a provider call that gave up without knowing
 *   whether it committed: `ToolExecution.markOutcomeUnknown`) settles nothing either, the same
 *   way: the retry executes again and sends the provider the same key, which the provider
 *   replays. Recording it would make the failure final and leave the client only a new key.
 *   So does an error answered once the request was aborted (the abort, as a tool that honours
 *   it reports it).
 * - A round whose tool could not get the record's transaction (the store unreachable, its pool
 *   busy) settles nothing, and is answered as the store's failure: nothing was written, retry.
 */
function settlementOf(answer: Answer, continuation: boolean, execution: ToolExecution): Settlement {
  if (execution.storeFailure !== undefined) return 'storeFailed';
  if (execution.outcomeUnknown !== undefined) return 'outcomeUnknown';
  if (!answer.threw) return answer.result.resultType === 'input_required' ? 'awaitingInput' : 'executed';
  return continuation && isRefusedContinuation(answer.stored.error) ? 'continuationRefused' : 'executed';
}

type Settlement = 'executed' | 'awaitingInput' | 'continuationRefused' | 'outcomeUnknown' | 'storeFailed';

/**
 * Renews the lease of every claim whose call is still running, every third of the lease, so only
 * the claim of a process that died (or froze) expires and frees its key for a retry. A third: two
 * renewals in a row can fail (a store blip) before a live claim would expire. A failed renewal is
 * not the caller's problem: the next one may succeed, and at worst the lease runs out, which is
 * what happened before any renewal.
 * One timer for all of a guard's calls, not one per call: a claim joins a set and leaves it, where
 * a timer of its own cost a Timeout and two timer-list operations per call (about 0.5 µs). Its
 * first renewal comes within a third of the lease, as before; a call shorter than that is
 * renewed only if a tick falls inside it.
 */
class LeaseRenewals {
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

/**
 * Tells `onDecision` what was decided for one keyed call, and how long deciding took.
 * (A class, not a closure made per call: under tsx, esbuild names every such closure with
 * Object.defineProperty as it is made, which showed up in the benchmark's profile.)
 */
class DecisionLog {
  private readonly started = performance.now();
  private readonly tool: string | undefined;

  constructor(
    private readonly onDecision: (event: DecisionEvent) => void,
    name: unknown,
  ) {
    this.tool = typeof name === 'string' ? name : undefined;
  }

  decide(decision: Decision, id?: Partial<RecordId>, message?: string): void {
    try {
      this.onDecision({
        decision,
        ...id,
        tool: this.tool,
        message,
        durationMs: roundMs(performance.now() - this.started),
      });
    } catch {
      // A failing log line must never change what the caller is answered.
    }
  }
}

/** What the dispatch answered, returned or thrown, and the response a store keeps of it. */
type Answer =
  | { threw: false; result: JsonObject; stored: StoredResponse }
  | { threw: true; error: unknown; stored: { error: WireError } };

/** Runs the dispatch, catching a synchronous throw too: an SDK's own parse may throw before any promise exists. */
async function capture(run: Dispatch): Promise<Answer> {
  try {
    const result = await run();
    return { threw: false, result, stored: { result } };
  } catch (error) {
    return { threw: true, error, stored: { error: asWireError(error) } };
  }
}

/** Whether the dispatch answered an error: a JSON-RPC error, or a tool result marked `isError`. */
function answeredError(answer: Answer): boolean {
  return answer.threw || answer.result.isError === true;
}

function replay(response: StoredResponse): JsonObject {
  if ('result' in response) return response.result;
  const { code, message, data } = response.error;
  throw new JsonRpcError(code, message, data);
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

function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
