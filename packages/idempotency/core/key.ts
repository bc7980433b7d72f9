// --- The idempotency key (SEP-3182: an opaque string the client generates) ---
//
// The SEP sets no length limit and lets servers publish one. This server publishes
// Stripe's: 1 to 255 characters. Control characters are refused because keys end up in
// log lines and store keys; lone surrogates because they cannot be encoded as UTF-8, so
// two different keys would collapse into one once a shared store (Redis) holds them.

import { Messages } from './errors.js';

/** Longest accepted key, in Unicode code points (Stripe's limit; a UUID is 36). */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

// C0 controls, DEL and C1 controls: the Unicode general category Cc.
const CONTROL_CHARACTER = /\p{Cc}/u;

export type KeyCheck = { ok: true; key: string } | { ok: false; message: string };

export function checkIdempotencyKey(raw: unknown): KeyCheck {
  if (typeof raw !== 'string') {
    return { ok: false, message: Messages.keyNotString(describeType(raw)) };
  }
  if (raw.length === 0) return { ok: false, message: Messages.keyEmpty };
  if (!raw.isWellFormed()) return { ok: false, message: Messages.keyLoneSurrogate };
  // Lengths and places are counted in characters (code points), as the limit is, never in the
  // UTF-16 units a JavaScript string is made of: a client in another language counts the former.
  const length = raw.length > MAX_IDEMPOTENCY_KEY_LENGTH ? codePoints(raw, raw.length) : raw.length;
  if (length > MAX_IDEMPOTENCY_KEY_LENGTH) {
    return { ok: false, message: Messages.keyTooLong(MAX_IDEMPOTENCY_KEY_LENGTH, length) };
  }
  const control = CONTROL_CHARACTER.exec(raw);
  if (control) return { ok: false, message: Messages.keyControlCharacter(codePoints(raw, control.index)) };
  return { ok: true, key: raw };
}

/** How many code points the first `units` UTF-16 units of well-formed `text` hold. */
function codePoints(text: string, units: number): number {
  let count = units;
  for (let i = 0; i < units; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) count--; // a high surrogate: its pair is one code point
  }
  return count;
}

function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
