// The idempotency key (core/key.ts): SEP-3182's opaque string, which this server takes when it is
// 1 to 255 characters of well-formed text without control characters.

import fc from 'fast-check';
import { checkIdempotencyKey, MAX_IDEMPOTENCY_KEY_LENGTH } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';

describe('idempotency keys', () => {
  const wellFormedKey = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 80 }).filter((s) => {
    const length = [...s].length;
    return length >= 1 && length <= MAX_IDEMPOTENCY_KEY_LENGTH && !/\p{Cc}/u.test(s);
  });

  it('are accepted whenever they are 1–255 characters of well-formed text without controls', () => {
    fc.assert(
      fc.property(wellFormedKey, (key) => {
        expect(checkIdempotencyKey(key)).toStrictEqual({ ok: true, key });
      }),
    );
  });

  it('are refused with a control character anywhere in them', () => {
    fc.assert(
      fc.property(wellFormedKey, fc.nat(), fc.integer({ min: 0, max: 0x1f }), (key, at, control) => {
        const i = at % (key.length + 1);
        const bad = key.slice(0, i) + String.fromCharCode(control) + key.slice(i);
        expect(checkIdempotencyKey(bad).ok).toBe(false);
      }),
    );
  });
});

// --- Keys of every shape against a model of the rule ---
//
// Keys are built of pieces of each kind a client may send (ASCII, other letters, astral
// characters, C0 and C1 controls, DEL, lone surrogates of either half), one piece repeated up to
// past twice the limit, so lengths in code points and in UTF-16 units fall on both sides of 255 and
// of 510. The model reads each condition its own way (regular expressions over code points), and a
// refusal must name a reason that holds, with the key's own numbers: its length in characters (code
// points, as the limit counts them) and the first control character's place among them.

const piece = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('a', 'Z', '7', '-', '_', '.', ' ', '~') },
  { weight: 3, arbitrary: fc.constantFrom('é', 'ß', '中', 'Ω', '\u200b') },
  { weight: 3, arbitrary: fc.constantFrom('😀', '𝄞', '🇫🇷', '\u{10ffff}') },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 0x1f }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.integer({ min: 0x7f, max: 0x9f }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.constantFrom('\ud800', '\udbff', '\udc00', '\udfff') },
);
const valid = fc.constantFrom('k', 'é', '😀');
const around = (n: number) => fc.integer({ min: Math.max(0, n - 3), max: n + 3 });
const key = fc
  .tuple(
    fc.array(piece, { maxLength: 8 }),
    valid,
    fc.oneof(
      fc.integer({ min: 0, max: 600 }),
      around(MAX_IDEMPOTENCY_KEY_LENGTH),
      around(2 * MAX_IDEMPOTENCY_KEY_LENGTH),
    ),
    fc.array(piece, { maxLength: 8 }),
  )
  .map(([before, repeated, times, after]) => before.join('') + repeated.repeat(times) + after.join(''));

type Reason = 'type' | 'empty' | 'length' | 'surrogate' | 'control';

/** Every reason the rule has to refuse `raw`, each read without the library. */
function reasonsAgainst(raw: unknown): Set<Reason> {
  const reasons = new Set<Reason>();
  if (typeof raw !== 'string') return reasons.add('type');
  if (raw === '') reasons.add('empty');
  if (/\p{Cs}/u.test(raw)) reasons.add('surrogate');
  if (Array.from(raw).length > MAX_IDEMPOTENCY_KEY_LENGTH) reasons.add('length');
  if (/\p{Cc}/u.test(raw)) reasons.add('control');
  return reasons;
}

/** What a refusal says, read back: its reason and the number it gives. */
function readRefusal(message: string): { reason: Reason; number?: number } {
  const patterns: [Reason, RegExp][] = [
    ['type', /^idempotencyKey must be a string, got /],
    ['empty', /^idempotencyKey must not be empty$/],
    ['length', /^idempotencyKey must be at most 255 characters, got (\d+)$/],
    ['surrogate', /^idempotencyKey must be well-formed Unicode \(it contains a lone surrogate\)$/],
    ['control', /^idempotencyKey must not contain control characters \(found one at index (\d+)\)$/],
  ];
  for (const [reason, pattern] of patterns) {
    const match = pattern.exec(message);
    if (match) return { reason, ...(match[1] !== undefined && { number: Number(match[1]) }) };
  }
  throw new Error(`a refusal that names no reason: ${message}`);
}

describe('keys of every shape, against the model', () => {
  it('are taken exactly when the model finds no reason to refuse them; a refusal names one that holds, with the key’s own numbers', () => {
    const anything = fc.oneof(
      { weight: 8, arbitrary: key },
      {
        weight: 1,
        arbitrary: fc.oneof(
          fc.integer(),
          fc.boolean(),
          fc.constant(null),
          fc.array(fc.string()),
          fc.object(),
        ),
      },
    );
    fc.assert(
      fc.property(anything, (raw) => {
        const reasons = reasonsAgainst(raw);
        const check = checkIdempotencyKey(raw);
        if (check.ok) {
          expect([...reasons]).toStrictEqual([]);
          expect(check.key).toBe(raw);
          return;
        }
        const { reason, number } = readRefusal(check.message);
        expect(reasons).toContain(reason);
        // Only a string has a length or a place; anything else is refused for its type above.
        if (typeof raw !== 'string') return;
        const text = raw;
        if (reason === 'length') expect(number).toBe(Array.from(text).length);
        if (reason === 'control') {
          const at = /\p{Cc}/u.exec(text)?.index ?? -1;
          expect(number).toBe(Array.from(text.slice(0, at)).length);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});
