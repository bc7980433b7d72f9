// --- What a caller's token may do, and whose records its keyed calls share ---
//
// The demo server's scope policy: the OAuth scope each tool needs (checked by the SDK over HTTP,
// before the dispatch), what a token that names none gets, and the records' scope the guard keys
// a caller's calls under.

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
