// The fingerprint's fast path (core/fingerprint-fast.ts) against the plain RFC 8785 writer it
// stands in front of (core/fingerprint.ts): on every value, it either gives up or writes exactly
// what the plain writer writes. (test/idempotency/core/fingerprint.test.ts holds the two together to the `canonicalize`
// package.)

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../../packages/idempotency/core/fingerprint.js';
import { nativelyCanonical } from '../../../packages/idempotency/core/fingerprint-fast.js';

/** What the plain writer makes of `value`, or the reason it refuses it. */
function plain(value: unknown): string | undefined | { refused: string } {
  try {
    return canonicalJson(value);
  } catch (error) {
    return { refused: error instanceof Error ? error.message : String(error) };
  }
}

/** Names that sort differently by UTF-16 code units than by code points or by locale. */
const name = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 6 }),
  fc.constantFrom('b', 'a', '10', '9', 'A', 'é', '\ud83d\ude00', '\uffff', '__proto__', 'toJSON'),
);

/** Parsed JSON of every shape, large objects with members out of order among them. */
const parsed = fc
  .letrec((tie) => ({
    value: fc.oneof(
      { depthSize: 'small' },
      fc.oneof(
        fc.integer(),
        fc.double({ noNaN: true, noDefaultInfinity: true }),
        fc.boolean(),
        fc.constant(null),
      ),
      fc.string({ unit: 'binary' }),
      fc.array(tie('value'), { maxLength: 6 }),
      fc.dictionary(name, tie('value'), { maxKeys: 8 }),
    ),
  }))
  .value.map((value): unknown => JSON.parse(JSON.stringify(value) ?? 'null'));

const large = fc
  .array(
    fc.dictionary(name, fc.oneof(fc.integer(), fc.string({ unit: 'binary' })), { minKeys: 2, maxKeys: 8 }),
    {
      minLength: 40,
      maxLength: 120,
    },
  )
  .map((items): unknown => JSON.parse(JSON.stringify(items)));

describe('the fingerprint fast path', () => {
  it('writes exactly what the plain writer writes, or leaves the value to it', () => {
    let written = 0;
    fc.assert(
      fc.property(fc.oneof(parsed, large), (value) => {
        const fast = nativelyCanonical(value);
        if (fast === undefined) return;
        written++;
        expect(fast).toStrictEqual(plain(value));
      }),
      { numRuns: 1_000 },
    );
    // A fast path that always gave up would pass the property above and be no fast path at all.
    expect(written).toBeGreaterThan(300);
  });

  it('leaves to the plain writer what only it can refuse: lone surrogates, and values JSON.parse never makes', () => {
    for (const value of [
      ['\ud800'],
      { '\udc00': 1 },
      [Number.POSITIVE_INFINITY],
      [undefined],
      new Map(),
      [1n],
    ]) {
      expect(nativelyCanonical(value)).toBeUndefined();
    }
  });
});
