// --- The JSON-RPC errors of SEP-3182, defined once ---
//
// Server, client and tests import these; nobody spells a `data.type` string by hand.
// The SEP defines no new error code. Like the Python prototype, the answers about the
// key itself use -32602 (invalid params): the request, as sent, cannot be served.
// A store that cannot take a record is the server's problem, not the caller's, so those
// answers use -32603 (internal error); both mean "nothing executed, retry later with the
// same key".

import type { JsonObject } from '../stores/contract.js';
import type { Answer } from './execution.js';

export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;

export const IdempotencyErrorType = {
  /** The key is not a 1–255 character string without control characters. */
  invalid: 'idempotency_key_invalid',
  /** SEP: the original request with this key is still executing. Retry later, same key. */
  inProgress: 'idempotency_key_in_progress',
  /** SEP: the key was used with another tool or other arguments. Never retry with it. */
  conflict: 'idempotency_key_conflict',
  /** The server's record cap is reached and no record has expired yet. */
  storeFull: 'idempotency_store_full',
  /** This caller's quota of records is reached; other callers are unaffected. */
  quotaExceeded: 'idempotency_quota_exceeded',
  /** The shared store could not be reached; the call failed closed. */
  storeUnavailable: 'idempotency_store_unavailable',
  /** The server cannot tell whose authorization boundary the call is in; nothing executed. */
  scopeUnknown: 'idempotency_scope_unknown',
  /**
   * This project's, not the SEP's: the tool could not tell whether its side effect happened (its
   * provider call gave up unanswered), and nothing was recorded. Retry with the same key: the retry
   * executes again, with the same provider key, and the provider replays or executes, once. Carried
   * in a tool result's `_meta` (`OUTCOME_META_KEY`), or in a JSON-RPC error's `data`.
   */
  outcomeUnknown: 'idempotency_outcome_unknown',
} as const;

export type IdempotencyErrorType = (typeof IdempotencyErrorType)[keyof typeof IdempotencyErrorType];

export interface IdempotencyErrorData {
  type: IdempotencyErrorType;
  /** Echoed when the key is a string the caller can recognise. */
  idempotencyKey?: string;
}

const CODE_OF: Record<IdempotencyErrorType, number> = {
  idempotency_key_invalid: INVALID_PARAMS,
  idempotency_key_in_progress: INVALID_PARAMS,
  idempotency_key_conflict: INVALID_PARAMS,
  idempotency_store_full: INTERNAL_ERROR,
  idempotency_quota_exceeded: INTERNAL_ERROR,
  idempotency_store_unavailable: INTERNAL_ERROR,
  idempotency_scope_unknown: INTERNAL_ERROR,
  idempotency_outcome_unknown: INTERNAL_ERROR,
};

// User-facing messages live here, so the wording is reviewed in one place.
export const Messages = {
  keyNotString: (type: string) => `idempotencyKey must be a string, got ${type}`,
  keyEmpty: 'idempotencyKey must not be empty',
  keyTooLong: (max: number, length: number) =>
    `idempotencyKey must be at most ${max} characters, got ${length}`,
  keyControlCharacter: (index: number) =>
    `idempotencyKey must not contain control characters (found one at index ${index})`,
  keyLoneSurrogate: 'idempotencyKey must be well-formed Unicode (it contains a lone surrogate)',
  argumentsUnfingerprintable: (reason: string) => `arguments cannot be compared for idempotency: ${reason}`,
  leaseOutlived:
    'the call outlived its in-progress lease and the key was claimed again; its response was not recorded',
  rolledBack:
    "This call's effects and its idempotency record could not be committed together, so neither was; retry with the same key",
  retentionBelowProviderKeys: (retentionMs: number, providerKeyRetentionMs: number) =>
    `retentionMs (${retentionMs}) is shorter than providerKeyRetentionMs (${providerKeyRetentionMs}): a key reused once its record is gone would reach the provider under the old operation's provider key, and be answered the old charge. Keep records at least as long as your provider keeps keys, or set providerKeyRetentionMs to your provider's (0 if no tool sends provider keys)`,
  cancelledMidCall:
    'the request was cancelled while the tool ran, and the tool answered an error: the cancellation, as likely as not, so whether its side effect happened is unknown',
  outcomeUnknown: (reason: string | undefined) =>
    `the tool could not tell whether its side effect happened (${reason}); nothing was recorded, so a retry with the same key executes again, with the same provider key`,
  outcomeUnknownAnswer:
    'Whether this call took effect is unknown, and nothing was recorded; retry it with the same idempotencyKey, and it takes effect at most once',
  continuationUnopened:
    'This continuation answers no opening round under its idempotencyKey: a requestState is honoured only under the key whose opening round it answers. Nothing was executed; send the opening round under this key',
  capabilityMissing:
    'the client lacks a capability the call needs; nothing acted and nothing was recorded, so the same key executes once the client declares it',
  inProgress: 'A request with this idempotencyKey is still in progress; retry later with the same key',
  conflict:
    'This idempotencyKey was already used with a different tool or different arguments; use a new key for a new operation',
  storeFull: 'The idempotency store is full; nothing was executed, retry later with the same key',
  quotaExceeded:
    'This caller holds as many idempotency records as its quota allows; nothing was executed, retry with the same key once older records expire',
  storeUnavailable:
    'The idempotency store is unavailable; nothing was executed, retry later with the same key',
  principalUnknown:
    "The server verified this caller's token but did not say whose it is (authInfo.extra.sub), so it cannot keep this key apart from other callers' keys; nothing was executed",
  scopeUnknown: (reason: string) =>
    `The server cannot tell this caller's authorization boundary (${reason}), so it cannot keep this key apart from other callers' keys; nothing was executed`,
} as const;

