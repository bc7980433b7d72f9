// SEP-3182's rules as the checker judges them (packages/checker/rules.ts), against a model server
// in process: a correct server breaks none of them, and a server with one flaw breaks exactly the
// rule that forbids it; a rule whose input is missing does not apply and says which option it
// needs, a rule no client can observe is listed as not checkable; a broken SHOULD warns where a
// broken MUST fails; a broken exchange leaves the rest unrun; and the explorer's finding fails the
// rule it names unless a scripted check already did.

import { describe, expect, it } from 'vitest';
import {
  type CheckInputs,
  checkRule,
  type Report,
  RULES,
  Run,
  runChecks,
  withExploration,
} from '../../packages/checker/rules.js';
import { type Flaws, Model } from './model.js';

/** Every input a rule may need: two members, a composed character, a decline, a slow call, a second tool. */
function inputs(model: Model, transport: CheckInputs['transport']): CheckInputs {
  return {
    tool: 'charge',
    arguments: { amount: 1, note: 'café' },
    slowArguments: { amount: 1, slow: true },
    errorArguments: { amount: 500 },
    otherTool: 'other',
    transport,
    ...(transport === 'http' && { other: model.peer('bob'), forbidden: model.peer('alice', true) }),
  };
}

async function check(flaws: Flaws, transport: CheckInputs['transport'] = 'http') {
  // A slow call long enough that a busy machine's pauses cannot pass for a held duplicate.
  const model = new Model(flaws, 1_000);
  const report = await runChecks(new Run(model.peer(), inputs(model, transport)));
  const ids = (status: string) => report.results.filter((r) => r.status === status).map((r) => r.id);
  return { report, failed: ids('failed'), warned: ids('warned'), passed: ids('passed') };
}

function rule(id: string) {
  const found = RULES.find((r) => r.id === id);
  if (!found) throw new Error(`no rule ${id}`);
  return found;
}

const NOT_CHECKABLE = RULES.flatMap((rule) => ('notCheckable' in rule ? [rule.id] : []));

describe.concurrent('a correct server', () => {
  it('passes every rule a client can observe, over HTTP with a second caller and forbidden credentials', async () => {
    const { report, passed } = await check({});
    expect(passed).toStrictEqual(
      RULES.map((r) => r.id).filter(
        (id) => !NOT_CHECKABLE.includes(id) && id !== 'equivalence.absent-arguments',
      ),
    );
    expect(report.unobserved).toStrictEqual([]);
    expect(report.counter).toBe('the number after "executions" in the result\'s text (step 1)');
  });

  it('over stdio has no caller or credentials to vary: those rules do not apply, and say why', async () => {
    const { report } = await check({}, 'stdio');
    const scope = report.results.find((r) => r.id === 'scope.per-caller');
    const auth = report.results.find((r) => r.id === 'authorization.at-replay');
    expect(scope).toMatchObject({
      status: 'not applicable',
      observed: 'over stdio the boundary is the local user: no second caller',
    });
    expect(auth).toMatchObject({
      status: 'not applicable',
      observed: 'over stdio there are no credentials to vary',
    });
  });
});

// Each against its own model server: they run side by side, their slow calls overlapping.
describe.concurrent('a server with one flaw fails exactly the rule that forbids it', () => {
  // What the server did, its flaw, the rules it fails and warns, and what the first failure says.
  const cases: [string, Flaws, string[], string[], RegExp][] = [
    [
      'declares no capability',
      { noCapability: true },
      ['capability.advertised'],
      [],
      /^no tools.idempotency object in the initialize result/,
    ],
    [
      'fingerprints the arguments in the order written',
      { keyOrderMatters: true },
      ['equivalence.key-order'],
      [],
      /^retry with \{"note":"café","amount":1\}: rejected it, error -32602 idempotency_key_conflict/,
    ],
    [
      'compares keys case-insensitively',
      { foldKeyCase: true },
      ['key.opaque'],
      [],
      /^the key in lower case, "key-.*nothing executed .*: taken for "Key-/,
    ],
    [
      'runs a conflicting request before rejecting it',
      { conflictExecutes: true },
      ['conflict.other-arguments', 'conflict.other-tool', 'equivalence.no-unicode-normalization'],
      [],
      /^rejected it \(error -32602 idempotency_key_conflict\), yet something executed/,
    ],
    [
      'shares one store among callers',
      { unscoped: true },
      ['scope.per-caller'],
      [],
      /^the other caller got the first caller's result: "charge: executions \d+"$/,
    ],
    [
      'replays before authorizing',
      { replayBeforeAuthorization: true },
      ['authorization.at-replay'],
      [],
      /^the stored result went to credentials that may not call it/,
    ],
    [
      'holds a duplicate until its original ends',
      { holdDuplicate: true },
      ['in-progress.not-blocked'],
      ['in-progress.data'],
      /: held for it, where an answer at once was due$/,
    ],
  ];
  for (const [what, flaws, failures, warnings, says] of cases)
    it(`one that ${what}: ${[...failures, ...warnings].join(', ')}`, async () => {
      const { report, failed, warned } = await check(flaws);
      const seen = report.results.filter((r) => r.status !== 'passed').map((r) => `${r.id}: ${r.observed}`);
      expect(failed, seen.join('\n')).toStrictEqual(failures);
      expect(warned).toStrictEqual(warnings);
      expect(report.results.find((r) => r.id === failures[0])?.observed).toMatch(says);
    });

  it('a server that ignores the key fails replay and retention, and every keyed rule it reaches', async () => {
    const { failed } = await check({ ignoreKeys: true });
    expect(failed).toEqual(
      expect.arrayContaining([
        'replay.not-executed',
        'replay.identical',
        'retention.per-key',
        'errors.replayed',
      ]),
    );
    expect(failed).not.toContain('new-key.executes');
    expect(failed).not.toContain('no-key.executes-every-time');
  });
});

