// The demo's scope for a token that may only read: a scope of its own within its principal's, so
// its keyed reads never replay to the principal's other tokens nor use up their quota. Within,
// and never another principal's: with a verifier whose subjects may hold any character, no
// subject may name its way into another principal's read-only records.

import fc from 'fast-check';
import type { Caller } from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { DEMO_SCOPES, demoScopeOf } from '../../../demo/hosting/scopes.js';

const caller = (sub: string, scopes: string[], iss?: string): Caller => ({
  authInfo: { clientId: 'app', scopes, extra: { sub, ...(iss !== undefined && { iss }) } },
});
const read = [DEMO_SCOPES.read];
const all = [DEMO_SCOPES.charge, DEMO_SCOPES.refund, DEMO_SCOPES.read];

describe('the read-only scope', () => {
  it('is apart from its principal’s own scope', () => {
    expect(demoScopeOf(caller('alice', read))).not.toBe(demoScopeOf(caller('alice', all)));
  });

  it('is the same for every read-only token of one principal', () => {
    expect(demoScopeOf(caller('alice', read))).toBe(demoScopeOf(caller('alice', [DEMO_SCOPES.read])));
  });

  it.each<[string, string, string | undefined]>([
    ['alice:read-only', 'alice', undefined],
    ['alice:read-only', 'alice', 'https://issuer.example'],
    ['principal:alice', 'alice', undefined],
    ['alice"]', 'alice', undefined],
  ])('is not the scope of a principal whose subject is %j, for %j’s read-only token', (sub, other, iss) => {
    const own = [demoScopeOf(caller(sub, all, iss)), demoScopeOf(caller(sub, read, iss))];
    const others = [demoScopeOf(caller(other, all, iss)), demoScopeOf(caller(other, read, iss))];
    for (const scope of own) expect(others).not.toContain(scope);
  });

  it('keeps issuers apart: one subject of two issuers has two read-only scopes', () => {
    expect(demoScopeOf(caller('alice', read, 'https://a.example'))).not.toBe(
      demoScopeOf(caller('alice', read, 'https://b.example')),
    );
  });

  it('leaves a caller without a token in the local scope', () => {
    expect(demoScopeOf({})).toBe('local');
  });
});

describe('the scopes of any two principals, full and read-only', () => {
  it('are four scopes: none is another’s, whatever the subjects and issuers hold', () => {
    const subject = fc.oneof(
      fc.string({ unit: 'binary', minLength: 1, maxLength: 12 }),
      fc.constantFrom('alice', 'principal:alice', 'within:["principal:alice"', ':', '"'),
    );
    // A second subject that is often the first with something put around it, as an encoding
    // that only joins strings would read it as the first's read-only part.
    const around = fc.constantFrom('', ':read-only', ':', '"]', 'principal:', '["');
    const issuer = fc.option(fc.constantFrom('https://a.example', 'https://b.example', 'a:read-only'), {
      nil: undefined,
      freq: 2,
    });
    fc.assert(
      fc.property(
        subject,
        around,
        around,
        issuer,
        fc.boolean(),
        issuer,
        (a, before, after, issA, sameIssuer, other) => {
          const b = `${before}${a}${after}`;
          const issB = sameIssuer ? issA : other;
          fc.pre(a !== b || issA !== issB);
          const scopes = [
            demoScopeOf(caller(a, all, issA)),
            demoScopeOf(caller(a, read, issA)),
            demoScopeOf(caller(b, all, issB)),
            demoScopeOf(caller(b, read, issB)),
          ];
          expect(new Set(scopes).size).toBe(4);
        },
      ),
      { numRuns: 2_000 },
    );
  });
});
