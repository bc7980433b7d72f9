// A guard's options (core/options.ts): the windows a record lives in, each refused at installation
// with an error naming it when it cannot work, the providers' retention never outlived by a record's,
// and the defaults a server gets when it says nothing.

import fc from 'fast-check';
import {
  createToolCallGuard,
  DEFAULT_AWAITING_INPUT_RETENTION_MS,
  DEFAULT_LEASE_MS,
  DEFAULT_PROVIDER_KEY_RETENTION_MS,
  DEFAULT_RETENTION_MS,
  LOCAL_SCOPE,
  MAX_RETENTION_MS,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { describe, expect, it } from 'vitest';
import { guardSettings } from '../../../packages/idempotency/core/options.js';

const store = new MemoryIdempotencyStore();
const WINDOWS = ['retentionMs', 'leaseMs', 'awaitingInputRetentionMs'] as const;
/** Options in which `name` is `ms` and nothing else stands in its way. */
const withWindow = (name: (typeof WINDOWS)[number], ms: number) => ({
  store,
  providerKeyRetentionMs: 0,
  [name]: ms,
});

describe('the defaults', () => {
  it('keep a completed record as long as Stripe keeps a key (24 h), and the provider keys that long', () => {
    expect(DEFAULT_PROVIDER_KEY_RETENTION_MS).toBe(24 * 60 * 60 * 1000);
    expect(DEFAULT_RETENTION_MS).toBe(DEFAULT_PROVIDER_KEY_RETENTION_MS);
  });

  it("lease a claim for twice the SDK client's 60 s timeout, and await a continuation 600 s", () => {
    expect(DEFAULT_LEASE_MS).toBe(120_000);
    expect(DEFAULT_AWAITING_INPUT_RETENTION_MS).toBe(600_000);
  });

  it('are what a guard given only a store runs on, scoping a caller without a token locally', () => {
    const settings = guardSettings({ store });
    expect(settings).toMatchObject({
      store,
      retentionMs: DEFAULT_RETENTION_MS,
      providerKeyRetentionMs: DEFAULT_PROVIDER_KEY_RETENTION_MS,
      leaseMs: DEFAULT_LEASE_MS,
      awaitingInputRetentionMs: DEFAULT_AWAITING_INPUT_RETENTION_MS,
    });
    expect(settings.scopeOf({})).toBe(LOCAL_SCOPE);
    expect(() => settings.onDecision({ decision: 'executed', durationMs: 0 })).not.toThrow();
  });

  it('keep what the server did say', () => {
    const said = {
      retentionMs: 5_000,
      providerKeyRetentionMs: 5_000,
      leaseMs: 1_000,
      awaitingInputRetentionMs: 2_000,
      scopeOf: () => 'tenant-a',
      onDecision: () => {},
    };
    expect(guardSettings({ store, ...said })).toMatchObject(said);
  });
});

describe('a window that cannot work', () => {
  const unworkable = fc.oneof(
    fc.constantFrom(
      0,
      -0,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      MAX_RETENTION_MS + 1,
    ),
    fc.double({ max: 0, noNaN: true }),
    fc.double({ min: MAX_RETENTION_MS, minExcluded: true, noNaN: true }),
  );

  it.each(WINDOWS)(
    'is refused at installation when it is %s, with an error naming it and the value',
    (name) => {
      fc.assert(
        fc.property(unworkable, (ms) => {
          const install = () => createToolCallGuard(withWindow(name, ms));
          expect(install).toThrow(RangeError);
          expect(install).toThrow(
            `${name} must be a positive number of ms up to ${MAX_RETENTION_MS}, got ${ms}`,
          );
        }),
      );
    },
  );

  it.each(WINDOWS)('is taken as %s anywhere from a fraction of a ms up to what every store keeps', (name) => {
    fc.assert(
      fc.property(fc.double({ min: Number.MIN_VALUE, max: MAX_RETENTION_MS, noNaN: true }), (ms) => {
        expect(guardSettings(withWindow(name, ms))[name]).toBe(ms);
      }),
    );
  });
});

describe('records kept shorter than the providers keep their keys', () => {
  it('are refused, the message naming both numbers and the way out', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10 ** 9 }), fc.integer({ min: 1, max: 10 ** 9 }), (a, b) => {
        const [retentionMs, providerKeyRetentionMs] = [Math.min(a, b), Math.max(a, b)];
        const install = () => createToolCallGuard({ store, retentionMs, providerKeyRetentionMs });
        if (retentionMs === providerKeyRetentionMs) {
          expect(install).not.toThrow();
          return;
        }
        expect(install).toThrow(RangeError);
        expect(install).toThrow(
          `retentionMs (${retentionMs}) is shorter than providerKeyRetentionMs (${providerKeyRetentionMs})`,
        );
        expect(install).toThrow(/0 if no tool sends provider keys/);
      }),
    );
  });

  it('are refused by default below 24 h: a short retention alone needs providerKeyRetentionMs said', () => {
    expect(() => createToolCallGuard({ store, retentionMs: 300_000 })).toThrow(
      `retentionMs (300000) is shorter than providerKeyRetentionMs (${DEFAULT_PROVIDER_KEY_RETENTION_MS})`,
    );
    expect(() =>
      createToolCallGuard({ store, retentionMs: 300_000, providerKeyRetentionMs: 0 }),
    ).not.toThrow();
  });

  it("are refused, by name, when the providers' retention is negative or no number at all", () => {
    for (const providerKeyRetentionMs of [Number.NaN, -1, -86_400_000, Number.NEGATIVE_INFINITY])
      expect(() => createToolCallGuard({ store, providerKeyRetentionMs })).toThrow(
        `providerKeyRetentionMs must be 0 or a number of ms, got ${providerKeyRetentionMs}`,
      );
  });
});
