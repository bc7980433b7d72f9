// The capability (core/capability.ts): what a server declares, `{"tools":{"idempotency":{}}}` as the
// SEP words it, and how a client reads it from capabilities parsed off the wire, whatever shape a
// server sent them in.

import fc from 'fast-check';
import { IDEMPOTENCY_CAPABILITY } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { advertisesIdempotency } from '../../../packages/idempotency/core/capability.js';

describe('the capability a server declares', () => {
  it('is the SEP\'s `{"capabilities":{"tools":{"idempotency":{}}}}`, empty, once put under tools', () => {
    expect(JSON.stringify({ capabilities: { tools: IDEMPOTENCY_CAPABILITY } })).toBe(
      '{"capabilities":{"tools":{"idempotency":{}}}}',
    );
  });

  it('is read back as advertised by the client side', () => {
    expect(advertisesIdempotency(JSON.parse(JSON.stringify({ tools: IDEMPOTENCY_CAPABILITY })))).toBe(true);
  });
});

describe('reading capabilities a server sent', () => {
  // The model: advertised exactly when `tools` is an object whose `idempotency` is an object (the
  // SEP's is empty; a later revision may put options in it, and an array or null is not one).
  const advertisedIn = (capabilities: unknown): boolean => {
    if (typeof capabilities !== 'object' || capabilities === null || Array.isArray(capabilities))
      return false;
    const tools = (capabilities as Record<string, unknown>).tools;
    if (typeof tools !== 'object' || tools === null || Array.isArray(tools)) return false;
    const idempotency = Object.hasOwn(tools, 'idempotency')
      ? (tools as Record<string, unknown>).idempotency
      : undefined;
    return typeof idempotency === 'object' && idempotency !== null;
  };
  const json = fc.jsonValue({ maxDepth: 2 });
  const capabilities = fc.oneof(
    json,
    fc.record({ tools: json }, { requiredKeys: [] }),
    fc.record({ tools: fc.record({ idempotency: json, listChanged: fc.boolean() }, { requiredKeys: [] }) }),
    fc.record({ tools: fc.dictionary(fc.string(), json) }),
  );

  it('says advertised exactly when tools.idempotency is an object, for any JSON a server sends', () => {
    fc.assert(
      fc.property(capabilities, (sent) => {
        // Parsed from the wire, as a client has it.
        const parsed: unknown = JSON.parse(JSON.stringify(sent));
        expect(advertisesIdempotency(parsed)).toBe(advertisedIn(parsed));
      }),
      { numRuns: 500 },
    );
  });

  it.each([
    ['no capabilities', undefined],
    ['null capabilities', null],
    ['no tools', {}],
    ['tools without idempotency', { tools: { listChanged: true } }],
    ['idempotency: null', { tools: { idempotency: null } }],
    ['idempotency: true', { tools: { idempotency: true } }],
    ['idempotency as a string', { tools: { idempotency: '{}' } }],
    ['idempotency at the top level, not under tools', { idempotency: {} }],
  ])('is not advertised with %s', (_, sent) => {
    expect(advertisesIdempotency(sent)).toBe(false);
  });

  it('is advertised beside other tools capabilities, and with fields a later revision may add', () => {
    expect(advertisesIdempotency({ tools: { listChanged: true, idempotency: {} } })).toBe(true);
    expect(advertisesIdempotency({ tools: { idempotency: { retentionSeconds: 300 } } })).toBe(true);
  });
});
