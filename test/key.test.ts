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