/**
 * A JSON-RPC error as the SDK's Protocol puts it on the wire: it copies `code`, `message`
 * and `data` from whatever a request handler throws. `McpError` would prefix the message
 * with "MCP error -32602:", and the SDK client prefixes it again on arrival; a plain
 * `Error` with `code` and `data` reaches the wire exactly as written.
 */
export class JsonRpcError extends Error {
  readonly code: number;
  readonly data?: unknown;

  constructor(code: number, message: string, data?: unknown) {
    // An answer to the caller, not a fault: nobody reads its stack, and capturing one would be
    // most of what a conflict or in-progress answer costs.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(message);
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.name = 'JsonRpcError';
    this.code = code;
    this.data = data;
  }
}

export function idempotencyError(
  type: IdempotencyErrorType,
  message: string,
  idempotencyKey?: string,
): JsonRpcError {
  const data: IdempotencyErrorData = idempotencyKey === undefined ? { type } : { type, idempotencyKey };
  return new JsonRpcError(CODE_OF[type], message, data);
}

/** The JSON-RPC code an SEP-3182 error of `type` is answered with. */
export function idempotencyErrorCode(type: IdempotencyErrorType): number {
  return CODE_OF[type];
}

const KNOWN_TYPES = new Set<string>(Object.values(IdempotencyErrorType));

function isErrorType(value: unknown): value is IdempotencyErrorType {
  return typeof value === 'string' && KNOWN_TYPES.has(value);
}

/**
 * Reads an SEP-3182 error back out of whatever the client raised (the SDK's `McpError`
 * carries `code` and `data`). Returns undefined for any other failure.
 */
export function idempotencyErrorOf(error: unknown): (IdempotencyErrorData & { code: number }) | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code: unknown = Reflect.get(error, 'code');
  const data: unknown = Reflect.get(error, 'data');
  if (typeof code !== 'number' || typeof data !== 'object' || data === null) return undefined;
  const type: unknown = Reflect.get(data, 'type');
  if (!isErrorType(type)) return undefined;
  const key: unknown = Reflect.get(data, 'idempotencyKey');
  return typeof key === 'string' ? { code, type, idempotencyKey: key } : { code, type };
}

// --- A continuation refused before anything ran ---
//
// A multi-round-trip continuation (2026-07-28) whose `requestState` the server's verifier rejects
// (forged, expired, another caller's) is refused before any tool runs, and must not settle the key:
// the guard puts the key back as it was. The v2 SDK answers it with -32602, the frozen message
// "Invalid or expired requestState", and this reason in `data`.

export const INVALID_REQUEST_STATE_REASON = 'invalid_request_state';

/** Whether a JSON-RPC error says a continuation's `requestState` was refused before anything ran. */
export function isRefusedContinuation(error: { code: number; data?: unknown }): boolean {
  const data = error.data;
  return (
    error.code === INVALID_PARAMS &&
    typeof data === 'object' &&
    data !== null &&
    Reflect.get(data, 'reason') === INVALID_REQUEST_STATE_REASON
  );
}

