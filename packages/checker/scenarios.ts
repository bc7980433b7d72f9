// --- What the checks share: the scenarios (the calls a rule's judgement reads) and how each is judged ---
//
// A scenario runs once per run, for whichever rule needs it first; every rule that judges it reads
// the same observations. Each starts from the counter as it stands (the calls without a key read
// it), makes its keyed calls, and ends with one more call without a key, whose counter says how
// many executions there were since the scenario's original, whatever the answers claimed.

import { randomUUID } from 'node:crypto';
import { describe, errorData, ms, notStored, refused, SEP_ERROR, same } from './answers.js';
import {
  afterwards,
  type Counter,
  type CounterOption,
  counterOf,
  executionsBetween,
  noCount,
  optionMissed,
  reading,
  unexpected,
} from './effect.js';
import { type Args, type Call, type CallSpec, type Run, sleep } from './run.js';
import {
  ESCAPINGS,
  KEY_SPELLINGS,
  opaqueBases,
  otherArguments,
  renormalise,
  respellings,
  write,
} from './spellings.js';
import { fail, nc, pass, type Verdict } from './verdict.js';

/** A duplicate goes this long after its original, so that the original is surely under way. */
export const DUPLICATE_DELAY_MS = 100;
/**
 * A duplicate answered within this share of the original's remaining run was answered at once;
 * one that took longer was held for the original. A held duplicate takes nearly all of it (it is
 * answered when the original ends, give or take a few ms); an answer at once takes a round trip.
 * Three quarters leaves a busy machine room on both sides.
 */
export const HELD_SHARE = 0.75;

/** A scenario runs once per run; every check that judges it reads the same observations. */
export function scenario<T>(observe: (run: Run) => Promise<T>): (run: Run) => Promise<T> {
  const seen = new WeakMap<Run, Promise<T>>();
  return (run) => {
    const observed = seen.get(run) ?? observe(run);
    seen.set(run, observed);
    return observed;
  };
}

/** Two calls without a key: the counter every judgement of "executed" reads. */
export const baseline = scenario(async (run) => {
  const first = await run.probe();
  const second = await run.probe();
  return { first, second, counter: counterOf(first, second, run.inputs.counter) };
});

/** Why the baseline proved no counter. */
export function noCounter(first: Call, second: Call, option?: CounterOption): string {
  const failed = [first, second].find((call) => call.kind === 'error');
  if (failed) return `the call without a key failed: ${describe(failed)}`;
  const gave = `two calls without a key gave ${describe(first)}, then ${describe(second)}`;
  return `${gave}: ${option ? optionMissed(option, first, second) : 'no number in them counts executions'}`;
}

/** The judgement `judge` makes with the baseline's counter, or why there is none to read. */
export async function counted(
  run: Run,
  judge: (counter: Counter) => Promise<Verdict> | Verdict,
): Promise<Verdict> {
  const { first, second, counter } = await baseline(run);
  return counter ? judge(counter) : nc(noCounter(first, second, run.inputs.counter));
}

/**
 * What is wrong with the `--counter` a user named, when two calls without a key succeeded and it
 * read no number that moved in them: a mistake on the command line, not a finding about the server.
 */
export async function counterMistake(run: Run): Promise<string | undefined> {
  const option = run.inputs.counter;
  const seen = option && (await baseline(run).catch(() => undefined));
  if (!option || !seen || seen.counter) return undefined;
  const { first, second } = seen;
  return first.kind === 'success' && second.kind === 'success'
    ? optionMissed(option, first, second)
    : undefined;
}

/**
 * A later call under the key got the stored result: the same answer, or (if it differs elsewhere,
 * which replay.identical judges) one whose counter stands where the original's did.
 */
export const replays = (counter: Counter, original: Call, later: Call) =>
  same(original, later) || (later.kind !== 'error' && executionsBetween(counter, original, later, 0) === 0);

/** No count of the executions between two results: the counter's numbers disagree, or are not there. */
export const unreadable = (counter: Counter, from: Call, to: Call, account: string) =>
  nc(noCount(counter, from, to, account));