describe('one rule', () => {
  it('whose input is missing does not apply, and names the option to pass', async () => {
    const model = new Model();
    const run = new Run(model.peer(), { tool: 'charge', arguments: { amount: 1 }, transport: 'http' });
    const results = await Promise.all(
      [
        'in-progress.not-executed',
        'errors.replayed',
        'conflict.other-tool',
        'scope.per-caller',
        'authorization.at-replay',
      ].map((id) => checkRule(run, rule(id))),
    );
    expect(results.map((r) => [r.status, /--[a-z-]+/.exec(r.observed)?.[0]])).toStrictEqual([
      ['not applicable', '--slow-arguments'],
      ['not applicable', '--error-arguments'],
      ['not applicable', '--other-tool'],
      ['not applicable', '--other-header'],
      ['not applicable', '--forbidden-header'],
    ]);
    expect(model.sent).toStrictEqual([]);
  });

  it('no client can observe is listed as not checkable, with why, and makes no call', async () => {
    const model = new Model();
    const run = new Run(model.peer(), inputs(model, 'stdio'));
    for (const id of NOT_CHECKABLE) {
      const result = await checkRule(run, rule(id));
      expect(result.status).toBe('not checkable');
      expect(result.observed.length).toBeGreaterThan(10);
    }
    expect(model.sent).toStrictEqual([]);
  });

  it('broken warns when its sentence says SHOULD, and fails when it says MUST', () => {
    for (const { id, sentence, severity } of RULES) {
      if (/\bMUST\b/.test(sentence) && id !== 'equivalence.absent-arguments')
        expect([id, severity]).toStrictEqual([id, 'failure']);
      else if (/\bSHOULD\b/.test(sentence)) expect([id, severity]).toStrictEqual([id, 'warning']);
    }
  });

  it('is named once, in the SEP’s order of sections', () => {
    const ids = RULES.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    const sections = [...new Set(RULES.map((r) => r.section))];
    expect(sections[0]).toBe('Capability declaration');
    expect(sections.at(-1)).toBe('Security Implications');
  });
});

describe('a broken exchange', () => {
  it('leaves every later rule unrun, the essential ones unobserved, and says where it broke', async () => {
    const model = new Model();
    const peer = model.peer();
    let calls = 0;
    const dying = {
      ...peer,
      request: (method: string, params: string, tool?: string) =>
        ++calls > 5 ? Promise.reject(new Error('the server exited (1)')) : peer.request(method, params, tool),
    };
    const report = await runChecks(new Run(dying, inputs(model, 'stdio')));
    expect(report.broken?.during).toBe('key.opaque');
    expect(report.broken?.reason).toMatch(
      /^tools\/call charge with key Key-[0-9A-F-]+: the server exited \(1\)$/,
    );
    expect(report.results.at(-1)).toMatchObject({ id: 'key.opaque', status: 'not checkable' });
    expect(report.notRun[0]).toBe('in-progress.not-executed');
    expect(report.unobserved).toEqual(expect.arrayContaining(['key.opaque', 'replay.not-executed']));
  });
});

describe("the explorer's finding", () => {
  const base = (): Report => ({
    results: ['replay.not-executed', 'key.opaque', 'conflict.data'].map((id) => {
      const { section, severity, sentence } = rule(id);
      return {
        id,
        section,
        severity,
        sentence,
        status: id === 'key.opaque' ? 'failed' : 'passed',
        observed: 'scripted',
      };
    }),
    notRun: [],
    unobserved: ['replay.not-executed'],
  });
  const exploration = (rule: string) => ({
    seed: 1,
    budget: 10,
    histories: 10,
    calls: 50,
    unjudged: 0,
    notes: [],
    failure: { rule, observed: 'the counter went 3 → 5', transcript: [], steps: { found: 9, shrunk: 3 } },
  });

  it('fails the rule it names, with what the explorer saw, and makes it observed', () => {
    const report = withExploration(base(), exploration('replay.not-executed'));
    expect(report.results[0]).toMatchObject({
      status: 'failed',
      observed: 'explored: the counter went 3 → 5 (the shrunk history below)',
    });
    expect(report.unobserved).toStrictEqual([]);
  });

  it('warns for a SHOULD, and leaves a rule a scripted check already failed as that check saw it', () => {
    expect(withExploration(base(), exploration('conflict.data')).results[2]?.status).toBe('warned');
    expect(withExploration(base(), exploration('key.opaque')).results[1]?.observed).toBe('scripted');
  });
});

describe('a correct server called with a large number', () => {
  it('passes conflict.other-arguments: the different request the checker sends is a different request', async () => {
    const model = new Model();
    // An order id past 2^53, as JSON allows: its "other" value, id + 1, is the same double.
    const run = new Run(model.peer(), {
      tool: 'charge',
      arguments: { order: 2 ** 53, amount: 1 },
      transport: 'stdio',
    });
    const result = await checkRule(run, rule('conflict.other-arguments'));
    expect(result.status, result.observed).toBe('passed');
  });
});
