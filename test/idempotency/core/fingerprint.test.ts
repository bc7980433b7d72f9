// SEP-3182 equivalence, as properties: the same tool name and `arguments` equal as parsed
// JSON values. Any other way of writing the same value is the same request; any real change
// of a value, a key or the tool name is a different one.

import { createHash, randomUUID } from 'node:crypto';
import canonicalize from 'canonicalize';
import fc from 'fast-check';
import {
  fingerprintToolCall,
  IdempotencyErrorType,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { balanceOf } from '../../../demo/processes/launch.js';
import { connectInProcess, type InProcessConnection } from '../../support/in-process.js';
import { errorFrom } from '../../support/sep-cases.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const jsonArguments = fc
  .dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 }))
  .map((value): { [key: string]: Json } => JSON.parse(JSON.stringify(value)));

// --- Another spelling of the same JSON value ---

/** Writes `value` as JSON text with shuffled keys, random whitespace, escapes and number forms. */
function respell(value: Json, g: fc.GeneratorValue): string {
  const ws = () => g(fc.constantFrom, '', ' ', '\n', '\t  ');
  if (value === null || typeof value === 'boolean') return JSON.stringify(value);
  if (typeof value === 'number') return respellNumber(value, g);
  if (typeof value === 'string') return respellString(value, g);
  if (Array.isArray(value))
    return `[${ws()}${value.map((v) => respell(v, g)).join(`${ws()},${ws()}`)}${ws()}]`;
  const keys = g(fc.shuffledSubarray, Object.keys(value), { minLength: Object.keys(value).length });
  const members = keys.map((k) => `${respellString(k, g)}${ws()}:${ws()}${respell(value[k] ?? null, g)}`);
  return `{${ws()}${members.join(`${ws()},${ws()}`)}${ws()}}`;
}

function respellNumber(n: number, g: fc.GeneratorValue): string {
  if (Number.isInteger(n) && Math.abs(n) < 1e15) {
    return g(
      fc.constantFrom,
      `${n}`,
      `${n}.0`,
      `${n}.000`,
      `${n}e0`,
      `${n}E+0`,
      n === 0 ? '0e-1' : `${n}0e-1`,
    );
  }
  // 17 significant digits always read back as the same double.
  return g(fc.constantFrom, JSON.stringify(n), n.toPrecision(17), n.toExponential(16));
}

/** Each UTF-16 unit either as JSON would write it or as a \uXXXX escape. */
function respellString(s: string, g: fc.GeneratorValue): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const unit = s.charCodeAt(i);
    out += g(fc.boolean)
      ? `\\u${unit.toString(16).padStart(4, '0')}`
      : JSON.stringify(String.fromCharCode(unit)).slice(1, -1);
  }
  return `${out}"`;
}

// --- A real change, and an equality written independently of the fingerprint ---

function jsonEqual(a: Json, b: Json): boolean {
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) &&
      Array.isArray(b) &&
      a.length === b.length &&
      a.every((v, i) => jsonEqual(v, b[i] ?? null))
    );
  }
  const keys = Object.keys(a);
  return (
    keys.length === Object.keys(b).length &&
    keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k] ?? null, b[k] ?? null))
  );
}

const anyJson = (g: fc.GeneratorValue): Json => JSON.parse(JSON.stringify(g(fc.jsonValue, { maxDepth: 1 })));

/** Changes one thing somewhere in `value`: a leaf, a key name, a member added or removed. */
function mutate(value: Json, g: fc.GeneratorValue): Json {
  if (typeof value !== 'object' || value === null || g(fc.nat, 3) === 0) return anyJson(g);
  if (Array.isArray(value)) {
    if (value.length === 0) return [anyJson(g)];
    const i = g(fc.nat, value.length - 1);
    return value.map((v, j) => (j === i ? mutate(v, g) : v));
  }
  return mutateMembers(value, g);
}

