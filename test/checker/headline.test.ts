// A report's first line (packages/checker/headline.ts): a server with no support is called so,
// with where to start; the explorer's finding, when there is one, leads and says in words what kind
// of server it shows; otherwise every failed rule is named in the report's order; a run that could
// not observe deduplication is not judged; and a clean run says how far its rules and histories go.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Exploration } from '../../packages/checker/explore.js';
import { headline } from '../../packages/checker/headline.js';
import { type CheckResult, type Report, RULES, type Status } from '../../packages/checker/rules.js';

/** A report in which every rule passed but those given another status. */
function report(statuses: Record<string, Status> = {}, extra: Partial<Report> = {}): Report {
  const results: CheckResult[] = RULES.map(({ id, section, severity, sentence }) => ({
    id,
    section,
    severity,
    sentence,
    status: statuses[id] ?? 'passed',
    observed: `${id} observed`,
  }));
  return { results, notRun: [], unobserved: [], ...extra };
}

/** What the explorer reports after `histories`, with the failure it found, if any. */
const explored = (histories: number, failure?: { rule: string; observed: string }): Exploration => ({
  seed: 1,
  budget: histories,
  histories,
  calls: histories * 5,
  unjudged: 0,
  notes: [],
  ...(failure && { failure: { ...failure, transcript: [], steps: { found: 9, shrunk: 3 } } }),
});

const NO_SUPPORT = {
  'replay.not-executed': 'failed',
  'replay.identical': 'failed',
  'retention.per-key': 'failed',
} as const;

describe('a server with no support', () => {
  it('is called so, and told where to start, when it also declares no capability', () => {
    const line = headline(report({ ...NO_SUPPORT, 'capability.advertised': 'failed' }));
    expect(line).toMatch(/^No support: ignores `idempotencyKey`, every keyed retry executed again/);
    expect(line).toContain('Start with a record per key');
  });

  it('that declares the capability is told it ignores the key', () => {
    expect(headline(report(NO_SUPPORT))).toBe(
      'Declares tools.idempotency, but ignores `idempotencyKey`: every keyed retry executed again',
    );
  });

  it('is not what a server is called whose retries only sometimes ran again (a later retry replayed)', () => {
    const line = headline(report({ 'replay.not-executed': 'failed' }));
    expect(line).toBe('A server that deduplicates, but breaks replay.not-executed');
  });
});

describe("the explorer's finding", () => {
  it('leads, naming its rule, and says in words what kind of server it shows', () => {
    const cases: [string, string, string][] = [
      ['replay.not-executed', 'the counter went 3 → 5', 'a keyed retry sometimes executes again'],
      [
        'retention.per-key',
        'after 40 other keys the counter went 3 → 5',
        'forgets a record once a few other keys',
      ],
      [
        'retention.per-key',
        'after 12 s the counter went 3 → 5',
        'forgets a record before a late retry comes',
      ],
      ['conflict.other-arguments', 'the counter went 3 → 4', 'executes a different request under a used key'],
      ['conflict.other-arguments', 'it replayed "Charged 1"', 'its fingerprint misses part of the arguments'],
      ['in-progress.not-executed', 'the counter went 3 → 5', 'executes a duplicate that arrives while'],
      ['key.opaque', 'the counter stayed', 'takes one key for another'],
      ['equivalence.number-spelling', 'the counter went 3 → 4', 'takes the same request written another way'],
      [
        'scope.per-caller',
        'the counter went 3 → 4 on a fresh HTTP session',
        'a new session forgets its records',
      ],
    ];
    for (const [rule, observed, kind] of cases) {
      const line = headline(
        report({ 'conflict.data': 'warned' }, { exploration: explored(200, { rule, observed }) }),
      );
      expect(line).toMatch(/^A server that deduplicates, but /);
      expect(line).toContain(kind);
      expect(line.endsWith(`(${rule})`)).toBe(true);
    }
  });

  it('leads even when some essential rule could not be observed', () => {
    const line = headline(
      report(
        {},
        {
          unobserved: ['in-progress.not-executed'],
          exploration: explored(200, { rule: 'key.opaque', observed: 'x' }),
        },
      ),
    );
    expect(line).toMatch(/^A server that deduplicates, but takes one key for another/);
  });
});

describe('failed rules', () => {
  const ids = RULES.map((rule) => rule.id).filter((id) => id !== 'capability.advertised');

  it('are all named, in the order the report gives them', () => {
    fc.assert(
      fc.property(fc.subarray(ids, { minLength: 1 }), (failed) => {
        const statuses = Object.fromEntries(failed.map((id) => [id, 'failed' as const]));
        // A server with no support is read from these three together; the line for it names none.
        fc.pre(!Object.keys(NO_SUPPORT).every((id) => failed.includes(id)));
        const inOrder = ids.filter((id) => failed.includes(id));
        expect(headline(report(statuses))).toBe(
          `A server that deduplicates, but breaks ${inOrder.join(', ')}`,
        );
      }),
    );
  });

  it('lead a run that also left essential rules unobserved: a broken rule is certain', () => {
    const line = headline(report({ 'conflict.other-tool': 'failed' }, { unobserved: ['replay.identical'] }));
    expect(line).toBe('A server that deduplicates, but breaks conflict.other-tool');
  });
});

describe('a run with nothing broken', () => {
  it('that could not observe deduplication is not judged', () => {
    expect(headline(report({}, { unobserved: ['new-key.executes'] }))).toMatch(/^Not judged: /);
  });

  it('passes as far as its rules, and its generated histories when the explorer ran, show', () => {
    expect(headline(report({ 'conflict.data': 'warned' }))).toBe(
      'A server that deduplicates as SEP-3182 asks, as far as its rules show',
    );
    expect(headline(report({}, { exploration: explored(321) }))).toBe(
      'A server that deduplicates as SEP-3182 asks, as far as its rules and 321 generated histories show',
    );
    expect(headline(report({}, { exploration: explored(1) }))).toBe(
      'A server that deduplicates as SEP-3182 asks, as far as its rules and 1 generated history show',
    );
  });
});
