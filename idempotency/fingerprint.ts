// --- Equivalence (SEP-3182): same tool name, arguments equal as parsed JSON values ---
//
// Two requests are equivalent when their tool names match and their `arguments` are equal
// as parsed JSON: object key order and whitespace do not matter, `1` and `1.0` are the same
// number, an escaped and a literal character are the same string, and there is no Unicode
// normalisation. RFC 8785 canonical JSON of the parsed values gives exactly that answer,
// and hashing it lets a record keep 32 bytes instead of the arguments themselves.
//
// The guard fingerprints the arguments as they arrived on the wire, before any tool schema
// coerced, defaulted or stripped them: two requests a schema would reshape alike are still
// different requests.

import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';

export type Fingerprint = string;

export type FingerprintResult = { ok: true; fingerprint: Fingerprint } | { ok: false; reason: string };

export function fingerprintToolCall(name: unknown, args: unknown): FingerprintResult {
  let canonical: string | undefined;
  try {
    // SEP: an absent `arguments` is the same request as `{}`.
    canonical = canonicalize([name, args === undefined ? {} : args]);
  } catch (error) {
    // JSON.parse turns 1e400 into Infinity, which RFC 8785 cannot write; and very deep
    // nesting can exhaust the stack. Neither can be compared, so neither may be keyed.
    const reason = error instanceof RangeError ? 'nesting too deep' : errorMessage(error);
    return { ok: false, reason };
  }
  if (canonical === undefined) return { ok: false, reason: 'not a JSON value' };
  return { ok: true, fingerprint: createHash('sha256').update(canonical).digest('base64url') };
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
