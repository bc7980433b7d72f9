// --- Protocol-level idempotency dispatch (SEP-3182) ---
//
// The guard sits in front of a server's `tools/call` dispatch, so it applies to every tool and
// no tool body carries idempotency logic. It knows no SDK: it takes the raw params as they came
// off the wire, the caller's scope and a dispatch to call, and an adapter per SDK line
// (`sdk/v2.ts`, `sdk/v1.ts`) puts it in front of that line's dispatch. `guardToolCall` reads top
// to bottom as the SEP's algorithm: no key → validate → fingerprint → claim → conflict? → in
// progress? → replay → execute once and record. The last step is `executeOnce` (record.ts): run
// the dispatch (its lease renewed), settle the claim with the answer (complete it, await input, or
// release it), and answer the caller. The windows a record lives in are options.ts's; the words
// the operator is told, decisions.ts's.
//
// One word per concept: the dispatch *answers*; the guard *settles* the claim with that answer;
// a tool's *outcome* is whether its side effect happened, which a provider call may leave unknown.
// Multi-round-trip calls (2026-07-28) are this project's choice, since the SEP leaves them out of
// its scope: a round that answers `input_required` is not final; the key waits for its
// continuation ("awaiting input"), and `settlementOf` says how each answer settles it. A
// continuation resumes only a key its opening round left awaiting input, never claims a fresh one.

import type { Claim, JsonObject, RecordId, StoredResponse } from '../stores/contract.js';
import { DecisionLog } from './decisions.js';
import {
  IdempotencyErrorType,
  idempotencyError,
  JsonRpcError,
  Messages,
  refusedContinuation,
} from './errors.js';
import { runExecution, ToolExecution } from './execution.js';
import { type Fingerprint, fingerprintToolCall } from './fingerprint.js';
import { checkIdempotencyKey } from './key.js';
import { type GuardSettings, guardSettings, type IdempotencyGuardOptions } from './options.js';
import { type Dispatch, executeOnce, releaseSoon } from './record.js';
import { type Caller, ScopeUnknownError } from './scope.js';

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
  // continuation takes over a key awaiting input, and only such a key; a repeat of the opening
  // round takes nothing over.
  const id: RecordId = { scope, idempotencyKey };
  let claim: Claim | Unopened;
  try {
    claim = await (continuation ? claimContinuation : claimKey)(id, fingerprint.fingerprint, settings);
  } catch (error) {
    // Fail closed: executing without a record would let the retry charge again.
    log.decide('storeUnavailable', id, String(error));
    throw idempotencyError(IdempotencyErrorType.storeUnavailable, Messages.storeUnavailable, idempotencyKey);
  }

  // MRTR: a continuation under a key whose opening round never asked is refused, nothing executed:
  // a `requestState` is not an authorization to be carried to a fresh key.
  if (claim.state === 'unopened') {
    log.decide('continuationRefused', id, Messages.continuationUnopened);
    throw refusedContinuation(Messages.continuationUnopened, idempotencyKey);
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

/** The guard for `options`, checked once: what an adapter puts in front of its SDK's dispatch. */
export function createToolCallGuard(options: IdempotencyGuardOptions): ToolCallGuard {
  const settings = guardSettings(options);
  return (params, caller, dispatch, signal) => guardToolCall(params, caller, dispatch, settings, signal);
}

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

/** A continuation's claim, when no opening round under its key awaits input. */
type Unopened = { state: 'unopened' };

/** The store's claim of a key for an opening round (or a call with one round). */
function claimKey(id: RecordId, fingerprint: Fingerprint, settings: GuardSettings): Promise<Claim> {
  return settings.store.claim(id, fingerprint, settings.leaseMs, false);
}

/**
 * A continuation's claim: it takes over the key's awaiting-input record, and nothing else. First
 * the key is claimed as an opening round would claim it, which takes nothing over: a key that
 * held no record comes back claimed, and is put back at once (`unopened`); any record is returned
 * as it is. Only a key that awaits input, with these arguments, is then claimed as a continuation.
 * (Should the awaiting record expire between the two, the second claim takes a fresh key; the
 * `requestState` it carries expired with it, as the two windows are one, and is refused.)
 */
async function claimContinuation(
  id: RecordId,
  fingerprint: Fingerprint,
  settings: GuardSettings,
): Promise<Claim | Unopened> {
  const held = await claimKey(id, fingerprint, settings);
  if (held.state === 'claimed') {
    // A failed release is retried in the background; the continuation is refused either way.
    await releaseSoon(settings.store, held.ticket, settings.leaseMs).catch(() => {});
    return { state: 'unopened' };
  }
  if (held.state !== 'awaitingInput' || held.fingerprint !== fingerprint) return held;
  return settings.store.claim(id, fingerprint, settings.leaseMs, true);
}

/** An unkeyed call's scope, which only salts its execution's own provider keys. */
function unkeyedScope(caller: Caller, scopeOf: (caller: Caller) => string): string {
  try {
    return scopeOf(caller);
  } catch {
    return '';
  }
}

function replay(response: StoredResponse): JsonObject {
  if ('result' in response) return response.result;
  const { code, message, data } = response.error;
  throw new JsonRpcError(code, message, data);
}
