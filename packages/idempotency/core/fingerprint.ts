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

export type Fingerprint = string;

export type FingerprintResult = { ok: true; fingerprint: Fingerprint } | { ok: false; reason: string };

export function fingerprintToolCall(name: unknown, args: unknown): FingerprintResult {
  let canonical: string | undefined;
  try {
    // SEP: an absent `arguments` is the same request as `{}`.
    const value = [name, args === undefined ? {} : args];
    canonical = nativelyCanonical(value) ?? canonicalize(value, new Set());
  } catch (error) {
    // JSON.parse turns 1e400 into Infinity, which RFC 8785 cannot write; and very deep
    // nesting can exhaust the stack. Neither can be compared, so neither may be keyed.
    const reason = error instanceof RangeError ? 'nesting too deep' : errorMessage(error);
    return { ok: false, reason };
  }
  if (canonical === undefined) return { ok: false, reason: 'not a JSON value' };
  // One-shot `hash`, not `createHash`: the same SHA-256, without a Hash object per call.
  return { ok: true, fingerprint: hash('sha256', canonical, 'base64url') };
}

// --- RFC 8785 (JSON Canonicalization Scheme) ---
//
// Written out rather than taken from the `canonicalize` package, for speed only: that
// package checks strings for lone surrogates one UTF-16 unit at a time in JavaScript and
// calls JSON.stringify and Array.prototype.sort for every string and object, which made a
// 100 KB `arguments` cost milliseconds. Its output, and the reason it refuses a value, are
// kept exactly (package version 4.0.0), for every input: test/equivalence.test.ts holds
// this code to the package, which stays as the tests' reference. (Only the depth at which
// nesting exhausts the stack differs; it depends on the stack and the JIT, and never was fixed.)
//   - Members sorted by their names' UTF-16 code units.
//   - Strings and numbers as ECMAScript's JSON.stringify writes them, which is what RFC 8785
//     specifies; a string with a lone surrogate and a non-finite number are refused.
//   - `undefined` and symbol members are left out; in arrays they are written as null.

// --- The common case, written by JSON.stringify itself ---
//
// JSON.stringify writes strings and numbers exactly as RFC 8785 does; what it does not do is sort
// members. Given an array of property names, though, it writes every object's members in that
// array's order: so for a value made only of plain objects, arrays, finite numbers, well-formed
// strings, booleans and null, JSON.stringify(value, sortedNamesOfAllItsObjects) is its canonical
// form, at native speed (the fingerprint of 100 KB of arguments, measured side by side: 1.3 to 1.5
// × SHA-256 of a bare JSON.stringify, where the writer below took 2.3 ×, and a one-pass writer in
// JavaScript 1.7 ×). One walk checks that the value is such a value and gathers the names;
// anything else is left to the full writer, which refuses or writes it exactly as the
// `canonicalize` package does.

/**
 * Names past this many make the native writer look each one up on every object: the full
 * writer's cost grows with the members there are, not with the names times the objects.
 */
const MAX_NATIVE_NAMES = 64;

/** Deeper than arguments are nested in practice, and short of any stack. */
const MAX_NATIVE_DEPTH = 64;

/**
 * Below this many members, arguments whose members are out of order go to the full writer:
 * JSON.stringify given names takes V8's slower path, which pays only on larger arguments. The
 * walk is then paid for nothing (1 KB of arguments out of order: 11.0 µs against the full
 * writer's 9.1; 100 KB: 690 µs against 983; `{"amount":1}`, in order: 0.59 against 0.62).
 */
const MIN_MEMBERS_FOR_NAMES = 256;

/** What a walk of the arguments found: their objects' names, whether each object's are in order. */
interface Walk {
  names: Set<string>;
  inOrder: boolean;
  members: number;
}

/** The canonical form of `value` if JSON.stringify can write it (see above), else undefined. */
function nativelyCanonical(value: unknown): string | undefined {
  // A `toJSON` somebody put on every object or array would be called by both writers, differently.
  if ('toJSON' in Object.prototype || 'toJSON' in Array.prototype) return undefined;
  const walk: Walk = { names: new Set(), inOrder: true, members: 0 };
  if (!isNativelyWritten(value, walk, 0)) return undefined;
  // Members already in canonical order need no names: V8's fastest path writes them as they are.
  if (walk.inOrder) return JSON.stringify(value);
  if (walk.members < MIN_MEMBERS_FOR_NAMES || walk.names.size > MAX_NATIVE_NAMES) return undefined;
  // The default sort compares UTF-16 code units, RFC 8785's order.
  return JSON.stringify(value, [...walk.names].sort());
}

/** Whether JSON.stringify writes `value` as RFC 8785 does, given its objects' names (see `Walk`). */
function isNativelyWritten(value: unknown, walk: Walk, depth: number): boolean {
  switch (typeof value) {
    case 'string':
      return value.isWellFormed();
    case 'number':
      return Number.isFinite(value);
    case 'boolean':
      return true;
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth > MAX_NATIVE_DEPTH) return false;
  if (Array.isArray(value)) {
    // A hole, or an undefined the full writer turns into null, fails as not natively written.
    for (let i = 0; i < value.length; i++) if (!isNativelyWritten(value[i], walk, depth + 1)) return false;
    return true;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return false;
  const keys = Object.keys(value);
  // JSON.stringify reads a listed name whether or not it is enumerable; the full writer, only if it is.
  if (Object.getOwnPropertyNames(value).length !== keys.length) return false;
  let previous: string | undefined;
  for (const key of keys) {
    // `__proto__` read on an object without it of its own is Object.prototype, an object.
    if (key === '__proto__' || !key.isWellFormed()) return false;
    if (!isNativelyWritten(Reflect.get(value, key), walk, depth + 1)) return false;
    if (previous !== undefined && previous > key) walk.inOrder = false;
    previous = key;
    walk.names.add(key);
  }
  walk.members += keys.length;
  return true;
}

// --- The full writer ---

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
 * order, where it is several times faster than Array.prototype.sort.
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
