// --- Sealing a multi-round-trip call's `requestState`, on one instance or many ---
//
// A tool that answers `input_required` hands the client a `requestState` to echo with its answer.
// The v2 SDK seals it (HMAC) and verifies it before the tool runs again; every instance a
// continuation may reach needs the same key, which a deployment gives them all.

import { createRequestStateCodec, type RequestStateCodec } from '@modelcontextprotocol/server';
import { continuationBinding, principalOf } from 'mcp-request-idempotency';

/** How long a question may wait for its answer; the guard keeps an awaiting key as long. */
export const REQUEST_STATE_TTL_SECONDS = 600;

/**
 * The codec sealing `requestState` (HMAC, the v2 SDK's), bound to the method, the caller and the
 * idempotency key of the opening round that minted it (`continuationBinding`): a state minted for
 * alice's call is refused on bob's, and one minted under key K is refused under any other key and
 * with none, so one confirmation is one refund. `key` must be at least 32 bytes, the same on every
 * instance a continuation may reach.
 */
export function requestStateCodec<State>(
  key: string | Uint8Array,
  ttlSeconds = REQUEST_STATE_TTL_SECONDS,
): RequestStateCodec<State> {
  return createRequestStateCodec<State>({
    key,
    ttlSeconds,
    bind: (ctx) => {
      const authInfo = ctx.http?.authInfo;
      const principal = authInfo ? (principalOf(authInfo) ?? '') : '';
      return `${ctx.mcpReq.method}\0${principal}\0${continuationBinding()}`;
    },
  });
}
