// --- The JSON-RPC errors of SEP-3182, defined once ---
//
// Server, client and tests import these; nobody spells a `data.type` string by hand.
// The SEP defines no new error code. Like the Python prototype, the answers about the
// key itself use -32602 (invalid params): the request, as sent, cannot be served.
// A store that cannot take a record is the server's problem, not the caller's, so those
// answers use -32603 (internal error); both mean "nothing executed, retry later with the
// same key".

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
