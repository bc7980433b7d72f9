// --- What a guard is told, and what it assumes when it is not told ---
//
// The windows a record lives in (retention, lease, awaiting input), each chosen against what the
// providers a tool calls and the SDKs' own timeouts do, and the options that set them.

import { type IdempotencyStore, MAX_RETENTION_MS } from '../stores/contract.js';
import type { DecisionEvent } from './decisions.js';
import { Messages } from './errors.js';
import { LeaseRenewals } from './execution.js';
import { type Caller, principalScope } from './scope.js';

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
 * told it succeeded.
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

/** The options checked, every default filled in: what the guard and its record half run on. */
export type GuardSettings = Required<IdempotencyGuardOptions> & { leases: LeaseRenewals };

/** Checks `options` (a window that cannot work is refused at installation) and fills in the defaults. */
export function guardSettings(options: IdempotencyGuardOptions): GuardSettings {
  const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
  const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
  const providerKeyRetentionMs = options.providerKeyRetentionMs ?? DEFAULT_PROVIDER_KEY_RETENTION_MS;
  const awaitingInputRetentionMs = options.awaitingInputRetentionMs ?? DEFAULT_AWAITING_INPUT_RETENTION_MS;
  // At most what every store keeps: one that took less would fail each key closed, for good.
  for (const [name, ms] of Object.entries({ retentionMs, leaseMs, awaitingInputRetentionMs })) {
    if (!(Number.isFinite(ms) && ms > 0 && ms <= MAX_RETENTION_MS))
      throw new RangeError(`${name} must be a positive number of ms up to ${MAX_RETENTION_MS}, got ${ms}`);
  }
  // 0 says no tool sends derived keys; a negative or NaN window is a mistake, not a setting.
  if (!(Number.isFinite(providerKeyRetentionMs) && providerKeyRetentionMs >= 0))
    throw new RangeError(`providerKeyRetentionMs must be 0 or a number of ms, got ${providerKeyRetentionMs}`);
  if (!(retentionMs >= providerKeyRetentionMs)) {
    throw new RangeError(Messages.retentionBelowProviderKeys(retentionMs, providerKeyRetentionMs));
  }
  return {
    store: options.store,
    retentionMs,
    providerKeyRetentionMs,
    leaseMs,
    awaitingInputRetentionMs,
    scopeOf: options.scopeOf ?? principalScope,
    onDecision: options.onDecision ?? (() => {}),
    leases: new LeaseRenewals(options.store, leaseMs),
  };
}
