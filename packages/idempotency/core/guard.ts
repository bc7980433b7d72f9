// --- Protocol-level idempotency dispatch (SEP-3182) ---
//
// The guard sits in front of a server's `tools/call` dispatch, so it covers every tool and no tool
// body carries idempotency logic. It knows no SDK (an adapter per SDK line, `sdk/v2.ts` and
// `sdk/v1.ts`, puts it in front of that line's dispatch). This file is the SEP's algorithm, top to
// bottom: claim the key → refuse (conflict, in progress, …) or replay → execute once → settle the
// claim. What surrounds the one execution and is not the SEP (the provider key handed to the tool,
// the record's transaction, the lease kept alive) is `aroundExecution`, in execution.ts.
// One word per concept: the dispatch *answers*; the guard *settles* the claim with that answer;
// a tool's *outcome* is whether its side effect happened, which a provider call may leave unknown.

import type { Claim, ClaimTicket, JsonObject, RecordId } from '../stores/contract.js';
import { releaseSoon } from '../stores/support.js';
import { claimContinuation, type Unopened } from './continuation.js';
import { type Decision, DecisionLog } from './decisions.js';
import {
  IdempotencyErrorType,
  idempotencyError,
  isMissingClientCapability,
  isRefusedContinuation,
  JsonRpcError,
  Messages,
  markedOutcomeUnknown,
  refusedContinuation,
} from './errors.js';
import { type Answer, aroundExecution, type Dispatch, runUnkeyed, type ToolExecution } from './execution.js';
import { fingerprintToolCall } from './fingerprint.js';
import { checkIdempotencyKey } from './key.js';
import { type GuardSettings, guardSettings, type IdempotencyGuardOptions } from './options.js';
import { type Caller, ScopeUnknownError } from './scope.js';

/** The SEP's algorithm for one `tools/call`, in its order. */
async function guardToolCall(
  params: Readonly<Record<string, unknown>>,
  caller: Caller,
  dispatch: Dispatch,
  settings: GuardSettings,
  signal: AbortSignal | undefined,
): Promise<JsonObject> {
  // SEP: no key, exactly today's behaviour.
  if (!Object.hasOwn(params, 'idempotencyKey')) return runUnkeyed(params.name, caller, settings, dispatch);

  const log = new DecisionLog(settings.onDecision, params.name);
  /** Every refusal: the operator is told, and nothing executes. */
  const refuse = (decision: Refusal, id: Partial<RecordId>, message: string, told?: string) => {
    log.decide(decision, id, told);
    return idempotencyError(IdempotencyErrorType[decision], message, id.idempotencyKey);
  };

  // The key must be something a store can hold and a log can print.
  const key = checkIdempotencyKey(params.idempotencyKey);
  if (!key.ok) throw refuse('invalid', {}, key.message, key.message);
  const { key: idempotencyKey } = key;

  // SEP equivalence: same tool name, `arguments` equal as parsed JSON, as sent on the wire.
  const fingerprint = fingerprintToolCall(params.name, params.arguments);
  if (!fingerprint.ok) {
    const message = Messages.argumentsUnfingerprintable(fingerprint.reason);
    throw refuse('invalid', { idempotencyKey }, message, message);
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
    throw refuse('scopeUnknown', { idempotencyKey }, message, message);
  }

  // One atomic store operation either claims the key or returns what already holds it.
  const id: RecordId = { scope, idempotencyKey };
  let claim: Claim | Unopened;
  try {
    claim = continuation
      ? await claimContinuation(id, fingerprint.fingerprint, settings)
      : await settings.store.claim(id, fingerprint.fingerprint, settings.leaseMs, false);
  } catch (error) {
    // Fail closed: executing without a record would let the retry charge again.
    throw refuse('storeUnavailable', id, Messages.storeUnavailable, String(error));
  }

  // MRTR: a `requestState` is not an authorization to be carried to a key that never asked.
  if (claim.state === 'unopened') {
    log.decide('continuationRefused', id, Messages.continuationUnopened);
    throw refusedContinuation(Messages.continuationUnopened, idempotencyKey);
  }
  if (claim.state === 'full') throw refuse('storeFull', id, Messages.storeFull);
  // SEP: "Servers SHOULD apply the same rate-limiting and resource-quota mechanisms … to their
  // idempotency records." One caller past its own quota is refused; every other caller goes on.
  if (claim.state === 'quotaExceeded') throw refuse('quotaExceeded', id, Messages.quotaExceeded);

  if (claim.state !== 'claimed') {
    // SEP: another request under this key is rejected, never executed and never replayed.
    // Checked before "in progress" because it is final: retrying later cannot help.
    if (claim.fingerprint !== fingerprint.fingerprint) throw refuse('conflict', id, Messages.conflict);
    // SEP: never a second execution, and never block the duplicate: answer at once.
    if (claim.state === 'inProgress') throw refuse('inProgress', id, Messages.inProgress);
    // SEP: the stored response, success or error, with nothing marking it as a replay. For a key
    // awaiting input that is its `input_required` again: the opening round never runs twice.
    log.decide('replayed', id);
    if ('result' in claim.response) return claim.response.result;
    const { code, message, data } = claim.response.error;
    throw new JsonRpcError(code, message, data);
  }

  // The only path that executes: the claim is ours.
  const call = { id, tool: params.name, continuation, ticket: claim.ticket, log };
  return executeOnce(call, dispatch, settings, signal);
}