/** Changes one thing inside an object, which stays an object (as `arguments` must). */
function mutateMembers(value: { [key: string]: Json }, g: fc.GeneratorValue): { [key: string]: Json } {
  const keys = Object.keys(value);
  const how = keys.length === 0 ? 'add' : g(fc.constantFrom, 'add', 'remove', 'rename', 'descend');
  const key = keys[g(fc.nat, Math.max(0, keys.length - 1))] ?? '';
  const copy = { ...value };
  if (how === 'add') copy[g(fc.string)] = anyJson(g);
  if (how === 'remove') delete copy[key];
  if (how === 'rename') {
    const moved = copy[key] ?? null;
    delete copy[key];
    copy[`${key}${g(fc.string, { minLength: 1 })}`] = moved;
  }
  if (how === 'descend') copy[key] = mutate(copy[key] ?? null, g);
  return copy;
}

const fingerprint = (name: string, args: unknown): string => {
  const result = fingerprintToolCall(name, args);
  if (!result.ok) throw new Error(result.reason);
  return result.fingerprint;
};

describe('equivalent requests', () => {
  it('fingerprint alike however their arguments are spelled (key order, whitespace, 1 vs 1.0, escapes)', () => {
    fc.assert(
      fc.property(jsonArguments, fc.gen(), (args, g) => {
        const respelled: unknown = JSON.parse(respell(args, g));
        expect(fingerprint('charge', respelled)).toBe(fingerprint('charge', args));
      }),
      { numRuns: 500 },
    );
  });

  it('treat an absent arguments object as {}', () => {
    expect(fingerprint('t', undefined)).toBe(fingerprint('t', {}));
  });
});

describe('different requests', () => {
  it('fingerprint apart when any value, key or member really changes', () => {
    fc.assert(
      fc.property(jsonArguments, fc.gen(), (args, g) => {
        const changed: Json = JSON.parse(JSON.stringify(mutate(args, g)));
        fc.pre(!jsonEqual(args, changed));
        expect(fingerprint('charge', changed)).not.toBe(fingerprint('charge', args));
      }),
      { numRuns: 500 },
    );
  });

  it('fingerprint apart when only the tool name changes', () => {
    fc.assert(
      fc.property(jsonArguments, fc.string(), fc.string(), (args, a, b) => {
        fc.pre(a !== b);
        expect(fingerprint(a, args)).not.toBe(fingerprint(b, args));
      }),
    );
  });

  it('are not Unicode-normalised: é and e + combining acute differ', () => {
    expect(fingerprint('t', { memo: '\u00e9' })).not.toBe(fingerprint('t', { memo: 'e\u0301' }));
  });

  it('keep a distinction between a value and the same value nested', () => {
    expect(fingerprint('t', { a: [1] })).not.toBe(fingerprint('t', { a: 1 }));
    expect(fingerprint('t', { a: '1' })).not.toBe(fingerprint('t', { a: 1 }));
  });
});

// --- The fingerprint is RFC 8785 as the `canonicalize` package writes it ---
//
// fingerprint.ts writes RFC 8785 itself, for speed; the package it replaced is the oracle.

