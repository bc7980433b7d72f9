// The digest of what the model saw (agents/digest.ts), which names a response that has no id of its
// own: equal exactly when the values are, whatever order an object's members or a Map's or Set's
// entries come in; every kind of value written as itself, never as another kind that looks alike;
// and a value with no form to digest refused, naming where it is.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { digestOfModelInput, UndigestibleMessageError } from '../../../packages/idempotency/agents/digest.js';

/** The model of equality for JSON values: members in sorted order, -0 as 0 (as JSON writes it). */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** `value` with every object's members in reverse order. */
function reordered(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reordered);
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(
      Object.entries(value)
        .reverse()
        .map(([k, v]) => [k, reordered(v)]),
    );
  return value;
}

describe('the digest of JSON values', () => {
  it('is equal exactly when the values are, members in any order', () => {
    const json = fc.jsonValue({ maxDepth: 3 });
    const pair = fc.oneof(
      fc.tuple(json, json),
      json.map((v) => [v, reordered(v)] as const),
    );
    fc.assert(
      fc.property(pair, ([a, b]) => {
        expect(digestOfModelInput(a) === digestOfModelInput(b)).toBe(canonical(a) === canonical(b));
      }),
      { numRuns: 300 },
    );
  });

  it('reads an undefined member as an absent one, as JSON and the SDKs do', () => {
    expect(digestOfModelInput({ a: 1, b: undefined })).toBe(digestOfModelInput({ a: 1 }));
  });

  it('reads -0 as 0, and every NaN as one', () => {
    expect(digestOfModelInput(-0)).toBe(digestOfModelInput(0));
    expect(digestOfModelInput(Number.NaN)).toBe(digestOfModelInput(0 / 0));
  });

  it('is base64url SHA-256', () => {
    expect(digestOfModelInput({ role: 'user', content: 'hi' })).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});

describe('each kind of value', () => {
  const bytes = Uint8Array.of(1, 2, 3, 4);
  // Pairs that print alike, or hold the same bytes or text, but are not the same value.
  it.each([
    ['a number and its text', 1, '1'],
    ['a bigint and a number', 1n, 1],
    ['a bigint and its text', 1n, '1'],
    ['null and undefined', null, undefined],
    ['false and 0', false, 0],
    ['an empty array and an empty object', [], {}],
    ['an array and the object of its indices', ['a'], { 0: 'a' }],
    ['bytes and their base64, outside a file part', bytes, Buffer.from(bytes).toString('base64')],
    ['bytes and the array of their values', bytes, [1, 2, 3, 4]],
    ['bytes under two typed-array types', Uint16Array.of(0x0201, 0x0403), bytes],
    ['a URL and its address as text', new URL('https://example.com/a'), 'https://example.com/a'],
    ['a Date and its time', new Date(0), 0],
    ['a Map and the object of its entries', new Map([['a', 1]]), { a: 1 }],
    ['a Set and the array of its elements', new Set([1]), [1]],
    ['two lone surrogates', '\ud800', '\ud801'],
    ['a lone surrogate and the replacement character', '\ud800', '\ufffd'],
    ['a string split two ways across two members', ['ab', 'c'], ['a', 'bc']],
  ])('tells apart %s', (_, a, b) => {
    expect(digestOfModelInput(a)).not.toBe(digestOfModelInput(b));
  });

  it.each([
    ['a Buffer and a Uint8Array of the same bytes', Buffer.from([1, 2, 3]), Uint8Array.of(1, 2, 3)],
    [
      'an ArrayBuffer and a Uint8Array of the same bytes',
      Uint8Array.of(1, 2, 3).buffer,
      Uint8Array.of(1, 2, 3),
    ],
    [
      'a Map whatever order its entries came in',
      new Map([
        ['a', 1],
        ['b', 2],
      ]),
      new Map([
        ['b', 2],
        ['a', 1],
      ]),
    ],
    ['a Set whatever order its elements came in', new Set([1, 'x', null]), new Set([null, 'x', 1])],
    ['an object without a prototype and a literal', Object.assign(Object.create(null), { a: 1 }), { a: 1 }],
    ['a URL given twice', new URL('https://example.com/a?b=1'), new URL('https://example.com/a?b=1')],
  ])('writes alike %s', (_, a, b) => {
    expect(digestOfModelInput(a)).toBe(digestOfModelInput(b));
  });
});

describe('a value with no form to digest', () => {
  const refusal = (value: unknown) => {
    try {
      digestOfModelInput(value);
    } catch (error) {
      if (error instanceof UndigestibleMessageError) return { path: error.path, message: error.message };
      throw error;
    }
    throw new Error('digested');
  };

  it('is refused where it stands, its path named, for a symbol or a function anywhere', () => {
    fc.assert(
      fc.property(
        fc.array(fc.nat(3), { maxLength: 4 }),
        fc.constantFrom(Symbol('s'), () => 1),
        (where, bad) => {
          // `bad` put inside arrays at the given places, `where` naming each index.
          let value: unknown = bad;
          let path = '';
          for (const i of [...where].reverse()) {
            value = [...Array(i).fill(0), value];
            path = `[${i}]${path}`;
          }
          expect(refusal(value).path).toBe(`$${path}`);
        },
      ),
    );
  });

  it('names a member whose getter throws, and what it threw', () => {
    const options = {
      get app(): unknown {
        throw new Error('revoked');
      },
    };
    const message = { role: 'user', content: 'Charge.', providerOptions: options };
    expect(refusal([message])).toMatchObject({
      path: '$[0].providerOptions.app',
      message: expect.stringContaining('revoked'),
    });
  });

  it('names a getter that throws where the SDK reads a part as it sends it, too', () => {
    // The members the AI SDK reads to put a part in its sent form (a message's content and role, a
    // part's type, a tool result's output, a file's data) are read here before any other.
    const throwing = (key: string, rest: Record<string, unknown>) =>
      Object.defineProperty({ ...rest }, key, {
        enumerable: true,
        get() {
          throw new Error('revoked');
        },
      });
    const file = { type: 'file', mediaType: 'application/pdf', data: 'AAAA' };
    const result = (output: unknown) => ({ type: 'tool-result', toolCallId: 'c', output });
    const cases: [unknown, string][] = [
      [[throwing('content', { role: 'user' })], '$[0].content'],
      [[throwing('role', { content: [file] })], '$[0].role'],
      [[{ role: 'user', content: [throwing('type', { data: 'AAAA' })] }], '$[0].content[0].type'],
      [[{ role: 'user', content: [throwing('data', { type: 'file' })] }], '$[0].content[0].data'],
      [
        [{ role: 'user', content: [{ type: 'file', data: throwing('type', {}) }] }],
        '$[0].content[0].data.type',
      ],
      [[{ role: 'tool', content: [throwing('output', result(0))] }], '$[0].content[0].output'],
      [
        [{ role: 'tool', content: [result(throwing('value', { type: 'content' }))] }],
        '$[0].content[0].output.value',
      ],
      [
        [{ role: 'tool', content: [result({ type: 'content', value: [throwing('data', file)] })] }],
        '$[0].content[0].output.value[0].data',
      ],
    ];
    for (const [value, path] of cases)
      expect(refusal(value), path).toMatchObject({ path, message: expect.stringContaining('revoked') });
  });

  it('is refused past 256 levels of nesting, rather than run out of stack', () => {
    let deep: unknown = 'bottom';
    for (let i = 0; i < 300; i++) deep = [deep];
    expect(refusal(deep).message).toContain('nested deeper than 256');
    let fine: unknown = 'bottom';
    for (let i = 0; i < 200; i++) fine = [fine];
    expect(() => digestOfModelInput(fine)).not.toThrow();
  });

  it('is not the same value met twice, only a cycle: a shared object is digested each time', () => {
    const shared = { a: 1 };
    expect(digestOfModelInput([shared, shared])).toBe(digestOfModelInput([{ a: 1 }, { a: 1 }]));
    const cycle: Record<string, unknown> = {};
    cycle.entries = new Map([['self', cycle]]);
    expect(refusal(cycle)).toMatchObject({
      path: '$.entries.<entry 0>[1]',
      message: expect.stringContaining('a cycle'),
    });
  });
});
