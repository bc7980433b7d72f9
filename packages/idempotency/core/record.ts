// --- Execute once and record: the half of the guard that holds a claim ---
//
// `guardToolCall` (guard.ts) decides; once it holds the key's claim, `executeOnce` runs the
// dispatch with its lease renewed, says how the answer settles the claim (`settlementOf`: complete
// it, await input, or release it), settles it in the store, and answers the caller. Every way a
// call can end without its record is here, and each is told to the operator by the word it
// settles by.

import type {
  ClaimTicket,
  IdempotencyStore,
  JsonObject,
  RecordId,
  StoredResponse,
  WireError,
} from '../stores/contract.js';
import type { Decision, DecisionLog } from './decisions.js';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  idempotencyError,
  isMissingClientCapability,
  isRefusedContinuation,
  Messages,
  OUTCOME_META_KEY,
  outcomeUnknownData,
} from './errors.js';
import { runExecution, ToolExecution } from './execution.js';
import type { GuardSettings } from './options.js';

/** The server's own `tools/call` dispatch: parse, run the tool, answer (or throw a JSON-RPC error). */
export type Dispatch = () => Promise<JsonObject>;

/** A keyed call whose claim the guard holds: what executing it and settling its claim need. */
export interface ClaimedCall {
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
export async function executeOnce(
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
    if (settlement === 'storeUnavailable') return settled;
    if (settlement === 'unrecorded')
      log.decide(settlement, id, Messages.outcomeUnknown(execution.outcomeUnknown));
    else if (settlement === 'capabilityMissing') log.decide(settlement, id, Messages.capabilityMissing);
    else if (settled || settlement === 'continuationRefused') log.decide(settlement, id);
    // Not recorded: the claim lost its key while the call ran (its renewals failed until the lease
    // ran out and a retry claimed the key, or the store was cleared). The operator should know.
    else log.decide('unrecorded', id, Messages.leaseOutlived);
    return settled;
  } catch (error) {
    if (settlement !== 'storeUnavailable') log.decide('unrecorded', id, String(error));
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
  if (settlement === 'storeUnavailable') {
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
  if (execution.inTransaction && !settled && !NOTHING_RAN.has(settlement)) {
    await releaseSoon(settings.store, ticket, settings.leaseMs).catch(() => {});
    throw idempotencyError(IdempotencyErrorType.storeUnavailable, Messages.rolledBack, id.idempotencyKey);
  }
  // Nothing recorded, and whether the tool's side effect happened unknown: the answer says so in a
  // form a client reads (errors.ts, `outcomeUnknownOf`), so that its retry keeps the key.
  if (settlement === 'unrecorded') return outcomeUnknownAnswer(answer, id.idempotencyKey);
  if (answer.threw) throw answer.error;
  return answer.result;
}

/** The settlements of a round in which nothing acted: the claim is released, the key as it was. */
const NOTHING_RAN: ReadonlySet<Settlement> = new Set(['continuationRefused', 'capabilityMissing']);

/**
 * The answer of a call whose outcome is unknown, marked: a tool result keeps what it says and
 * carries the marker in its `_meta`; a JSON-RPC error is answered as `idempotency_outcome_unknown`,
 * in the dispatch's words where it had some.
 */
function outcomeUnknownAnswer(answer: Answer, idempotencyKey: string): JsonObject {
  const marker = outcomeUnknownData(idempotencyKey);
  if (!answer.threw) {
    const meta = answer.result._meta;
    const kept = typeof meta === 'object' && meta !== null ? meta : {};
    return { ...answer.result, _meta: { ...kept, [OUTCOME_META_KEY]: marker } };
  }
  const { message } = answer.stored.error;
  throw idempotencyError(marker.type, message || Messages.outcomeUnknownAnswer, idempotencyKey);
}

/**
 * Releases the claim of a call that recorded nothing. If the store fails to, the release is tried
 * again in the background, backing off from 100 ms to 5 s, until it succeeds or the lease would
 * have ended anyway: a claim left standing after a short store stall would answer every retry
 * "in progress" for the rest of its lease, though nothing holds it.
 */
export async function releaseSoon(
  store: IdempotencyStore,
  ticket: ClaimTicket,
  leaseMs: number,
): Promise<boolean> {
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

/**
 * How one round's answer settles its key. The SEP covers single-round calls: whatever they
 * answer is final. For multi-round-trip calls, which it leaves open, this project chooses:
 * - `input_required` is never final. The key awaits the continuation, holding that answer, which
 *   a repeat of the opening round gets again; the continuation runs (`claim` lets it in).
 * - Any other answer, a result or an error, is final, from whichever round gave it: replayed to
 *   every later call with the key and equivalent arguments, continuation fields or not.
 * - A continuation refused before anything ran (a forged, expired or another caller's
 *   `requestState`, or one minted under another key: see `isRefusedContinuation`) settles nothing.
 *   Recording it would poison the key; the key goes back to awaiting input. (An answer the tool
 *   cannot use is the tool's to handle: the SDK's way is to ask again.)
 * - A round whose question the client cannot be asked (it lacks the capability: -32021, see
 *   `isMissingClientCapability`) settles nothing either: the tool asked instead of acting, and the
 *   same key must run once the client declares the capability, as after any question.
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
  if (execution.storeFailure !== undefined) return 'storeUnavailable';
  if (execution.outcomeUnknown !== undefined) return 'unrecorded';
  if (!answer.threw) return answer.result.resultType === 'input_required' ? 'awaitingInput' : 'executed';
  if (continuation && isRefusedContinuation(answer.stored.error)) return 'continuationRefused';
  return isMissingClientCapability(answer.stored.error) ? 'capabilityMissing' : 'executed';
}

/**
 * How a round's answer settles its claim, in the words of the decision the operator is told: a
 * settlement that keeps the answer completes the claim (`executed`) or holds it for the
 * continuation (`awaitingInput`); the other four release it.
 */
type Settlement = Extract<
  Decision,
  | 'executed'
  | 'awaitingInput'
  | 'continuationRefused'
  | 'capabilityMissing'
  | 'unrecorded'
  | 'storeUnavailable'
>;

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
