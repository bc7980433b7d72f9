// --- Reading answers: the same response or not, where two differ, and an answer in a few words ---
//
// "The same response" is the same parsed value (canonical JSON, keys sorted). An error is read by
// its `data.type`, the SEP's way of naming its two failure modes; an HTTP refusal carries no
// JSON-RPC answer at all.

import type { Call } from './run.js';
import { isObject } from './wire.js';

/** Canonical JSON (keys sorted), so "the same response" means the same parsed value. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (!isObject(value)) return JSON.stringify(value) ?? 'undefined';
  return `{${Object.keys(value)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
    .join(',')}}`;
}

export const same = (a: Call, b: Call) => a.kind === b.kind && canonical(a.value) === canonical(b.value);

/** How a later answer under the key is not the stored one: which it was, or where it differs. */
export function notStored(original: Call, later: Call): string {
  if ((original.kind === 'error') !== (later.kind === 'error')) return `not the stored ${describe(original)}`;
  return `not the stored result (it differs at ${difference(original, later)})`;
}

/** Where two answers first differ: the member's path, and both values around the difference. */
export function difference(a: Call, b: Call): string {
  const root = (call: Call) => (call.kind === 'error' ? 'error' : 'result');
  if (root(a) !== root(b)) return `${describe(a)}, then ${describe(b)}`;
  return firstDifference(a.value, b.value, root(a)) ?? `${describe(a)}, then ${describe(b)}`;
}

function firstDifference(a: unknown, b: unknown, path: string): string | undefined {
  if (isObject(a) && isObject(b)) {
    for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      const at = `${path}.${k}`;
      if (!(k in a)) return `${at}, only in the second: ${excerpt(canonical(b[k]), 0)}`;
      if (!(k in b)) return `${at}, only in the first: ${excerpt(canonical(a[k]), 0)}`;
      const found = firstDifference(a[k], b[k], at);
      if (found) return found;
    }
    return undefined;
  }
  if (Array.isArray(a) && Array.isArray(b) && a.length === b.length) {
    for (const [i, item] of a.entries()) {
      const found = firstDifference(item, b[i], `${path}[${i}]`);
      if (found) return found;
    }
    return undefined;
  }
  const [x, y] = [canonical(a), canonical(b)];
  if (x === y) return undefined;
  let i = 0;
  while (x[i] === y[i]) i++;
  return `${path}, character ${i + 1}: ${excerpt(x, i)}, then ${excerpt(y, i)}`;
}

/** Up to 40 characters of `text` from a little before `i`, marked where they are cut. */
function excerpt(text: string, i: number): string {
  const from = Math.max(0, i - 10);
  return `${from > 0 ? '…' : ''}${text.slice(from, from + 40)}${from + 40 < text.length ? '…' : ''}`;
}

export function errorData(call: Call): { type?: unknown; idempotencyKey?: unknown } {
  const data = isObject(call.value) ? call.value.data : undefined;
  return isObject(data) ? data : {};
}

/**
 * The SEP's two error types, written here from its text (the checker shares no code with any
 * server), and any other refusal a server names the same way (`idempotency_…`: a bad key, a full
 * store), which a check that expects a replay or an execution must not take for either.
 */
export const SEP_ERROR = {
  inProgress: 'idempotency_key_in_progress',
  conflict: 'idempotency_key_conflict',
} as const;

export const isIdempotencyError = (call: Call) => {
  const { type } = errorData(call);
  return typeof type === 'string' && type.startsWith('idempotency_');
};

/** Refused by HTTP auth: a 401 or 403 with no JSON-RPC answer in it. */
export const httpRefusal = (call: Call) =>
  call.kind === 'error' &&
  call.value === undefined &&
  (call.answer.http?.status === 401 || call.answer.http?.status === 403);

/** A result's first text content, or the whole result as canonical JSON. */
export function textOf(call: Call): string {
  const value = isObject(call.value) ? call.value : {};
  const first = Array.isArray(value.content) ? value.content[0] : undefined;
  return isObject(first) && typeof first.text === 'string' ? first.text : canonical(value);
}

/** A short account of one answer: its text, its error code and `data.type`, or its HTTP refusal. */
export function describe(call: Call): string {
  if (httpRefusal(call)) {
    // The challenge's `error` says why (RFC 6750): invalid_token, insufficient_scope, …
    const why = /error="([^"]*)"/.exec(call.answer.http?.challenge ?? '')?.[1];
    return `HTTP ${call.answer.http?.status}${why === undefined ? '' : `, WWW-Authenticate error="${why}"`}`;
  }
  const value = isObject(call.value) ? call.value : {};
  const type = errorData(call).type;
  if (call.kind === 'error') return `error ${value.code} ${typeof type === 'string' ? type : value.message}`;
  const text = textOf(call);
  // Long enough for a server's whole sentence, tool names and all; a page of text is still cut.
  const short = text.length > 200 ? `${text.slice(0, 197)}…` : text;
  return call.kind === 'tool error' ? `isError "${short}"` : `"${short}"`;
}

export const ms = (duration: number) => `${Math.round(duration)} ms`;

/**
 * Refused as the SEP's authorization check would refuse it: by HTTP auth, or by a JSON-RPC error
 * that is not about the key (a conflict or in-progress answer means the record was consulted first).
 */
export const refused = (call: Call) =>
  httpRefusal(call) || (call.kind === 'error' && !isIdempotencyError(call));

/** Does `call` carry `stored`'s result (its text, as JSON writes it), whatever its status? */
export function carries(call: Call, stored: Call): boolean {
  const needle = JSON.stringify(textOf(stored)).slice(1, -1);
  return [call.answer.text, canonical(call.value)].some((text) => text.includes(needle));
}
