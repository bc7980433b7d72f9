// The scenarios the checker's rules read (packages/checker/scenarios.ts), against a model server in
// process: each runs once per run however many rules read it; each makes its calls in the order
// its rules rely on (the keyed original, its retries under the same key, then a call without a key
// to read the counter); the key spellings fall back to a key the server takes; the equivalent
// retries send every other spelling and none that is the original's bytes; and a judgement with no
// counter, a stale original or an original too quick to overlap is not checkable, saying why.

import { describe, expect, it } from 'vitest';
import type { CounterOption } from '../../packages/checker/effect.js';
import { type CheckInputs, Run } from '../../packages/checker/run.js';
import {
  afterAnotherKey,
  baseline,
  conflict,
  conflictArguments,
  counted,
  counterMistake,
  equivalent,
  forbiddenReplay,
  keySpellings,
  notExecuted,
  replay,
  replays,
  respelledNumbers,
  spellingsOf,
  whileInProgress,
} from '../../packages/checker/scenarios.js';
import { pass } from '../../packages/checker/verdict.js';
import { type Flaws, Model, text } from './model.js';

function setUp(flaws: Flaws = {}, over: Partial<CheckInputs> = {}) {
  const model = new Model(flaws);
  const run = new Run(model.peer(), {
    tool: 'charge',
    arguments: { amount: 1 },
    transport: 'stdio',
    ...over,
  });
  /** What the server was sent, each call as its key (or `-` for none) and its arguments as written. */
  const sent = () =>
    model.sent.map(({ params }) => {
      const { idempotencyKey = '-' } = JSON.parse(params) as { idempotencyKey?: string };
      return { key: idempotencyKey, args: /"arguments":(.*?)(,"idempotencyKey"|}$)/.exec(params)?.[1] };
    });
  return { model, run, sent };
}

describe('a scenario', () => {
  it('runs once per run, however many rules read it, and again for another run', async () => {
    const { model, run } = setUp();
    const first = await replay(run);
    const calls = model.sent.length;
    expect(await replay(run)).toBe(first);
    expect(model.sent.length).toBe(calls);
    await replay(new Run(model.peer(), run.inputs));
    expect(model.sent.length).toBe(2 * calls);
  });

  it('of a replay is the keyed original, the same key again, then a call without a key', async () => {
    const { run, sent } = setUp();
    await baseline(run);
    const { key, original, retries, probe, before } = await replay(run);
    expect(sent().map((s) => s.key)).toStrictEqual(['-', '-', key, key, '-']);
    expect(retries[0]?.value).toStrictEqual(original.value);
    expect(probe?.kind).toBe('success');
    // The counter as it stood before the original: the baseline's last call.
    expect(before).toBe((await baseline(run)).second);
  });

  it('after another key is the first key, a second, the first again, then a call without a key', async () => {
    const { run, sent } = setUp();
    await afterAnotherKey(run);
    const keys = sent().map((s) => s.key);
    expect(keys[0]).toBe(keys[2]);
    expect(keys[1]).not.toBe(keys[0]);
    expect(keys[3]).toBe('-');
  });

  it('with a keyed original that fails makes no retry and no call to read the counter', async () => {
    const { run, sent } = setUp({ acceptKey: () => false });
    const { original, rejected, probe } = await conflictArguments(run);
    expect(original.kind).toBe('error');
    expect([rejected, probe]).toStrictEqual([undefined, undefined]);
    expect(sent()).toHaveLength(1);
  });
});

describe("a key's spellings", () => {
  it('are its lower case and the key between spaces, each sent as a key of its own', async () => {
    const { run, sent } = setUp();
    const { calls, refusedBases } = await keySpellings(run);
    const [first] = calls;
    expect(refusedBases).toStrictEqual([]);
    expect(first?.key).toMatch(/^Key-[0-9A-F-]{36}$/);
    expect(calls.map((c) => c.key)).toStrictEqual([first?.key, first?.key.toLowerCase(), ` ${first?.key} `]);
    expect(
      sent()
        .slice(1, 4)
        .map((s) => s.key),
    ).toStrictEqual(calls.map((c) => c.key));
  });

  it('fall back to a key a server with limits of its own takes, and spell that one', async () => {
    const { run } = setUp({ acceptKey: (key) => /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/.test(key) });
    const { calls, refusedBases } = await keySpellings(run);
    expect(refusedBases.map((b) => b.key)).toStrictEqual([
      expect.stringMatching(/^Key-/),
      expect.stringMatching(/^[0-9A-F-]{36}$/),
    ]);
    const base = calls[0]?.key ?? '';
    expect(base).toMatch(/^[0-9a-f-]{36}$/);
    expect(calls.map((c) => c.how)).toStrictEqual(['as first sent', 'in upper case', 'between spaces']);
    expect(calls[1]?.key).toBe(base.toUpperCase());
  });
});