/**
 * A scenario's original must have executed since the counter's reading before it (when there is
 * one): a fresh key that replayed an older result leaves nothing after it to judge.
 */
export function notExecuted(counter: Counter, before: Call | undefined, original: Call): Verdict | undefined {
  const n = before && executionsBetween(counter, before, original);
  if (n === undefined || n > 0) return undefined;
  return nc(
    `the keyed original did not execute: it got ${describe(original)}, with the counter at ${reading(counter, before ?? original)} before it (new-key.executes)`,
  );
}

/** Two fresh keys in a row, right after the calls without a key: each must execute once. */
export const freshKeys = scenario(async (run) => {
  const first = await run.call({ key: randomUUID() });
  return { first, second: await run.call({ key: randomUUID() }) };
});

export interface Retried {
  key: string;
  original: Call;
  retries: Call[];
  /** Absent when the original failed: there was nothing to retry. */
  probe?: Call;
  /** The counter just before the original, when the last call before it was a probe. */
  before?: Call;
}

/** A keyed call, the same key again with each of `retries`, then a call without a key. */
export function keyed(retries: (run: Run) => CallSpec[], original: (run: Run) => CallSpec = () => ({})) {
  return scenario(async (run): Promise<Retried> => {
    const key = randomUUID();
    const before = run.standing();
    const first = await run.call({ ...original(run), key });
    if (first.kind === 'error') return { key, original: first, retries: [] };
    const answers: Call[] = [];
    for (const retry of retries(run)) answers.push(await run.call({ ...retry, key }));
    return { key, original: first, retries: answers, probe: await run.probe(), before };
  });
}

export const replay = keyed(() => [{}]);

export interface AfterAnotherKey {
  original: Call;
  /** The same call under a second key, then the first key again. */
  other?: Call;
  retry?: Call;
  probe?: Call;
  before?: Call;
}

/**
 * A keyed call, the same call under a second key, the first key again, then a call without a key.
 * The retry must find the first key's own record: still kept (a server that keeps only the last
 * key executes it again) and not another key's (one that replays by arguments returns the second's).
 */
export const afterAnotherKey = scenario(async (run): Promise<AfterAnotherKey> => {
  const [first, second] = [randomUUID(), randomUUID()];
  const before = run.standing();
  const original = await run.call({ key: first });
  if (original.kind === 'error') return { original };
  const other = await run.call({ key: second });
  const retry = await run.call({ key: first });
  return { original, other, retry, probe: await run.probe(), before };
});

/** What `afterAnotherKey` shows, or why it shows nothing to judge. */
export async function retriedAfterAnotherKey(run: Run, counter: Counter) {
  const { original, other, retry, probe, before } = await afterAnotherKey(run);
  if (!other || !retry || !probe) return nc(`the keyed call failed: ${describe(original)}`);
  const stale = notExecuted(counter, before, original);
  if (stale) return stale;
  const n = executionsBetween(counter, original, other);
  if (n === undefined)
    return unreadable(counter, original, other, `${describe(original)}, then ${describe(other)}`);
  if (n !== 1)
    return nc(
      `the same call under a second key did not execute once: it got ${describe(other)} after ${describe(original)} (new-key.executes)`,
    );
  const { extra, moved, account } = afterwards(counter, other, probe, 'the second key');
  if (extra === undefined) return unreadable(counter, other, probe, account);
  return { original, other, retry, extra, moved, account };
}

/** A key with capitals, then each other spelling of it: three keys, each to execute once. */
export const keySpellings = scenario(async (run) => {
  const before = run.standing() ?? (await run.probe());
  // A key the server refuses (its own limits: UUIDs only, no capitals) executes nothing: the next
  // base is tried, so that the spellings are of a key the server takes.
  const refusedBases: { key: string; call: Call }[] = [];
  let first: { key: string; how: string; call: Call } | undefined;
  for (const key of opaqueBases(randomUUID())) {
    first = { key, how: 'as first sent', call: await run.call({ key }) };
    const { type } = errorData(first.call);
    if (first.call.kind !== 'error' || type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress) break;
    refusedBases.push(first);
  }
  if (!first) throw new Error('no key to spell');
  const base = first.key;
  const calls = [first];
  // Two other spellings: its lower case (its upper case if it has no capitals), and between spaces.
  const differ = KEY_SPELLINGS.filter(({ spell }) => spell(base) !== base);
  const lower = differ.some(({ how }) => how === 'in lower case');
  const spellings = differ.filter(({ how }) => !(how === 'in upper case' && lower));
  if (refusedBases.length < 3)
    for (const { how, spell } of spellings)
      calls.push({ key: spell(base), how, call: await run.call({ key: spell(base) }) });
  await run.probe(); // the counter as it stands, for the scenario after this one
  return { before, calls, refusedBases };
});