/**
 * The guard's refusal of a continuation under a key that has no opening round awaiting input (a
 * `requestState` carried to a fresh key): answered as the SDK answers a `requestState` it refuses,
 * so a client treats both alike, and settling nothing.
 */
export function refusedContinuation(message: string, idempotencyKey: string): JsonRpcError {
  return new JsonRpcError(INVALID_PARAMS, message, { reason: INVALID_REQUEST_STATE_REASON, idempotencyKey });
}

// --- A request that asked for what the client cannot give ---
//
// A round that answers `input_required` asks before it acts. On 2026-07-28 the SDK checks that the
// client declared the capabilities its questions need (form elicitation, say), and where it did
// not, answers -32021 instead of the question: the tool asked and did nothing. Like the question it
// replaces, that answer is not the key's final one: once the client declares the capability, the
// same key must run.

/** The v2 SDK's MissingRequiredClientCapability: the client did not declare what the call needs. */
export const MISSING_CLIENT_CAPABILITY = -32021;

/** Whether a JSON-RPC error says the client lacks a capability the call needs (nothing acted). */
export function isMissingClientCapability(error: { code: number }): boolean {
  return error.code === MISSING_CLIENT_CAPABILITY;
}

// --- An answer whose outcome is unknown, in a form a client can read ---
//
// A keyed call whose tool could not tell whether its side effect happened (a provider call that
// gave up unanswered: `ToolExecution.markOutcomeUnknown`) is recorded nowhere, so the retry with
// the same key executes again with the same provider key. Prose alone ("retry with the same key")
// reads like any final error to a program, whose retry with a new key is a second operation. So
// the guard marks the answer: a tool result keeps its content and `isError`, and carries
// `_meta[OUTCOME_META_KEY]`; a JSON-RPC error becomes `idempotency_outcome_unknown`. Both carry
// `{ type: 'idempotency_outcome_unknown', idempotencyKey }`.

/** Where a tool result carries the outcome marker: `_meta["mcp-request-idempotency/outcome"]`. */
export const OUTCOME_META_KEY = 'mcp-request-idempotency/outcome';

/** The marker of an unknown outcome, in a result's `_meta` and in an error's `data` alike. */
export function outcomeUnknownData(idempotencyKey: string): IdempotencyErrorData {
  return { type: IdempotencyErrorType.outcomeUnknown, idempotencyKey };
}

/**
 * Whether `answer` (a `tools/call` result, or what the client threw) says its outcome is unknown
 * and the same key must be retried; the key it names, if it names one. Undefined for any other
 * answer, a final one.
 */
export function outcomeUnknownOf(answer: unknown): { idempotencyKey?: string } | undefined {
  const meta: unknown =
    typeof answer === 'object' && answer !== null ? Reflect.get(answer, '_meta') : undefined;
  const marker: unknown =
    typeof meta === 'object' && meta !== null ? Reflect.get(meta, OUTCOME_META_KEY) : undefined;
  const data =
    typeof marker === 'object' && marker !== null
      ? { type: Reflect.get(marker, 'type'), idempotencyKey: Reflect.get(marker, 'idempotencyKey') }
      : idempotencyErrorOf(answer);
  if (data?.type !== IdempotencyErrorType.outcomeUnknown) return undefined;
  return typeof data.idempotencyKey === 'string' ? { idempotencyKey: data.idempotencyKey } : {};
}

/**
 * The answer of a call whose outcome is unknown, marked: a tool result keeps what it says and
 * carries the marker in its `_meta`; a JSON-RPC error is answered as `idempotency_outcome_unknown`,
 * in the dispatch's words where it had some.
 */
export function markedOutcomeUnknown(answer: Answer, idempotencyKey: string): JsonObject {
  const marker = outcomeUnknownData(idempotencyKey);
  if (!answer.threw) {
    const meta = answer.result._meta;
    const kept = typeof meta === 'object' && meta !== null ? meta : {};
    return { ...answer.result, _meta: { ...kept, [OUTCOME_META_KEY]: marker } };
  }
  const { message } = answer.stored.error;
  throw idempotencyError(marker.type, message || Messages.outcomeUnknownAnswer, idempotencyKey);
}
