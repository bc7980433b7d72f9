// How the checker reads answers (packages/checker/answers.ts): "the same response" is the same
// parsed value whatever its key order; where two answers differ is named by the member's path; an
// answer is told in a few words (its text, its error code and `data.type`, its HTTP refusal); and
// a refusal by authorization is told from the SEP's own idempotency errors.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonical,
  carries,
  describe as describeCall,
  difference,
  httpRefusal,
  isIdempotencyError,
  notStored,
  refused,
  same,
  textOf,
} from '../../packages/checker/answers.js';
import { callOf, rpcError, text } from './model.js';

/** The same value with every object's members in another order. */
function reordered(value: unknown, seed: number): unknown {
  if (Array.isArray(value)) return value.map((v) => reordered(v, seed));
  if (typeof value !== 'object' || value === null) return value;
  const entries = Object.entries(value).map(([k, v]) => [k, reordered(v, seed)] as const);
  const rotated = entries.length ? seed % entries.length : 0;
  return Object.fromEntries([...entries.slice(rotated), ...entries.slice(0, rotated)].reverse());
}

const json = fc.jsonValue().map((v) => JSON.parse(JSON.stringify(v)) as unknown);

describe('the same response', () => {
  it('is the same parsed value, whatever order its members were written in', () => {
    fc.assert(
      fc.property(json, fc.nat(), (value, seed) => {
        expect(canonical(reordered(value, seed))).toBe(canonical(value));
        expect(same(callOf({ result: value }), callOf({ result: reordered(value, seed) }))).toBe(true);
      }),
    );
  });

  it('is canonical JSON that parses back to the value it was written from', () => {
    fc.assert(
      fc.property(json, (value) => {
        expect(JSON.parse(canonical(value))).toStrictEqual(value);
      }),
    );
  });

  it('is never a result and an error carrying the same value', () => {
    const value = { code: 1, message: 'x' };
    expect(same(callOf({ result: value }), callOf({ error: value }))).toBe(false);
  });
});

describe('where two answers differ', () => {
  // A value and a path into it: the leaf at the path is changed, every other member kept.
  const tree = fc.dictionary(
    fc.constantFrom('a', 'b', 'c', 'd'),
    fc.dictionary(fc.constantFrom('x', 'y'), fc.integer()),
    {
      minKeys: 1,
    },
  );

  it('is the path of the first member that differs, in sorted member order', () => {
    fc.assert(
      fc.property(tree, fc.nat(), fc.integer(), (value, pick, other) => {
        const outer = Object.keys(value).sort();
        const at = outer[pick % outer.length] ?? 'a';
        const changed = { ...value, [at]: { ...value[at], x: other } };
        const a = callOf({ result: value });
        const b = callOf({ result: changed });
        if (value[at]?.x === other) return expect(same(a, b)).toBe(true);
        const where = difference(a, b);
        const path =
          value[at]?.x === undefined ? `result.${at}.x, only in the second` : `result.${at}.x, character`;
        expect(where.startsWith(path)).toBe(true);
      }),
    );
  });

  it('shows both values at the first differing character, cut to 40 characters and marked', () => {
    const long = (tail: string) => text(`${'a'.repeat(60)}${tail}${'z'.repeat(60)}`);
    const where = difference(long('1'), long('2'));
    expect(where).toMatch(/^result\.content\[0\]\.text, character 62: …a{10}1z{29}…, then …a{10}2z{29}…$/);
  });

  it('between a result and an error, names each answer', () => {
    expect(difference(text('ok'), rpcError(-32602, 'bad'))).toBe('"ok", then error -32602 bad');
    expect(notStored(text('ok'), rpcError(-32602, 'bad'))).toBe('not the stored "ok"');
    expect(notStored(text('ok 1'), text('ok 2'))).toBe(
      'not the stored result (it differs at result.content[0].text, character 5: "ok 1", then "ok 2")',
    );
  });
});

describe('an answer in a few words', () => {
  it('is its text, its isError, or its error code and the SEP type it names', () => {
    expect(describeCall(text('Charged 1'))).toBe('"Charged 1"');
    expect(describeCall(text('Declined', true))).toBe('isError "Declined"');
    expect(describeCall(rpcError(-32000, 'busy', 'idempotency_key_in_progress', 'k'))).toBe(
      'error -32000 idempotency_key_in_progress',
    );
    expect(describeCall(rpcError(-32602, 'Invalid params'))).toBe('error -32602 Invalid params');
  });

  it('keeps a sentence of up to 200 characters whole and cuts a page to 197 and an ellipsis', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 0, maxLength: 400 }), (t) => {
        const shown = describeCall(text(t)).slice(1, -1);
        if (t.length <= 200) expect(shown).toBe(t);
        else expect(shown).toBe(`${t.slice(0, 197)}…`);
      }),
    );
  });

  it('is an HTTP refusal with the reason its challenge gives', () => {
    const refusal = callOf(
      { error: undefined },
      { status: 403, challenge: 'Bearer error="insufficient_scope", scope="charge"' },
    );
    expect(httpRefusal(refusal)).toBe(true);
    expect(describeCall(refusal)).toBe('HTTP 403, WWW-Authenticate error="insufficient_scope"');
    expect(describeCall(callOf({ error: undefined }, { status: 401 }))).toBe('HTTP 401');
  });

  it('reads a result with no text content as its canonical JSON', () => {
    expect(textOf(callOf({ result: { structuredContent: { b: 2, a: 1 } } }))).toBe(
      '{"structuredContent":{"a":1,"b":2}}',
    );
  });
});

describe('a refusal by authorization', () => {
  it('is an HTTP 401 or 403, or a JSON-RPC error that is not one of the SEP’s idempotency errors', () => {
    expect(refused(callOf({ error: undefined }, { status: 401 }))).toBe(true);
    expect(refused(rpcError(-32003, 'forbidden'))).toBe(true);
    expect(refused(text('ok'))).toBe(false);
    for (const type of [
      'idempotency_key_conflict',
      'idempotency_key_in_progress',
      'idempotency_store_full',
    ]) {
      expect(isIdempotencyError(rpcError(-32602, 'x', type))).toBe(true);
      expect(refused(rpcError(-32602, 'x', type))).toBe(false);
    }
  });

  it('that carries the stored result is seen, in the answer’s text or its value', () => {
    const stored = text('Receipt "r-1": charged 5');
    expect(carries(rpcError(-32003, 'forbidden'), stored)).toBe(false);
    expect(
      carries(callOf({ error: { code: -32003, message: 'no', data: describeCall(stored) } }), stored),
    ).toBe(true);
  });
});
