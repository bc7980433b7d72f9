// --- What a caller's token may do, and whose records its keyed calls share ---
//
// The demo server's scope policy: the OAuth scope each tool needs (checked by the SDK over HTTP,
// before the dispatch), what a token that names none gets, the records' scope the guard keys a
// caller's calls under, and the tokens `DEMO_BEARER_TOKENS` gives.

import { type Caller, principalScope, scopeWithin } from 'mcp-request-idempotency';

/**
 * What each tool needs the caller's token to allow. Over HTTP the SDK checks it before any
 * dispatch, so before the guard: a replay is refused exactly as an execution would be (SEP: "a
 * replayed response MUST still be subject to whatever authorization check would ordinarily govern
 * access to it"). Over stdio the caller is the local user, with no token: every tool is allowed.
 */
export const DEMO_SCOPES = { charge: 'charge', refund: 'refund', read: 'read', admin: 'admin' } as const;

export type DemoScope = (typeof DEMO_SCOPES)[keyof typeof DEMO_SCOPES];

/**
 * The records' scope: the principal of the verified token (the guard's default, `principalScope`),
 * and, for a token that may only read, a scope of its own within it. Such a token's keyed calls
 * can only be of tools that change nothing, so nothing is lost by not replaying them to the
 * principal's other tokens; and a read-only token, perhaps handed to a dashboard, cannot use up the
 * quota of records the principal's charges need.
 */
export function demoScopeOf(caller: Caller): string {
  const scope = principalScope(caller);
  const granted = caller.authInfo?.scopes;
  return granted?.every((s) => s === DEMO_SCOPES.read) ? scopeWithin(scope, 'read-only') : scope;
}

/**
 * What a token entry that names no scopes may do: everything but `admin`. `admin` resets every
 * caller's balance and records, a running call's included (its retry would execute again), so it
 * is an operator's, given only by name.
 */
export const CALLER_SCOPES: readonly DemoScope[] = [DEMO_SCOPES.charge, DEMO_SCOPES.refund, DEMO_SCOPES.read];

/** One bearer token the demo accepts: whose it is, and what it may do. */
export interface BearerToken {
  token: string;
  /** The principal: the caller's authorization boundary, and so the scope of its records. */
  principal: string;
  /** OAuth scopes; each tool requires one (see `DEMO_SCOPES` above). */
  scopes: readonly string[];
}

export type BearerTokens = readonly BearerToken[];

/**
 * Parses `DEMO_BEARER_TOKENS`: comma-separated `principal:token` or `principal:token:scope+scope`.
 * A principal may hold several tokens (one that may charge, one that may only read). An entry
 * without scopes gets `unnamed`, the scopes any caller may hold; a scope beyond those (an
 * operator's) only when the entry names it: a token gets no more than it is given. Throws, naming
 * the entry, on anything else.
 */
export function parseBearerTokens(
  spec: string,
  allScopes: readonly string[],
  unnamed: readonly string[],
): BearerTokens {
  const tokens: BearerToken[] = [];
  for (const entry of spec.split(',').map((s) => s.trim())) {
    if (entry === '') continue;
    const [principal, token, scopeList, ...rest] = entry.split(':');
    const shape = 'principal:token or principal:token:scope+scope';
    if (!principal || !token || rest.length > 0 || scopeList === '') {
      throw new Error(`DEMO_BEARER_TOKENS entries are ${shape}, got "${entry}"`);
    }
    const scopes = scopeList === undefined ? [...unnamed] : scopeList.split('+');
    const unknown = scopes.find((scope) => !allScopes.includes(scope));
    if (unknown !== undefined) {
      throw new Error(
        `DEMO_BEARER_TOKENS entry "${entry}" names the scope "${unknown}"; the scopes are ${allScopes.join(', ')}`,
      );
    }
    if (tokens.some((known) => known.token === token)) {
      throw new Error(`DEMO_BEARER_TOKENS gives the token of "${entry}" twice`);
    }
    tokens.push({ principal, token, scopes });
  }
  if (tokens.length === 0) throw new Error('DEMO_BEARER_TOKENS is set but names no principal');
  return tokens;
}
