// How the checker writes arguments and keys again (packages/checker/spellings.ts): every other
// spelling of the same JSON (whitespace, member order, number spellings, string escapes) parses
// back to the very value it was written from, and is other bytes; a renormalised string and a
// changed argument are other values; a key's other spellings are each another key.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonical } from '../../packages/checker/answers.js';
import * as spellings from '../../packages/checker/spellings.js';

/** Arguments as a tool takes them: JSON with no -0 (which JSON writes as 0) and no lone surrogates. */
const args = fc
  .dictionary(fc.string(), fc.jsonValue({ noUnicodeString: false }))
  .map((v) => JSON.parse(JSON.stringify(v)) as Record<string, unknown>);
const number = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((n) => !Object.is(n, -0)),
  fc.constantFrom(1, 1.5, 1e21, 1e-7, 5e-324, Number.MAX_VALUE, -2.5e-10),
);

describe('another spelling of the same arguments', () => {
  const ways: [string, spellings.Spelling][] = [
    ['spaced out', { spaced: true }],
    ['members reversed', { reverseKeys: true }],
    ['numbers respelled', { number: (n) => spellings.respellings(n)[1] }],
    ['strings escaped', { string: spellings.ESCAPINGS[0] }],
    [
      'all at once',
      {
        spaced: true,
        reverseKeys: true,
        number: (n) => spellings.respellings(n)[2],
        string: spellings.ESCAPINGS[2],
      },
    ],
  ];

  for (const [how, spelling] of ways)
    it(`parses back to the same value: ${how}`, () => {
      fc.assert(
        fc.property(args, (value) => {
          expect(canonical(JSON.parse(spellings.write(value, spelling)))).toBe(canonical(value));
        }),
      );
    });

  it('with no spelling asked for is the bytes JSON.stringify writes', () => {
    fc.assert(
      fc.property(args, (value) => {
        expect(spellings.write(value, {})).toBe(JSON.stringify(value));
      }),
    );
  });

  it('reversed is other bytes whenever an object has two members', () => {
    const text = spellings.write({ a: 1, b: { c: 2, d: 3 } }, { reverseKeys: true });
    expect(text).toBe('{"b":{"d":3,"c":2},"a":1}');
  });
});

describe('a number written three other ways', () => {
  it('parses to the same number each time, in three spellings that differ from each other and from JSON’s', () => {
    fc.assert(
      fc.property(number, (n) => {
        const spelled = spellings.respellings(n);
        for (const text of spelled) expect(JSON.parse(text)).toBe(n);
        expect(new Set([JSON.stringify(n), ...spelled]).size).toBe(4);
      }),
    );
  });

  it('writes 1 as 1.0, 1e0 and 1.00, and 1e+21 with its exponent spelled otherwise', () => {
    expect(spellings.respellings(1)).toStrictEqual(['1.0', '1e0', '1.00']);
    expect(spellings.respellings(1e21)).toStrictEqual(['1E+21', '1.0e+21', '1e+021']);
  });
});

describe('a string escaped another way', () => {
  it('parses to the same string with each escaping, and each escaping of non-ASCII text is other bytes', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (s) => {
        for (const escaping of spellings.ESCAPINGS) expect(JSON.parse(escaping(s))).toBe(s);
        if (/[\u007f-\ud7ff\ue000-\uffff]/.test(s))
          for (const escaping of spellings.ESCAPINGS.slice(1))
            expect(escaping(s)).not.toBe(JSON.stringify(s));
      }),
    );
  });

  it('escapes only what is not ASCII, in lower- or upper-case hex', () => {
    expect(spellings.ESCAPINGS.map((e) => e('café'))).toStrictEqual([
      '"\\u0063\\u0061\\u0066\\u00e9"',
      '"caf\\u00e9"',
      '"caf\\u00E9"',
    ]);
  });
});

/** The numbers, strings and booleans in a value, member names left out, depth first. */
function scalars(value: unknown): unknown[] {
  if (Array.isArray(value)) return value.flatMap(scalars);
  if (typeof value === 'object' && value !== null) return Object.values(value).flatMap(scalars);
  return value === null ? [] : [value];
}

describe('a value that is not the same', () => {
  it('renormalised is a distinct string that looks the same, wherever NFC and NFD differ', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), (s) => {
        const other = spellings.renormalise(s);
        expect(other.normalize('NFC')).toBe(s.normalize('NFC'));
        if (s.normalize('NFC') !== s.normalize('NFD')) expect(other).not.toBe(s);
      }),
    );
    expect(spellings.renormalise('café')).toBe('cafe\u0301');
  });

  it('with other arguments changes exactly one scalar, and nothing if there is none', () => {
    fc.assert(
      fc.property(args, (value) => {
        const other = spellings.otherArguments(value);
        const hasScalarValue = scalars(value).length > 0;
        if (!hasScalarValue) {
          expect(other).toBeUndefined();
          return;
        }
        expect(canonical(other)).not.toBe(canonical(value));
        const changed = scalars(other).filter((x, i) => x !== scalars(value)[i]);
        expect(changed).toHaveLength(1);
      }),
    );
  });

  it('finds every value and member name anywhere in the arguments', () => {
    const value = { outer: [{ inner: 'café' }, 2] };
    expect(spellings.some(value, (v) => v === 'inner')).toBe(true);
    expect(spellings.some(value, (v) => v === 'café')).toBe(true);
    expect(spellings.some(value, (v) => v === 3)).toBe(false);
  });
});

describe("a key's other spellings", () => {
  it('are each another key: lower case, upper case and between spaces', () => {
    const key = 'Key-AbC';
    expect(spellings.KEY_SPELLINGS.map(({ spell }) => spell(key))).toStrictEqual([
      'key-abc',
      'KEY-ABC',
      ' Key-AbC ',
    ]);
  });

  it('are spellings of one UUID, the first of them with a lower case of its own', () => {
    fc.assert(
      fc.property(fc.uuid(), (uuid) => {
        const [first, second, third] = spellings.opaqueBases(uuid);
        expect(first?.toLowerCase()).not.toBe(first);
        for (const base of [first, second, third]) expect(base?.toLowerCase()).toContain(uuid);
      }),
    );
  });
});

describe('a different request, for any number', () => {
  it('with other arguments is another parsed value even where n + 1 is n (past 2^53)', () => {
    fc.assert(
      fc.property(fc.constantFrom(2 ** 53, 1e21, Number.MAX_VALUE, -(2 ** 60)), (n) => {
        const other = spellings.otherArguments({ amount: n });
        expect(canonical(other)).not.toBe(canonical({ amount: n }));
      }),
    );
  });
});
