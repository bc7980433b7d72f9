// --- Whose record is it: the caller's scope ---
//
// SEP: "Servers MUST scope idempotency records to the authorization boundary that governs the
// call." The guard asks `scopeOf(caller)` for that boundary on every keyed call; the default,
// `principalScope`, is the principal of the verified token, or the local user without one.

import { Messages } from './errors.js';

/**
 * The scope of a request that carries no verified token: over stdio, the local user who started
 * the server; over HTTP without auth, whoever can reach it. Either way one authorization
 * boundary, so one scope.
 */
export const LOCAL_SCOPE = 'local';

/** The SDK's `AuthInfo`, as far as the guard reads it. */
export interface CallerAuthInfo {
  /** The OAuth client application: shared by every user of that app, so never a scope. */
  clientId: string;
  scopes?: readonly string[];
  /**
   * What the server's token verifier adds; the guard reads the subject, `sub`, from it, and the
   * issuer, `iss`, where the token names one.
   */
  extra?: Record<string, unknown>;
}

/** What the guard needs to know of the caller, whichever SDK line read it from the request. */
export interface Caller {
  /** The verified bearer token, when the transport authenticated the request. */
  authInfo?: CallerAuthInfo;
}

/**
 * The principal of an authenticated request: the subject of its verified token (a JWT's `sub`
 * claim, the `sub` of an RFC 7662 introspection answer), which the server's token verifier puts
 * in `authInfo.extra.sub`. The SDK's `AuthInfo` has no subject field of its own, and its
 * `clientId` names the OAuth client application, which every user of one app shares (with Client
 * ID Metadata Documents, one URL for all of them): scoped by it, one user's key would replay
 * another user's response. Undefined when the verifier said nothing.
 */
export function principalOf(authInfo: CallerAuthInfo): string | undefined {
  const sub = authInfo.extra?.sub;
  return typeof sub === 'string' && sub !== '' ? sub : undefined;
}

/**
 * The authorization server that issued the token (a JWT's `iss` claim, the `iss` of an
 * introspection answer), where the verifier put it in `authInfo.extra.iss`. A subject is unique
 * only within its issuer (RFC 7519 §4.1.2): two authorization servers may each have an `alice`.
 */
export function issuerOf(authInfo: CallerAuthInfo): string | undefined {
  const iss = authInfo.extra?.iss;
  return typeof iss === 'string' && iss !== '' ? iss : undefined;
}

/**
 * The default scope (SEP: records MUST be scoped to the authorization boundary that governs the
 * call). A request with a verified token is its principal's: the issuer and the subject where the
 * token names its issuer, so a server that trusts several authorization servers never merges two
 * issuers' users of one `sub`; the subject alone where it does not, the scope such tokens always
 * had, so their records stay where they are. One without a token is the local user's. A verified
 * token whose principal the server did not say has no scope: the guard refuses its keyed calls
 * rather than guess one, or put every caller in one.
 */
export function principalScope(caller: Caller): string {
  const { authInfo } = caller;
  if (!authInfo) return LOCAL_SCOPE;
  const principal = principalOf(authInfo);
  if (principal === undefined) throw new ScopeUnknownError(Messages.principalUnknown);
  const issuer = issuerOf(authInfo);
  // JSON, so no issuer and subject can be read as another pair; a prefix no `principal:` scope has.
  return issuer === undefined
    ? `principal:${principal}`
    : `issuer-principal:${JSON.stringify([issuer, principal])}`;
}

/**
 * A scope of its own inside `scope`, named `part`: for a server that keeps some of a principal's
 * calls apart from the rest (a read-only token's, say), so they never replay to its other calls.
 * JSON, so no scope and part can be read as another pair (a subject ending in `:read-only` is not
 * another principal's read-only part); a prefix no `principalScope` has.
 */
export function scopeWithin(scope: string, part: string): string {
  return `within:${JSON.stringify([scope, part])}`;
}

/** Thrown by a `scopeOf` that cannot tell the caller's scope; the guard fails the keyed call closed. */
export class ScopeUnknownError extends Error {
  override readonly name = 'ScopeUnknownError';
}