/** The refusals, each answered with the error type of its own name. */
type Refusal = Decision & keyof typeof IdempotencyErrorType;

// --- Execute once, and settle the claim with the answer ---

/** A keyed call whose claim the guard holds. */
type ClaimedCall = {
  id: RecordId;
  tool: unknown;
  continuation: boolean;
  ticket: ClaimTicket;
  log: DecisionLog;
};

/**
 * How each answer settles its claim, in the words of the decision the operator is told. The SEP
 * covers single-round calls: whatever they answer is final (`executed`). The rest is this
 * project's, for what the SEP leaves open:
 * - `awaitingInput`: `input_required` is never final; the key holds it for the continuation, and a
 *   repeat of the opening round gets it again.
 * - `continuationRefused`: a continuation refused before anything ran (a forged, expired, another
 *   caller's or another key's `requestState`) would poison the key if recorded.
 * - `capabilityMissing`: a question the client cannot be asked (-32021): the tool asked instead of
 *   acting, so the same key must run once the client declares the capability.
 * - `unrecorded`: the tool said its outcome is unknown (a provider call that gave up not knowing
 *   whether it committed, or an error answered once the request was aborted). Recorded, it would
 *   leave the client only a new key; retried under this one, it executes again with the same
 *   provider key, which the provider replays. The answer is marked so that a client can tell.
 * - `storeUnavailable`: the tool could not get the record's transaction, so nothing it meant to
 *   write there was written: answered as the store's failure, retry with the same key.
 * A row: the claim completed, kept or released; told even if gone (a release need not find it)? acted? answer.
 */
const SETTLEMENTS = {
  executed: { store: 'complete', toldAnyway: false, acted: true, answer: 'asAnswered' },
  awaitingInput: { store: 'awaitInput', toldAnyway: false, acted: true, answer: 'asAnswered' },
  continuationRefused: { store: 'release', toldAnyway: true, acted: false, answer: 'asAnswered' },
  capabilityMissing: { store: 'release', toldAnyway: true, acted: false, answer: 'asAnswered' },
  unrecorded: { store: 'release', toldAnyway: true, acted: true, answer: 'outcomeUnknown' },
  storeUnavailable: { store: 'release', toldAnyway: true, acted: true, answer: 'storeUnavailable' },
} as const satisfies Partial<Record<Decision, SettlementRule>>;

type Settlement = keyof typeof SETTLEMENTS;

interface SettlementRule {
  store: 'complete' | 'awaitInput' | 'release';
  toldAnyway: boolean;
  acted: boolean;
  answer: 'asAnswered' | 'outcomeUnknown' | 'storeUnavailable';
}

