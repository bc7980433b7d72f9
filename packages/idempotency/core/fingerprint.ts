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

import { hash } from 'node:crypto';
import { nativelyCanonical } from './fingerprint-fast.js';

export type Fingerprint = string;

export type FingerprintResult = { ok: true; fingerprint: Fingerprint } | { ok: false; reason: string };

export function fingerprintToolCall(name: unknown, args: unknown): FingerprintResult {
  let canonical: string | undefined;
  try {
    // SEP: an absent `arguments` is the same request as `{}`.
    const value = [name, args === undefined ? {} : args];
    // The fast path writes what it can at native speed and gives up on the rest; what it writes is
    // what `canonicalJson` writes (test/idempotency/core/fingerprint-fast.test.ts holds the two together).
    canonical = nativelyCanonical(value) ?? canonicalJson(value);
  } catch (error) {
    // JSON.parse turns 1e400 into Infinity, which RFC 8785 cannot write; and very deep
    // nesting can exhaust the stack. Neither can be compared, so neither may be keyed.
    const reason = error instanceof RangeError ? 'nesting too deep' : errorMessage(error);
    return { ok: false, reason };
  }
  if (canonical === undefined) return { ok: false, reason: 'not a JSON value' };
  return { ok: true, fingerprint: hash('sha256', canonical, 'base64url') };
}

// --- RFC 8785 (JSON Canonicalization Scheme) ---
//
// Written out rather than taken from the `canonicalize` package, whose per-string and
// per-object work made large arguments slow; its output, and the reason it refuses a value, are
// kept exactly (package version 4.0.0) for every input: test/idempotency/core/fingerprint.test.ts holds this code
// to the package, which stays as the tests' reference. (Only the depth at which nesting exhausts
// the stack differs: it depends on the stack and the JIT.)
//   - Members sorted by their names' UTF-16 code units.
//   - Strings and numbers as ECMAScript's JSON.stringify writes them, which is what RFC 8785
//     specifies; a string with a lone surrogate and a non-finite number are refused.
//   - `undefined` and symbol members are left out; in arrays they are written as null.

/** The RFC 8785 form of `value`, undefined where JSON has none; throws on what it cannot write. */
export function canonicalJson(value: unknown): string | undefined {
  return canonicalize(value, new Set());
}

/**
 * A string with none of these is written as it is, in quotes; any other goes through
 * JSON.stringify. JSON.stringify escapes the quote, the backslash and U+0000 to U+001F;
 * Cc also holds U+007F to U+009F, which it leaves alone: a slower path, the same output.
 */
const MAY_NEED_ESCAPE = /["\\\p{Cc}]/u;

function canonicalize(value: unknown, ancestors: Set<object>): string | undefined {
  switch (typeof value) {
    case 'string':
      if (!value.isWellFormed()) throw new Error('Lone surrogate is not allowed');
      return MAY_NEED_ESCAPE.test(value) ? JSON.stringify(value) : `"${value}"`;
    case 'number':
      if (Number.isNaN(value)) throw new Error('NaN is not allowed');
      if (!Number.isFinite(value)) throw new Error('Infinity is not allowed');
      // Number::toString, exactly as JSON.stringify writes a finite number (-0 as 0).
      return String(value);
    case 'object':
      if (value === null) return 'null';
      break;
    default:
      return JSON.stringify(value);
  }

  // Values JSON.parse cannot produce (a `toJSON`, a cycle) only reach here in process.
  if (ancestors.has(value)) throw new Error('Circular reference detected');
  const toJSON: unknown = Reflect.get(value, 'toJSON');
  ancestors.add(value);
  let out: string | undefined;
  if (typeof toJSON === 'function') {
    out = canonicalize(Reflect.apply(toJSON, value, []), ancestors);
  } else if (Array.isArray(value)) {
    out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      // A hole (never in parsed JSON) is written as nothing, as Array.prototype.map leaves it.
      if (!(i in value)) continue;
      const item: unknown = value[i];
      out += canonicalize(item === undefined || typeof item === 'symbol' ? null : item, ancestors) ?? '';
    }
    out += ']';
  } else {
    out = '{';
    let first = true;
    for (const key of sortedKeys(value)) {
      const member: unknown = Reflect.get(value, key);
      if (member === undefined || typeof member === 'symbol') continue;
      out += `${first ? '' : ','}${canonicalize(key, ancestors)}:${canonicalize(member, ancestors)}`;
      first = false;
    }
    out += '}';
  }
  ancestors.delete(value);
  return out;
}

/**
 * Own enumerable names in UTF-16 code unit order (what `<` compares, and the default sort).
 * An insertion sort: objects in arguments have a handful of members, often already in
 * order, the case an insertion sort is made for; a large object goes to Array.prototype.sort.
 */
function sortedKeys(value: object): string[] {
  const keys = Object.keys(value);
  if (keys.length > 32) return keys.sort();
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i] ?? '';
    let j = i - 1;
    for (; j >= 0 && (keys[j] ?? '') > key; j--) keys[j + 1] = keys[j] ?? '';
    keys[j + 1] = key;
  }
  return keys;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
