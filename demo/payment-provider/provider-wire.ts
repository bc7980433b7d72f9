// --- The provider's wire (docs/provider-wire.md): its limits, its errors, its routes and shapes ---

import type { ServerResponse } from 'node:http';

// --- Limits and defaults, each with its reason ---

/**
 * Largest body read; past it the answer is 413. A charge is a few dozen bytes: 64 KiB is generous
 * and keeps a flood of big bodies cheap to refuse.
 */
export const MAX_BODY_BYTES = 64 * 1024;

/** Longest key accepted: Stripe's limit, room for any UUID, ULID or hash a client would send. */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

/**
 * How long a key's record is kept unless told otherwise: Stripe's 24 hours. The draft leaves the
 * expiry policy to the resource and asks that it be published ("Idempotency Key Validity and Expiry").
 */
export const DEFAULT_KEY_RETENTION_SECONDS = 24 * 60 * 60;

/** What a 409 asks the client to wait: a request here is processed in well under a second. */
export const RETRY_AFTER_SECONDS = 1;

/**
 * How often expired records are swept out. Lookups already ignore a record the moment it expires;
 * the sweep is what bounds memory to one retention window's worth of keys.
 */
export const SWEEP_INTERVAL_MS = 60_000;

/**
 * Deepest JSON a body may nest. A charge is flat; the fingerprint walks the body recursively, and a
 * 64 KiB body could nest 30 000 levels, deep enough to overflow the stack.
 */
export const MAX_BODY_DEPTH = 64;

// --- What the provider says: error types (the wire's) and messages, in one place ---

/** The `error.type` strings of the wire. Tests import these rather than spell them again. */
export const ERROR_TYPES = {
  invalidRequest: 'invalid_request',
  invalidIdempotencyKey: 'invalid_idempotency_key',
  declined: 'card_declined',
  mismatch: 'idempotency_key_mismatch',
  inUse: 'idempotency_key_in_use',
  badGateway: 'bad_gateway',
  internal: 'internal_error',
  notFound: 'not_found',
  methodNotAllowed: 'method_not_allowed',
  tooLarge: 'request_too_large',
} as const;

export const MESSAGES = {
  notJson: 'The body is not JSON.',
  notObject: 'The body must be a JSON object.',
  tooDeep: `The body nests deeper than ${MAX_BODY_DEPTH} levels.`,
  amount: 'amount must be a positive integer (minor units) no larger than 9007199254740991.',
  orderId: 'orderId must be a non-empty string.',
  balanceRange: 'This would take the balance past 9007199254740991 either way; nothing was committed.',
  keyEmpty: 'The Idempotency-Key header is empty; send a unique value, or no header at all.',
  keyTooLong: `The Idempotency-Key header is longer than ${MAX_IDEMPOTENCY_KEY_LENGTH} characters.`,
  keyTwice: 'Send one Idempotency-Key header, not several.',
  mismatch: 'This Idempotency-Key was used with a different body. A new request needs a new key.',
  inUse: 'A request with this Idempotency-Key is still being processed. Retry once it has finished.',
  badGateway: 'The provider could not be reached (a fault the test queued).',
  internal: 'The provider failed before committing anything (a fault the test queued).',
  resetMidway: 'The provider was reset while this request was being processed; nothing was committed.',
  unexpected: 'The provider failed unexpectedly; see its stderr.',
  tooLarge: `The body is larger than ${MAX_BODY_BYTES} bytes.`,
  notFound: (path: string) => `Nothing is served at ${path}.`,
  methodNotAllowed: (method: string, path: string, allowed: string) =>
    `${path} answers ${allowed}, not ${method}.`,
  faultPath: 'path must be "/charges" or "/refunds".',
  faultKind: (kinds: readonly string[]) => `fault must be one of ${kinds.map((k) => `"${k}"`).join(', ')}.`,
  faultCount: 'count must be a positive integer.',
  faultDelay: 'delayMs must be a non-negative integer.',
  faultDelayOnlyForDelay: 'delayMs goes with the "delay" fault only.',
  garbage: '<html>oops',
} as const;

// --- The wire's shapes ---

/** The paths this provider serves, and the one method each answers. */
export const ROUTES = {
  '/charges': 'POST',
  '/refunds': 'POST',
  '/balance': 'GET',
  '/reset': 'POST',
  '/commits': 'GET',
  '/faults': 'POST',
  '/release': 'POST',
  '/held': 'GET',
} as const;
export type RoutePath = keyof typeof ROUTES;

/** The two operations that move money, by path: the only ones an Idempotency-Key applies to. */
export const OPERATIONS = { '/charges': 'charge', '/refunds': 'refund' } as const;
export type OperationPath = keyof typeof OPERATIONS;
export type Operation = (typeof OPERATIONS)[OperationPath];

export const ID_PREFIXES: Record<Operation, string> = { charge: 'ch', refund: 're' };

export const FAULT_KINDS = [
  'drop-after-commit',
  '502-before-commit',
  '502-after-commit',
  '500-before-commit',
  'garbage-after-commit',
  'hold-after-commit',
  'delay',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface QueuedFault {
  kind: FaultKind;
  /** How many more requests this entry fails. */
  remaining: number;
  delayMs: number;
}

/** An operation's request, once its body has passed validation. */
export interface OperationRequest {
  amount: number;
  orderId?: string;
}

/** A status and the exact bytes of a body: what is stored, and replayed byte for byte. */
export interface Answer {
  status: number;
  body: Buffer;
}

/**
 * What the provider remembers about a key. `inProgress` from the moment the first request with the
 * key is accepted until it commits (or fails before committing, which forgets the key);
 * `completed` from its commit until `expiresAt`.
 */
export type KeyRecord =
  | { state: 'inProgress'; fingerprint: string }
  | { state: 'completed'; fingerprint: string; answer: Answer; expiresAt: number };

export interface Commit {
  seq: number;
  id: string;
  operation: Operation;
  amount: number;
  orderId?: string;
  idempotencyKey: string | null;
}

export interface HeldResponse {
  res: ServerResponse;
  answer: Answer;
}

export interface ProviderOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** How long every charge and refund takes between arriving and committing. */
  latencyMs?: number;
  /** How long a key's record is kept after its commit; DEFAULT_KEY_RETENTION_SECONDS unless set. */
  keyRetentionSeconds?: number;
}

export interface RunningProvider {
  /** `http://host:port`, no trailing slash. */
  url: string;
  close(): Promise<void>;
}