function settlementOf(answer: Answer, continuation: boolean, execution: ToolExecution): Settlement {
  if (execution.storeFailure !== undefined) return 'storeUnavailable';
  if (execution.outcomeUnknown !== undefined) return 'unrecorded';
  if (!answer.threw) return answer.result.resultType === 'input_required' ? 'awaitingInput' : 'executed';
  if (continuation && isRefusedContinuation(answer.stored.error)) return 'continuationRefused';
  return isMissingClientCapability(answer.stored.error) ? 'capabilityMissing' : 'executed';
}

/** What the operator's line says of a settlement, beyond its word. */
function detailOf(settlement: Settlement, execution: ToolExecution): string | undefined {
  if (settlement === 'capabilityMissing') return Messages.capabilityMissing;
  if (settlement === 'unrecorded') return Messages.outcomeUnknown(execution.outcomeUnknown);
  return settlement === 'storeUnavailable' ? String(execution.storeFailure) : undefined;
}

/**
 * Runs the dispatch once, settles the claim with its answer, and answers the caller. A tool that
 * ignores the SDK's abort (a client that hung up) runs to its end and its answer is recorded, so
 * the retry replays it.
 */
async function executeOnce(
  call: ClaimedCall,
  dispatch: Dispatch,
  settings: GuardSettings,
  signal?: AbortSignal,
) {
  const { answer, execution } = await aroundExecution(call, dispatch, settings, signal);
  const settlement = settlementOf(answer, call.continuation, execution);
  const rule: SettlementRule = SETTLEMENTS[settlement];
  const { id, ticket, log } = call;
  const { store, retentionMs, awaitingInputRetentionMs, leaseMs } = settings;

  // A store failing here costs the record, not the answer: the caller still gets it, and only a
  // retry of a lost answer could execute again, once the lease expires. That is the
  // at-least-once window the SEP leaves to servers.
  let settled = false;
  try {
    if (rule.store === 'complete') settled = await store.complete(ticket, answer.stored, retentionMs);
    else if (rule.store === 'awaitInput')
      settled = await store.awaitInput(ticket, answer.stored, awaitingInputRetentionMs);
    else settled = await releaseSoon(store, ticket, leaseMs);
    if (settled || rule.toldAnyway) log.decide(settlement, id, detailOf(settlement, execution));
    // Not recorded: the claim lost its key while the call ran (its renewals failed until the lease
    // ran out and a retry claimed the key, or the store was cleared). The operator should know.
    else log.decide('unrecorded', id, Messages.leaseOutlived);
  } catch (error) {
    // Nothing recorded. (A settlement that is itself the store's failure is told as such.)
    if (settlement === 'storeUnavailable') log.decide(settlement, id, detailOf(settlement, execution));
    else log.decide('unrecorded', id, String(error));
  }

  if (rule.answer === 'storeUnavailable')
    throw idempotencyError(
      IdempotencyErrorType.storeUnavailable,
      Messages.storeUnavailable,
      id.idempotencyKey,
    );
  // The tool wrote in the record's transaction: unrecorded, its writes were rolled back with it
  // (or, if the commit's answer was lost, committed with it). Its answer would be a lie either way;
  // the retry with the same key replays or executes, once.
  if (execution.inTransaction && !settled && rule.acted) {
    await releaseSoon(store, ticket, leaseMs).catch(() => {});
    throw idempotencyError(IdempotencyErrorType.storeUnavailable, Messages.rolledBack, id.idempotencyKey);
  }
  if (rule.answer === 'outcomeUnknown') return markedOutcomeUnknown(answer, id.idempotencyKey);
  if (answer.threw) throw answer.error;
  return answer.result;
}

/** The guard for `options`, checked once: what an adapter puts in front of its SDK's dispatch. */
export function createToolCallGuard(options: IdempotencyGuardOptions): ToolCallGuard {
  const settings = guardSettings(options);
  return (params, caller, dispatch, signal) => guardToolCall(params, caller, dispatch, settings, signal);
}

/** What an adapter installs: raw params (before any SDK strips the key), the caller, the dispatch,
 * and the request's abort signal (which the SDK fires when the client cancels or hangs up). */
export type ToolCallGuard = (
  params: Readonly<Record<string, unknown>>,
  caller: Caller,
  dispatch: Dispatch,
  signal?: AbortSignal,
) => Promise<JsonObject>;
