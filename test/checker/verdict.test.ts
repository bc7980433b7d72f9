// What a judge concludes about one rule (packages/checker/verdict.ts): each of the four verdicts
// carries its own outcome, the four are told apart, and what the judge observed is kept word for
// word, as the report prints it.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fail, na, nc, pass } from '../../packages/checker/verdict.js';

describe('a verdict', () => {
  it('says whether the rule holds, is broken, does not apply, or cannot be checked', () => {
    expect(pass('x').outcome).toBe('holds');
    expect(fail('x').outcome).toBe('broken');
    expect(na('x').outcome).toBe('not applicable');
    expect(nc('x').outcome).toBe('not checkable');
  });

  it('keeps what was observed word for word, whichever the outcome', () => {
    fc.assert(
      fc.property(fc.string(), fc.constantFrom(pass, fail, na, nc), (observed, verdict) => {
        expect(verdict(observed).observed).toBe(observed);
      }),
    );
  });
});