describe('the fingerprint', () => {
  /** JSON text that JSON.parse turns into every kind of value the guard can be sent. */
  const wireArguments = fc
    .dictionary(
      fc.string({ unit: 'binary' }),
      fc.oneof(
        fc.jsonValue().map((value) => JSON.stringify(value)),
        fc.string({ unit: 'binary' }).map((text) => JSON.stringify(text)),
        fc.constantFrom(
          '1e400',
          '-0',
          '1.0',
          '"\\ud800"',
          '{"10":1,"9":2,"a":3,"A":4}',
          '{"__proto__":{"x":1}}',
          '{"toString":1,"b":{"constructor":2,"a":{}}}',
          '[{"sku":"A","qty":1,"price":2.5},{"price":1,"sku":"B"}]',
          '{"é":1,"e":2,"\\ud83d\\ude00":3,"ﬀ":4}',
          '{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":[[[[[[[[[[1]]]]]]]]]]}}}}}}}}}}',
        ),
      ),
    )
    .map((members): unknown =>
      JSON.parse(
        `{${Object.entries(members)
          .map(([key, json]) => `${JSON.stringify(key)}:${json}`)
          .join(',')}}`,
      ),
    );

  it('is SHA-256 of what the canonicalize package writes, and refuses what it refuses, with its reason', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), wireArguments, (name, args: unknown) => {
        let expected: { ok: true; fingerprint: string } | { ok: false; reason: string };
        try {
          const canonical = canonicalize([name, args]);
          expected =
            canonical === undefined
              ? { ok: false, reason: 'not a JSON value' }
              : { ok: true, fingerprint: createHash('sha256').update(canonical).digest('base64url') };
        } catch (error) {
          expected = { ok: false, reason: error instanceof Error ? error.message : String(error) };
        }
        expect(fingerprintToolCall(name, args)).toStrictEqual(expected);
      }),
      { numRuns: 2_000 },
    );
  });

  it('is the same on large arguments, whose members out of order JSON.stringify writes in the order of their names', () => {
    const name = fc.constantFrom('b', 'a', '10', '9', 'A', 'é', 'toString', 'constructor', '\ud83d\ude00');
    // Members of their own without objects, so that the names stay few enough for the names path.
    const member = fc.oneof(fc.integer(), fc.double(), fc.string({ unit: 'binary' }), fc.array(fc.boolean()));
    const large = fc
      .array(fc.dictionary(name, member, { minKeys: 2, maxKeys: 8 }), {
        minLength: 60,
        maxLength: 120,
      })
      .map((items): unknown => JSON.parse(JSON.stringify(items)));
    fc.assert(
      fc.property(large, (args) => {
        const canonical = canonicalize(['t', args]) ?? '';
        const fingerprint = createHash('sha256').update(canonical).digest('base64url');
        expect(fingerprintToolCall('t', args)).toStrictEqual({ ok: true, fingerprint });
      }),
      { numRuns: 200 },
    );
  });

  // Values JSON.parse never makes, which the native writer would write otherwise: each is left to
  // the full writer, and comes out as the package writes it.
  it.each([
    [
      'an object with a member that is not enumerable, named enumerable in another',
      () => [{ b: 0 }, Object.defineProperty({ a: 1 }, 'b', { value: 2 })],
    ],
    [
      'objects with more names than the native writer is given',
      () => Array.from({ length: 300 }, (_, i) => ({ z: [i], [`k${i}`]: i })),
    ],
    [
      'nesting deeper than the native writer goes',
      () => Array.from({ length: 80 }).reduce<unknown>((inner) => ({ inner, a: 1 }), null),
    ],
    [
      'an object made by a class',
      () =>
        new (class Point {
          y = 2;
          x = 1;
        })(),
    ],
    [
      'an array with a hole and an undefined',
      () => {
        const items: unknown[] = [1];
        items[2] = undefined; // items[1] is a hole
        items[3] = { b: undefined, a: 1 };
        return items;
      },
    ],
  ])('writes %s exactly as the canonicalize package does', (_, make) => {
    const args = make();
    const canonical = canonicalize(['t', args]) ?? '';
    expect(fingerprintToolCall('t', args)).toStrictEqual({
      ok: true,
      fingerprint: createHash('sha256').update(canonical).digest('base64url'),
    });
  });
});

describe('arguments that cannot be compared', () => {
  it('are refused under a key (1e400 parses to Infinity), with the reason', () => {
    expect(fingerprintToolCall('t', JSON.parse('{"a":1e400}'))).toMatchObject({
      ok: false,
      reason: /Infinity/,
    });
  });
});

describe('through the real guard', () => {
  let server: InProcessConnection;
  beforeAll(async () => {
    server = await connectInProcess({ store: new MemoryIdempotencyStore() });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('replays a respelled request and refuses a changed one, charging once per key', async () => {
    let charged = 0;
    await fc.assert(
      fc.asyncProperty(jsonArguments, fc.gen(), async (extra, g) => {
        const args = { ...extra, amount: 1 };
        const changed = mutateMembers(args, g);
        fc.pre(!jsonEqual(args, changed));
        const idempotencyKey = randomUUID();
        const call = { name: 'charge_guarded', idempotencyKey };

        const first = await callTool(server.client, { ...call, arguments: args });
        charged += first.isError ? 0 : 1;
        const respelled = JSON.parse(respell(args, g));
        expect(await callTool(server.client, { ...call, arguments: respelled })).toStrictEqual(first);
        const error = await errorFrom(callTool(server.client, { ...call, arguments: changed }));
        expect(idempotencyErrorOf(error)?.type).toBe(IdempotencyErrorType.conflict);
        expect(await balanceOf(server.client)).toBe(charged);
      }),
      { numRuns: 100 },
    );
  });
});