/** Each way of writing the arguments again, or none left once the same as the original's bytes. */
export function spellingsOf(run: Run, spell: (args: Args) => (string | null)[]): (string | null)[] {
  const plain = JSON.stringify(run.inputs.arguments);
  return [...new Set(spell(run.inputs.arguments))].filter((text) => text !== plain);
}

/**
 * Equivalent retries (the same arguments written another way) must each get the stored result,
 * neither a rejection nor another answer, and the counter must show that none of them executed.
 */
export function equivalent(spell: (args: Args) => (string | null)[]) {
  const observe = keyed((run) => spellingsOf(run, spell).map((argumentsText) => ({ argumentsText })));
  return (run: Run) =>
    counted(run, async (counter) => {
      const { original, retries, probe, before } = await observe(run);
      if (!probe) return nc(`the keyed original failed: ${describe(original)}`);
      const stale = notExecuted(counter, before, original);
      if (stale) return stale;
      const { extra, moved, account } = afterwards(counter, original, probe);
      if (extra === undefined) return unreadable(counter, original, probe, account);
      const sent = spellingsOf(run, spell).map((text) => text ?? 'no arguments member');
      const ran = extra === 0 ? '' : `; ${unexpected(extra)}: ${account}`;
      // Treated as equivalent means replayed: neither rejected nor executed. An answer that is not
      // byte for byte the stored one, with nothing executed, is replay.identical's concern.
      const wrong = retries.findIndex(
        (retry) => retry.kind === 'error' || (extra > 0 && !same(original, retry)),
      );
      const retry = retries[wrong];
      if (retry) {
        const how =
          retry.kind === 'error'
            ? `rejected it, ${describe(retry)}`
            : `executed it again, ${describe(retry)}`;
        const others = retries.length > 1 ? ` (${retries.length} spellings tried)` : '';
        return fail(`retry with ${sent[wrong]}: ${how}; original ${describe(original)}${others}${ran}`);
      }
      if (extra !== 0)
        return fail(`the retries got the stored ${describe(original)}, yet ${unexpected(extra)}: ${account}`);
      return pass(
        `${sent.length > 1 ? 'retries with' : 'retry with'} ${sent.join(', ')} replayed ${describe(original)}; ${moved}`,
      );
    });
}

export interface Conflicted {
  key: string;
  original: Call;
  rejected?: Call;
  probe?: Call;
  /** The original request under the key once more, after the conflict. */
  again?: Call;
  before?: Call;
}

/**
 * A keyed call, the same key with a different request, a call without a key to read the counter,
 * and the original request under the key again: it must still replay the original.
 */
export function conflicting(retry: (run: Run) => CallSpec) {
  return scenario(async (run): Promise<Conflicted> => {
    const key = randomUUID();
    const before = run.standing();
    const original = await run.call({ key });
    if (original.kind === 'error') return { key, original };
    const rejected = await run.call({ ...retry(run), key });
    const probe = await run.probe();
    const again = await run.call({ key });
    await run.probe(); // the counter as it stands, for the scenario after this one
    return { key, original, rejected, probe, again, before };
  });
}