describe('equivalent retries', () => {
  it('send every other spelling once, and never the bytes the original sent', () => {
    const { run } = setUp({}, { arguments: { amount: 1, note: 'x' } });
    expect(
      spellingsOf(run, (args) => [
        JSON.stringify(args),
        '{"note":"x","amount":1}',
        '{"note":"x","amount":1}',
        null,
      ]),
    ).toStrictEqual(['{"note":"x","amount":1}', null]);
  });

  it('of a number are its three other spellings, all under the original’s key, and replay on a correct server', async () => {
    const { run, sent } = setUp();
    const verdict = await respelledNumbers(run);
    expect(verdict.outcome).toBe('holds');
    expect(
      sent()
        .slice(2, 6)
        .map((s) => s.args),
    ).toStrictEqual(['{"amount":1}', '{"amount":1.0}', '{"amount":1e0}', '{"amount":1.00}']);
    expect(
      new Set(
        sent()
          .slice(2, 6)
          .map((s) => s.key),
      ).size,
    ).toBe(1);
  });

  it('that the server takes for a new request fail, naming the spelling it rejected', async () => {
    const { run } = setUp({ keyOrderMatters: true }, { arguments: { amount: 1, note: 'x' } });
    const verdict = await equivalent((args) => [
      JSON.stringify(Object.fromEntries(Object.entries(args).reverse())),
    ])(run);
    expect(verdict.outcome).toBe('broken');
    expect(verdict.observed).toMatch(
      /^retry with \{"note":"x","amount":1\}: rejected it, error -32602 idempotency_key_conflict/,
    );
  });
});

describe('a different request under a used key', () => {
  it('that gets the stored result fails as a silent replay', async () => {
    const verdict = await conflict(conflictArguments)(setUp({ noFingerprint: true }).run);
    expect(verdict.outcome).toBe('broken');
    expect(verdict.observed).toMatch(/^returned the stored result: "charge: executions 3"$/);
  });

  it('that is rejected, nothing run and the record kept, holds', async () => {
    const verdict = await conflict(conflictArguments)(setUp().run);
    expect(verdict.outcome).toBe('holds');
    expect(verdict.observed).toMatch(
      /^rejected: error -32602 idempotency_key_conflict; .*; the original request still replays$/,
    );
  });
});

describe('a judgement that cannot be made', () => {
  it('without a counter says what the calls without a key gave', async () => {
    const model = new Model();
    const peer = model.peer();
    const still = { ...peer, request: async () => ({ ...text('ok').answer, at: performance.now() }) };
    const run = new Run(still, { tool: 'charge', arguments: {}, transport: 'stdio' });
    const verdict = await counted(run, () => pass('unreachable'));
    expect(verdict).toStrictEqual({
      outcome: 'not checkable',
      observed: 'two calls without a key gave "ok", then "ok": no number in them counts executions',
    });
  });

  it('with a --counter that reads no moving number is a mistake on the command line, said as such', async () => {
    const counter: CounterOption = { pointer: '/balance' };
    const mistake = await counterMistake(setUp({}, { counter }).run);
    expect(mistake).toMatch(/^--counter \/balance: /);
    expect(await counterMistake(setUp().run)).toBeUndefined();
  });

  it('whose keyed original replayed an older result is not checkable: nothing after it can be judged', async () => {
    const { run } = setUp();
    const { first, second, counter } = await baseline(run);
    if (!counter) throw new Error('the model shows a counter');
    expect(notExecuted(counter, first, second)).toBeUndefined();
    expect(notExecuted(counter, second, second)).toMatchObject({
      outcome: 'not checkable',
      observed: expect.stringMatching(/^the keyed original did not execute: .*\(new-key\.executes\)$/),
    });
    expect(replays(counter, second, second)).toBe(true);
    expect(replays(counter, first, second)).toBe(false);
  });

  it('of a duplicate in progress, when the original ends before the duplicate is due, asks for slower arguments', async () => {
    const model = new Model({}, 0);
    const run = new Run(model.peer(), {
      tool: 'charge',
      arguments: { amount: 1 },
      slowArguments: { amount: 1, slow: true },
      transport: 'stdio',
    });
    const verdict = await whileInProgress(() => pass('unreachable'))(run);
    expect(verdict.outcome).toBe('not checkable');
    expect(verdict.observed).toMatch(/before its duplicate: pass slower --slow-arguments$/);
  });

  it('of a replay to forbidden credentials stops when those credentials may call the tool after all', async () => {
    const model = new Model();
    const run = new Run(model.peer(), {
      tool: 'charge',
      arguments: { amount: 1 },
      transport: 'http',
      forbidden: model.peer('alice'),
    });
    const seen = await forbiddenReplay(run);
    expect(Object.keys(seen)).toStrictEqual(['fresh']);
    expect(model.sent).toHaveLength(1);
  });
});