/** A different request under a used key must be rejected: neither executed nor replayed, the record kept. */
export function conflict(observe: (run: Run) => Promise<Conflicted>) {
  return (run: Run) =>
    counted(run, async (counter) => {
      const { original, rejected, probe, again, before } = await observe(run);
      if (!rejected || !probe || !again) return nc(`the keyed original failed: ${describe(original)}`);
      const stale = notExecuted(counter, before, original);
      if (stale) return stale;
      const { extra, moved, account } = afterwards(counter, original, probe);
      if (extra === undefined) return unreadable(counter, original, probe, account);
      const ran = extra === 0 ? '' : `; ${unexpected(extra)}: ${account}`;
      if (rejected.kind !== 'error') {
        if (same(original, rejected)) return fail(`returned the stored result: ${describe(rejected)}${ran}`);
        if (extra > 0) return fail(`executed it: ${describe(rejected)}${ran}`);
        return fail(`answered ${describe(rejected)}, a result where a JSON-RPC error belongs (${moved})`);
      }
      if (extra !== 0)
        return fail(`rejected it (${describe(rejected)}), yet ${unexpected(extra)}: ${account}`);
      if (!replays(counter, original, again))
        return fail(
          `rejected it (${describe(rejected)}), but then the original request under the key got ${describe(again)}, ${notStored(original, again)}: the conflict changed the record`,
        );
      return pass(`rejected: ${describe(rejected)}; ${moved}; the original request still replays`);
    });
}

export const conflictArguments = conflicting((run) => ({
  argumentsText: JSON.stringify(otherArguments(run.inputs.arguments)),
}));
export const conflictTool = conflicting((run) => ({ tool: run.inputs.otherTool }));
export const renormalised = conflicting((run) => ({
  argumentsText: write(run.inputs.arguments, { string: (s) => JSON.stringify(renormalise(s)) }),
}));

export const errorCall = (run: Run) => ({ argumentsText: JSON.stringify(run.inputs.errorArguments) });

/** A keyed call that fails, the same key again, then two unkeyed failures: their own counter. */
export const errorReplay = scenario(async (run) => {
  const key = randomUUID();
  const first = await run.call({ ...errorCall(run), key });
  if (first.kind === 'success') return { first };
  const second = await run.call({ ...errorCall(run), key });
  const unkeyed = [await run.call(errorCall(run)), await run.call(errorCall(run))] as const;
  await run.probe(); // the counter as it stands, for the scenario after this one
  return { first, second, unkeyed };
});

/** The first caller's keyed call, the other caller's fresh key, then the other caller with the first's key. */
export const otherCaller = scenario(async (run) => {
  const caller = run.inputs.other;
  const key = randomUUID();
  const first = await run.call({ key });
  if (first.kind === 'error') return { first };
  const fresh = await run.call({ key: randomUUID(), caller });
  return { first, fresh, second: await run.call({ key, caller }) };
});

/**
 * The forbidden credentials on a fresh key first: a refusal there shows they may not call the
 * tool, so what they get on a stored key is the server's choice at replay. Then a keyed call
 * that executes, the same key with the forbidden credentials, and the same key once more with
 * the caller's own: it still replays the original if the forbidden call neither ran nor touched it.
 */
export const forbiddenReplay = scenario(async (run) => {
  const caller = run.inputs.forbidden;
  const fresh = await run.call({ key: randomUUID(), caller });
  if (!refused(fresh)) return { fresh };
  const key = randomUUID();
  const original = await run.call({ key });
  if (original.kind === 'error') return { fresh, original };
  const replayed = await run.call({ key, caller });
  return { fresh, original, replayed, retry: await run.call({ key }) };
});

export interface InProgress {
  key: string;
  original: Call;
  /** Absent when the original finished before its duplicate was due. */
  duplicate?: Call;
  probe?: Call;
  /** The same key once more, after the original finished: it must replay the original. */
  retry?: Call;
  /** How long an unrelated request (`tools/list`) sent beside the duplicate took, if it was answered. */
  unrelated?: number;
}

/**
 * How long an unrelated request takes to be answered: sent beside a duplicate, it tells a server
 * that holds the duplicate from one that answers one request at a time (a serial stdio loop),
 * which holds every request behind the running one just the same.
 */
async function unrelatedLatency(run: Run): Promise<number | undefined> {
  const sentAt = performance.now();
  const answer = await run.peer.request('tools/list', '{}').catch(() => undefined);
  return answer && answer.at - sentAt;
}

/**
 * A slow keyed call, the same key again while it runs, then (once a duplicate run in the
 * background would have finished too) a call without a key to read the counter, and the key once
 * more. Both calls are awaited together, so a server that dies under one is reported, not thrown.
 */
export const inProgress = scenario(async (run): Promise<InProgress> => {
  const key = randomUUID();
  const spec = { argumentsText: JSON.stringify(run.inputs.slowArguments), key };
  const pending = run.call(spec);
  const done = await Promise.race([
    pending.then(
      () => true,
      () => true,
    ),
    sleep(DUPLICATE_DELAY_MS).then(() => false),
  ]);
  if (done) return { key, original: await pending };
  const [original, duplicate, unrelated] = await Promise.all([
    pending,
    run.call(spec),
    unrelatedLatency(run),
  ]);
  if (original.kind === 'error') return { key, original, duplicate };
  // A duplicate that runs in the background starts when it arrives and takes as long as the original.
  // (With a margin of one duplicate delay, for a busy machine.)
  await sleep(
    duplicate.sentAt + (original.answer.at - original.sentAt) + DUPLICATE_DELAY_MS - performance.now(),
  );
  const probe = await run.probe();
  const retry = await run.call(spec);
  await run.probe(); // the counter as it stands, for the scenario after this one
  return { key, original, duplicate, probe, retry, unrelated };
});

export interface WhileInProgress {
  key: string;
  original: Call;
  duplicate: Call;
  /** How long the duplicate took, and how long the original still ran once it was sent. */
  latency: number;
  remaining: number;
  held: boolean;
  /**
   * The server answers one request at a time: an unrelated request sent beside the duplicate was
   * held as long. Then no answer shows how it treats a duplicate in progress; `serialNote` says so.
   */
  serial?: string;
  extra: number;
  moved: string;
  account: string;
  retry: Call;
  /** Whether `retry`, once the original finished, got the stored result. */
  replayed: boolean;
}

export function whileInProgress(judge: (o: WhileInProgress) => Verdict) {
  return (run: Run) =>
    counted(run, async (counter) => {
      const { key, original, duplicate, probe, retry, unrelated } = await inProgress(run);
      if (original.kind === 'error') return nc(`the slow keyed original failed: ${describe(original)}`);
      if (!duplicate)
        return nc(
          `the original finished within ${DUPLICATE_DELAY_MS} ms, before its duplicate: pass slower --slow-arguments`,
        );
      if (!probe || !retry) return nc(`the slow keyed original failed: ${describe(original)}`);
      const remaining = original.answer.at - duplicate.sentAt;
      if (remaining < DUPLICATE_DELAY_MS)
        return nc(
          `the original finished ${ms(remaining)} after its duplicate was sent: too soon to tell an answer at once from a held one; pass slower --slow-arguments`,
        );
      const { extra, moved, account } = afterwards(counter, original, probe, 'the slow original');
      if (extra === undefined) return unreadable(counter, original, probe, account);
      const latency = duplicate.answer.at - duplicate.sentAt;
      const held = latency >= remaining * HELD_SHARE;
      const replayed = replays(counter, original, retry);
      const serial =
        held && unrelated !== undefined && unrelated >= remaining * HELD_SHARE
          ? `the server answers one request at a time: a tools/list sent beside the duplicate waited ${ms(unrelated)} as well (the duplicate ${ms(latency)}, of the ${ms(remaining)} the original still ran), so the duplicate only arrived once the original was done`
          : undefined;
      return judge({
        key,
        original,
        duplicate,
        latency,
        remaining,
        held,
        ...(serial !== undefined && { serial }),
        extra,
        moved,
        account,
        retry,
        replayed,
      });
    });
}

// Each spelling of an equivalent retry is a keyed scenario of its own, made once per run.
export const reorderedKeys = equivalent((args) => [write(args, { reverseKeys: true })]);
export const respelledNumbers = equivalent((args) =>
  [0, 1, 2].map((i) => write(args, { number: (n) => respellings(n)[i] ?? JSON.stringify(n) })),
);
export const escapedStrings = equivalent((args) =>
  ESCAPINGS.map((escaping) => write(args, { string: escaping })),
);
export const absentArguments = equivalent(() => [null]);
