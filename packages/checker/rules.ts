// --- SEP-3182's rules, stated once: every rule a client can observe, in the order the SEP gives them ---
//
// The checker (`check.ts`) runs them against any server, and the project's own tests run them
// against the demo server (`test/support/sep-cases.ts`): one statement of each rule, two users.
// Each rule quotes the SEP sentence it tests and takes its severity from that sentence's keyword
// (MUST → failure, SHOULD → warning), unless it says why not.
//
// A check never asks the server whether it deduplicated, and never takes an answer's word for it:
// whether something executed is read from the tool's effect. A run starts with two calls without
// a key, whose results must show a counter that moves by the same step at every execution (a
// balance, a count). A scenario then ends with one more call without a key, and the counter it
// shows says how many executions there were since the scenario's original, whatever the answers
// in between claimed.

import { randomUUID } from 'node:crypto';
import {
  afterwards,
  type Counter,
  type CounterOption,
  counterOf,
  describeCounter,
  executionCount,
  executionsBetween,
  noCount,
  optionMissed,
  reading,
  unexpected,
} from './effect.js';
import { type Answer, isObject, type Peer } from './wire.js';

export type Severity = 'failure' | 'warning' | 'note';
export type Status = 'passed' | 'failed' | 'warned' | 'not applicable' | 'not checkable';
type Args = Record<string, unknown>;

export interface CheckResult {
  id: string;
  section: string;
  severity: Severity;
  sentence: string;
  status: Status;
  observed: string;
}

export interface CheckInputs {
  tool: string;
  arguments: Args;
  slowArguments?: Args;
  errorArguments?: Args;
  otherTool?: string;
  /** A second caller's connection to the same server (its own credentials), for scope. */
  other?: Peer;
  /** The same caller with credentials that may not call the tool, for authorization at replay. */
  forbidden?: Peer;
  /** Where the counter is, when the user says so (`--counter`). */
  counter?: CounterOption;
  transport: 'stdio' | 'http';
}

/** A duplicate goes this long after its original, so that the original is surely under way. */
const DUPLICATE_DELAY_MS = 100;
/**
 * A duplicate answered within this share of the original's remaining run was answered at once;
 * one that took longer was held for the original. A held duplicate takes nearly all of it (it is
 * answered when the original ends, give or take a few ms); an answer at once takes a round trip.
 * Three quarters leaves a busy machine room on both sides.
 */
const HELD_SHARE = 0.75;

/** One `tools/call` as observed. `value` is its `result` or `error`: what "the same response" compares. */
interface Call {
  answer: Answer;
  sentAt: number;
  kind: 'success' | 'tool error' | 'error';
  value: unknown;
}

interface CallSpec {
  tool?: string;
  /** The `arguments` member exactly as sent; `null` leaves it out. */
  argumentsText?: string | null;
  key?: string;
  caller?: Peer;
}

/** What a judge concludes; the rule's severity turns a broken rule into a failure or a warning. */
interface Verdict {
  outcome: 'holds' | 'broken' | 'not applicable' | 'not checkable';
  observed: string;
}
const pass = (observed: string): Verdict => ({ outcome: 'holds', observed });
const fail = (observed: string): Verdict => ({ outcome: 'broken', observed });
const na = (observed: string): Verdict => ({ outcome: 'not applicable', observed });
const nc = (observed: string): Verdict => ({ outcome: 'not checkable', observed });

/** Why the exchange with the server broke, and during which rule: the run stops there. */
export interface Broken {
  during: string;
  reason: string;
}

/** What one run of the checks knows and has done. */
export class Run {
  calls = 0;
  keyedCalls = 0;
  /** The rule being judged, named if the exchange breaks. */
  current = 'the calls without a key';
  broken: Broken | undefined;
  #last: Call | undefined;
  #lastProbe: Call | undefined;

  constructor(
    readonly peer: Peer,
    readonly inputs: CheckInputs,
  ) {}

  async call({ tool = this.inputs.tool, argumentsText, key, caller = this.peer }: CallSpec): Promise<Call> {
    if (this.broken) throw new Error(this.broken.reason);
    const args = argumentsText === undefined ? JSON.stringify(this.inputs.arguments) : argumentsText;
    const members = [`"name":${JSON.stringify(tool)}`];
    if (args !== null) members.push(`"arguments":${args}`);
    if (key !== undefined) members.push(`"idempotencyKey":${JSON.stringify(key)}`);
    this.calls += 1;
    if (key !== undefined) this.keyedCalls += 1;
    const sentAt = performance.now();
    let answer: Answer;
    try {
      answer = await caller.request('tools/call', `{${members.join(',')}}`, tool);
    } catch (error) {
      // A timeout, a server that exited, an HTTP failure: nothing after it can be trusted.
      const call = `tools/call ${tool}${key === undefined ? ' without a key' : ` with key ${key}`}`;
      // The call is named here, with its key; the transport's own naming of it would repeat it.
      const why = messageOf(error).replace(` (tools/call ${tool})`, '');
      this.broken ??= { during: this.current, reason: `${call}: ${why}` };
      throw new Error(this.broken.reason);
    }
    const { result, error } = answer.message;
    const call: Call = isObject(result)
      ? { answer, sentAt, kind: result.isError === true ? 'tool error' : 'success', value: result }
      : { answer, sentAt, kind: 'error', value: error };
    this.#last = call;
    return call;
  }

  /** A call without a key: it executes, and the counter it shows tells what ran before it. */
  async probe(): Promise<Call> {
    this.#lastProbe = await this.call({});
    return this.#lastProbe;
  }

  /** The counter as it stands, if the last call made was a probe: what a new scenario starts from. */
  standing(): Call | undefined {
    return this.#last === this.#lastProbe ? this.#lastProbe : undefined;
  }
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** A scenario runs once per run; every check that judges it reads the same observations. */
function scenario<T>(observe: (run: Run) => Promise<T>): (run: Run) => Promise<T> {
  const seen = new WeakMap<Run, Promise<T>>();
  return (run) => {
    const observed = seen.get(run) ?? observe(run);
    seen.set(run, observed);
    return observed;
  };
}

/** Two calls without a key: the counter every judgement of "executed" reads. */
const baseline = scenario(async (run) => {
  const first = await run.probe();
  const second = await run.probe();
  return { first, second, counter: counterOf(first, second, run.inputs.counter) };
});

/** Why the baseline proved no counter. */
function noCounter(first: Call, second: Call, option?: CounterOption): string {
  const failed = [first, second].find((call) => call.kind === 'error');
  if (failed) return `the call without a key failed: ${describe(failed)}`;
  const gave = `two calls without a key gave ${describe(first)}, then ${describe(second)}`;
  return `${gave}: ${option ? optionMissed(option, first, second) : 'no number in them counts executions'}`;
}

/** The judgement `judge` makes with the baseline's counter, or why there is none to read. */
async function counted(run: Run, judge: (counter: Counter) => Promise<Verdict> | Verdict): Promise<Verdict> {
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
const replays = (counter: Counter, original: Call, later: Call) =>
  same(original, later) || (later.kind !== 'error' && executionsBetween(counter, original, later, 0) === 0);

/** No count of the executions between two results: the counter's numbers disagree, or are not there. */
const unreadable = (counter: Counter, from: Call, to: Call, account: string) =>
  nc(noCount(counter, from, to, account));

/**
 * A scenario's original must have executed since the counter's reading before it (when there is
 * one): a fresh key that replayed an older result leaves nothing after it to judge.
 */
function notExecuted(counter: Counter, before: Call | undefined, original: Call): Verdict | undefined {
  const n = before && executionsBetween(counter, before, original);
  if (n === undefined || n > 0) return undefined;
  return nc(
    `the keyed original did not execute: it got ${describe(original)}, with the counter at ${reading(counter, before ?? original)} before it (new-key.executes)`,
  );
}

// --- Reading answers ---

/** Canonical JSON (keys sorted), so "the same response" means the same parsed value. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (!isObject(value)) return JSON.stringify(value) ?? 'undefined';
  return `{${Object.keys(value)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
    .join(',')}}`;
}

const same = (a: Call, b: Call) => a.kind === b.kind && canonical(a.value) === canonical(b.value);

/** How a later answer under the key is not the stored one: which it was, or where it differs. */
function notStored(original: Call, later: Call): string {
  if ((original.kind === 'error') !== (later.kind === 'error')) return `not the stored ${describe(original)}`;
  return `not the stored result (it differs at ${difference(original, later)})`;
}

/** Where two answers first differ: the member's path, and both values around the difference. */
function difference(a: Call, b: Call): string {
  const root = (call: Call) => (call.kind === 'error' ? 'error' : 'result');
  if (root(a) !== root(b)) return `${describe(a)}, then ${describe(b)}`;
  return firstDifference(a.value, b.value, root(a)) ?? `${describe(a)}, then ${describe(b)}`;
}

function firstDifference(a: unknown, b: unknown, path: string): string | undefined {
  if (isObject(a) && isObject(b)) {
    for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      const at = `${path}.${k}`;
      if (!(k in a)) return `${at}, only in the second: ${excerpt(canonical(b[k]), 0)}`;
      if (!(k in b)) return `${at}, only in the first: ${excerpt(canonical(a[k]), 0)}`;
      const found = firstDifference(a[k], b[k], at);
      if (found) return found;
    }
    return undefined;
  }
  if (Array.isArray(a) && Array.isArray(b) && a.length === b.length) {
    for (const [i, item] of a.entries()) {
      const found = firstDifference(item, b[i], `${path}[${i}]`);
      if (found) return found;
    }
    return undefined;
  }
  const [x, y] = [canonical(a), canonical(b)];
  if (x === y) return undefined;
  let i = 0;
  while (x[i] === y[i]) i++;
  return `${path}, character ${i + 1}: ${excerpt(x, i)}, then ${excerpt(y, i)}`;
}

/** Up to 40 characters of `text` from a little before `i`, marked where they are cut. */
function excerpt(text: string, i: number): string {
  const from = Math.max(0, i - 10);
  return `${from > 0 ? '…' : ''}${text.slice(from, from + 40)}${from + 40 < text.length ? '…' : ''}`;
}

function errorData(call: Call): { type?: unknown; idempotencyKey?: unknown } {
  const data = isObject(call.value) ? call.value.data : undefined;
  return isObject(data) ? data : {};
}

/**
 * The SEP's two error types, written here from its text (the checker shares no code with any
 * server), and any other refusal a server names the same way (`idempotency_…`: a bad key, a full
 * store), which a check that expects a replay or an execution must not take for either.
 */
const SEP_ERROR = {
  inProgress: 'idempotency_key_in_progress',
  conflict: 'idempotency_key_conflict',
} as const;

const isIdempotencyError = (call: Call) => {
  const { type } = errorData(call);
  return typeof type === 'string' && type.startsWith('idempotency_');
};

/** Refused by HTTP auth: a 401 or 403 with no JSON-RPC answer in it. */
const httpRefusal = (call: Call) =>
  call.kind === 'error' &&
  call.value === undefined &&
  (call.answer.http?.status === 401 || call.answer.http?.status === 403);

/** A result's first text content, or the whole result as canonical JSON. */
function textOf(call: Call): string {
  const value = isObject(call.value) ? call.value : {};
  const first = Array.isArray(value.content) ? value.content[0] : undefined;
  return isObject(first) && typeof first.text === 'string' ? first.text : canonical(value);
}

/** A short account of one answer: its text, its error code and `data.type`, or its HTTP refusal. */
function describe(call: Call): string {
  if (httpRefusal(call)) {
    // The challenge's `error` says why (RFC 6750): invalid_token, insufficient_scope, …
    const why = /error="([^"]*)"/.exec(call.answer.http?.challenge ?? '')?.[1];
    return `HTTP ${call.answer.http?.status}${why === undefined ? '' : `, WWW-Authenticate error="${why}"`}`;
  }
  const value = isObject(call.value) ? call.value : {};
  const type = errorData(call).type;
  if (call.kind === 'error') return `error ${value.code} ${typeof type === 'string' ? type : value.message}`;
  const text = textOf(call);
  // Long enough for a server's whole sentence, tool names and all; a page of text is still cut.
  const short = text.length > 200 ? `${text.slice(0, 197)}…` : text;
  return call.kind === 'tool error' ? `isError "${short}"` : `"${short}"`;
}

const ms = (duration: number) => `${Math.round(duration)} ms`;

// --- Writing arguments the way a check needs them, byte for byte ---

interface Spelling {
  number?: (n: number) => string;
  string?: (s: string) => string;
  reverseKeys?: boolean;
  spaced?: boolean;
}

function write(value: unknown, how: Spelling): string {
  if (typeof value === 'number') return how.number?.(value) ?? JSON.stringify(value);
  if (typeof value === 'string') return how.string?.(value) ?? JSON.stringify(value);
  const [comma, colon, open, close] = how.spaced ? [' ,\t', ' :  ', '{ ', ' }'] : [',', ':', '{', '}'];
  if (Array.isArray(value)) return `[${value.map((v) => write(v, how)).join(comma)}]`;
  if (!isObject(value)) return JSON.stringify(value);
  const members = Object.entries(value).map(([k, v]) => `${write(k, how)}${colon}${write(v, how)}`);
  return `${open}${(how.reverseKeys ? members.reverse() : members).join(comma)}${close}`;
}

/** Every value in `value` and every member name, depth first. */
function* walk(value: unknown): Generator<unknown> {
  yield value;
  if (Array.isArray(value)) for (const v of value) yield* walk(v);
  if (isObject(value)) for (const [k, v] of Object.entries(value)) yield* [k, ...walk(v)];
}

const some = (args: Args, test: (value: unknown) => boolean) => [...walk(args)].some(test);

/**
 * Three other spellings of the same number, each a retry of its own: `1` → `1.0`, `1e0`, `1.00`;
 * `1.5` → `1.50`, `1.5e0`, `1.500`; `1e+21` → `1E+21`, `1.0e+21`, `1e+021`. A server that
 * normalises one spelling by hand (stripping `.0`) still tells the others apart.
 */
function respellings(n: number): [string, string, string] {
  const text = JSON.stringify(n);
  const [mantissa = text, exponent] = text.split('e');
  const point = mantissa.includes('.') ? mantissa : `${mantissa}.`;
  if (exponent !== undefined)
    return [
      `${mantissa}E${exponent}`,
      `${point}0e${exponent}`,
      `${mantissa}e${exponent.replace(/^([+-]?)/, '$10')}`,
    ];
  return [`${point}0`, `${text}e0`, `${point}00`];
}

/**
 * Other escapings of the same string, each a retry of its own: every UTF-16 unit as `\uXXXX`;
 * only the non-ASCII ones (`caf\u00e9` against `café`); those in upper-case hex.
 */
const ESCAPINGS = [
  (s: string) =>
    escaped(
      s,
      () => true,
      (hex) => hex,
    ),
  (s: string) =>
    escaped(
      s,
      (unit) => unit > 0x7e,
      (hex) => hex,
    ),
  (s: string) =>
    escaped(
      s,
      (unit) => unit > 0x7e,
      (hex) => hex.toUpperCase(),
    ),
];

function escaped(s: string, which: (unit: number) => boolean, hexCase: (hex: string) => string): string {
  const units = Array.from({ length: s.length }, (_, i) => {
    const unit = s.charCodeAt(i);
    return which(unit)
      ? `\\u${hexCase(unit.toString(16).padStart(4, '0'))}`
      : JSON.stringify(s.charAt(i)).slice(1, -1);
  });
  return `"${units.join('')}"`;
}

/** The other Unicode normalisation form, where it differs: a distinct string once parsed. */
const renormalise = (s: string) => (s.normalize('NFD') !== s ? s.normalize('NFD') : s.normalize('NFC'));

/** The arguments with their first number, string or boolean changed: a different request. */
function otherArguments(args: Args): Args | undefined {
  let changed = false;
  const change = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(change);
    if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, change(v)]));
    if (changed) return value;
    changed = ['number', 'string', 'boolean'].includes(typeof value);
    if (typeof value === 'number') return value + 1;
    return typeof value === 'string' ? `${value}-other` : typeof value === 'boolean' ? !value : value;
  };
  const result = change(args);
  return changed && isObject(result) ? result : undefined;
}

// --- What the checks share: the scenarios and how each is judged ---

/** Two fresh keys in a row, right after the calls without a key: each must execute once. */
const freshKeys = scenario(async (run) => {
  const first = await run.call({ key: randomUUID() });
  return { first, second: await run.call({ key: randomUUID() }) };
});

interface Retried {
  key: string;
  original: Call;
  retries: Call[];
  /** Absent when the original failed: there was nothing to retry. */
  probe?: Call;
  /** The counter just before the original, when the last call before it was a probe. */
  before?: Call;
}

/** A keyed call, the same key again with each of `retries`, then a call without a key. */
function keyed(retries: (run: Run) => CallSpec[], original: (run: Run) => CallSpec = () => ({})) {
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

const replay = keyed(() => [{}]);

interface AfterAnotherKey {
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
const afterAnotherKey = scenario(async (run): Promise<AfterAnotherKey> => {
  const [first, second] = [randomUUID(), randomUUID()];
  const before = run.standing();
  const original = await run.call({ key: first });
  if (original.kind === 'error') return { original };
  const other = await run.call({ key: second });
  const retry = await run.call({ key: first });
  return { original, other, retry, probe: await run.probe(), before };
});

/** What `afterAnotherKey` shows, or why it shows nothing to judge. */
async function retriedAfterAnotherKey(run: Run, counter: Counter) {
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

/**
 * Other spellings of one key, each a key of its own: the SEP's key is an opaque string, so a
 * server that folds case (a case-insensitive SQL collation) or trims it matches another operation.
 */
const KEY_SPELLINGS: { how: string; spell: (key: string) => string }[] = [
  { how: 'in lower case', spell: (key) => key.toLowerCase() },
  { how: 'between spaces', spell: (key) => ` ${key} ` },
];

/** A key with capitals, then each other spelling of it: three keys, each to execute once. */
const keySpellings = scenario(async (run) => {
  const before = run.standing() ?? (await run.probe());
  const key = `Key-${randomUUID().toUpperCase()}`;
  const calls = [{ key, how: 'as first sent', call: await run.call({ key }) }];
  for (const { how, spell } of KEY_SPELLINGS)
    calls.push({ key: spell(key), how, call: await run.call({ key: spell(key) }) });
  await run.probe(); // the counter as it stands, for the scenario after this one
  return { before, calls };
});

/** Each way of writing the arguments again, or none left once the same as the original's bytes. */
function spellingsOf(run: Run, spell: (args: Args) => (string | null)[]): (string | null)[] {
  const plain = JSON.stringify(run.inputs.arguments);
  return [...new Set(spell(run.inputs.arguments))].filter((text) => text !== plain);
}

/**
 * Equivalent retries (the same arguments written another way) must each get the stored result,
 * neither a rejection nor another answer, and the counter must show that none of them executed.
 */
function equivalent(spell: (args: Args) => (string | null)[]) {
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

interface Conflicted {
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
function conflicting(retry: (run: Run) => CallSpec) {
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
function conflict(observe: (run: Run) => Promise<Conflicted>) {
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

const conflictArguments = conflicting((run) => ({
  argumentsText: JSON.stringify(otherArguments(run.inputs.arguments)),
}));
const conflictTool = conflicting((run) => ({ tool: run.inputs.otherTool }));
const renormalised = conflicting((run) => ({
  argumentsText: write(run.inputs.arguments, { string: (s) => JSON.stringify(renormalise(s)) }),
}));

const errorCall = (run: Run) => ({ argumentsText: JSON.stringify(run.inputs.errorArguments) });

/** A keyed call that fails, the same key again, then two unkeyed failures: their own counter. */
const errorReplay = scenario(async (run) => {
  const key = randomUUID();
  const first = await run.call({ ...errorCall(run), key });
  if (first.kind === 'success') return { first };
  const second = await run.call({ ...errorCall(run), key });
  const unkeyed = [await run.call(errorCall(run)), await run.call(errorCall(run))] as const;
  await run.probe(); // the counter as it stands, for the scenario after this one
  return { first, second, unkeyed };
});

/** The first caller's keyed call, the other caller's fresh key, then the other caller with the first's key. */
const otherCaller = scenario(async (run) => {
  const caller = run.inputs.other;
  const key = randomUUID();
  const first = await run.call({ key });
  if (first.kind === 'error') return { first };
  const fresh = await run.call({ key: randomUUID(), caller });
  return { first, fresh, second: await run.call({ key, caller }) };
});

/**
 * Refused as the SEP's authorization check would refuse it: by HTTP auth, or by a JSON-RPC error
 * that is not about the key (a conflict or in-progress answer means the record was consulted first).
 */
const refused = (call: Call) => httpRefusal(call) || (call.kind === 'error' && !isIdempotencyError(call));

/**
 * The forbidden credentials on a fresh key first: a refusal there shows they may not call the
 * tool, so what they get on a stored key is the server's choice at replay. Then a keyed call
 * that executes, the same key with the forbidden credentials, and the same key once more with
 * the caller's own: it still replays the original if the forbidden call neither ran nor touched it.
 */
const forbiddenReplay = scenario(async (run) => {
  const caller = run.inputs.forbidden;
  const fresh = await run.call({ key: randomUUID(), caller });
  if (!refused(fresh)) return { fresh };
  const key = randomUUID();
  const original = await run.call({ key });
  if (original.kind === 'error') return { fresh, original };
  const replayed = await run.call({ key, caller });
  return { fresh, original, replayed, retry: await run.call({ key }) };
});

/** Does `call` carry `stored`'s result (its text, as JSON writes it), whatever its status? */
function carries(call: Call, stored: Call): boolean {
  const needle = JSON.stringify(textOf(stored)).slice(1, -1);
  return [call.answer.text, canonical(call.value)].some((text) => text.includes(needle));
}

interface InProgress {
  key: string;
  original: Call;
  /** Absent when the original finished before its duplicate was due. */
  duplicate?: Call;
  probe?: Call;
  /** The same key once more, after the original finished: it must replay the original. */
  retry?: Call;
}

/**
 * A slow keyed call, the same key again while it runs, then (once a duplicate run in the
 * background would have finished too) a call without a key to read the counter, and the key once
 * more. Both calls are awaited together, so a server that dies under one is reported, not thrown.
 */
const inProgress = scenario(async (run): Promise<InProgress> => {
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
  const [original, duplicate] = await Promise.all([pending, run.call(spec)]);
  if (original.kind === 'error') return { key, original, duplicate };
  // A duplicate that runs in the background starts when it arrives and takes as long as the original.
  // (With a margin of one duplicate delay, for a busy machine.)
  await sleep(
    duplicate.sentAt + (original.answer.at - original.sentAt) + DUPLICATE_DELAY_MS - performance.now(),
  );
  const probe = await run.probe();
  const retry = await run.call(spec);
  await run.probe(); // the counter as it stands, for the scenario after this one
  return { key, original, duplicate, probe, retry };
});

interface WhileInProgress {
  key: string;
  original: Call;
  duplicate: Call;
  /** How long the duplicate took, and how long the original still ran once it was sent. */
  latency: number;
  remaining: number;
  held: boolean;
  extra: number;
  moved: string;
  account: string;
  retry: Call;
  /** Whether `retry`, once the original finished, got the stored result. */
  replayed: boolean;
}

function whileInProgress(judge: (o: WhileInProgress) => Verdict) {
  return (run: Run) =>
    counted(run, async (counter) => {
      const { key, original, duplicate, probe, retry } = await inProgress(run);
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
      return judge({
        key,
        original,
        duplicate,
        latency,
        remaining,
        held,
        extra,
        moved,
        account,
        retry,
        replayed,
      });
    });
}

// --- The rules, grouped and ordered as the SEP is ---

/** The inputs a rule cannot do without, and what a run without them is told. */
type Need = 'slowArguments' | 'errorArguments' | 'otherTool' | 'other' | 'forbidden';
const NEEDS: Record<Need, (transport: CheckInputs['transport']) => string> = {
  slowArguments: () => 'needs --slow-arguments (a call still running when its duplicate arrives)',
  errorArguments: () => 'needs --error-arguments (arguments that make the call fail)',
  otherTool: () => 'needs --other-tool (a second tool that is safe to call with these arguments)',
  other: (transport) =>
    transport === 'stdio'
      ? 'over stdio the boundary is the local user: no second caller'
      : "needs --other-header (a second caller's credentials)",
  forbidden: (transport) =>
    transport === 'stdio'
      ? 'over stdio there are no credentials to vary'
      : 'needs --forbidden-header (the same caller’s credentials that may not call the tool)',
};

type Judged =
  | {
      judge: (run: Run) => Promise<Verdict>;
      needs?: Need;
      /**
       * The rule rests on deduplication and every run can observe it: a run in which it could not
       * be observed (calls failed, no counter, the server died) checked nothing that matters.
       */
      essential?: true;
    }
  /** Why no client can observe it: such a rule is listed, never judged. */
  | { notCheckable: string };

/** A rule as written below: the SEP's words (quoted exactly; `[…]` marks an elision) and its judge. */
type RuleSpec = { id: string; sentence: string; severity?: Severity } & Judged;

export type Rule = RuleSpec & { section: string; severity: Severity };

/** Severity from the sentence's keyword, unless the rule says otherwise (and why). */
function section(name: string, rules: RuleSpec[]): Rule[] {
  const keyword = (s: string): Severity =>
    /\bMUST\b/.test(s) ? 'failure' : /\bSHOULD\b/.test(s) ? 'warning' : 'note';
  return rules.map((rule) => ({ severity: keyword(rule.sentence), ...rule, section: name }));
}

export const RULES: readonly Rule[] = [
  ...section('Capability declaration', [
    {
      id: 'capability.advertised',
      sentence:
        'This SEP introduces the `tools.idempotency` capability, discoverable via `server/discover` (SEP-2575), rather than treating `idempotencyKey` as a bare optional field with no negotiation',
      // No keyword, but the SEP's server rules all begin "When a server that declares this
      // capability…": without it a client has no guarantee to rely on.
      severity: 'failure',
      judge: async ({ peer }) => {
        const tools = isObject(peer.capabilities) ? peer.capabilities.tools : undefined;
        const found = isObject(tools) ? tools.idempotency : undefined;
        const where = `in the ${peer.discoveredBy} result`;
        if (!isObject(found))
          return fail(`no tools.idempotency object ${where}: tools = ${JSON.stringify(tools)}`);
        return pass(`tools.idempotency = ${JSON.stringify(found)} ${where}`);
      },
    },
  ]),
  ...section('Request format', [
    {
      id: 'new-key.executes',
      sentence:
        'it does not mandate that the key be globally unique — only that a server treat repetition of the same key, within its retention window, as a signal to deduplicate rather than re-execute.',
      // No keyword, but a key never seen is no repetition: deduplicating it (by arguments, say)
      // drops a call the client meant as new, which no rule of the SEP allows.
      severity: 'failure',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const { second: before } = await baseline(run);
          const { first, second } = await freshKeys(run);
          let prior = before;
          for (const call of [first, second]) {
            if (call.kind === 'error')
              return fail(
                `a call with a fresh key was refused: ${describe(call)}, where the same call without a key executes`,
              );
            const n = executionsBetween(counter, prior, call);
            if (n === undefined)
              return unreadable(counter, prior, call, `${describe(prior)}, then ${describe(call)}`);
            if (n === 0)
              return fail(
                `a call with a fresh key got ${describe(call)}, and the counter stayed at ${reading(counter, call)}: an earlier result was replayed, nothing executed`,
              );
            if (n !== 1)
              return fail(
                `one call with a fresh key moved the counter by ${executionCount(n)} executions: ${reading(counter, prior)} → ${reading(counter, call)}`,
              );
            prior = call;
          }
          const counts = [before, first, second].map((call) => reading(counter, call)).join(' → ');
          return pass(`two fresh keys executed once each: counter ${counts}`);
        }),
    },
    {
      id: 'key.opaque',
      sentence: '`idempotencyKey` is an opaque string, client-generated.',
      // No keyword, but an opaque string is compared as it is: a key spelled another way is another
      // operation, and matching it to a stored one drops a call the client meant as new.
      severity: 'failure',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const { before, calls } = await keySpellings(run);
          const [first] = calls;
          if (first?.call.kind === 'error') return nc(`the keyed call failed: ${describe(first.call)}`);
          let prior = before;
          const readings = [reading(counter, before)];
          const refused: string[] = [];
          for (const { key, how, call } of calls) {
            const { type } = errorData(call);
            if (type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress)
              return fail(
                `the key ${how}, ${JSON.stringify(key)}, was matched against another: ${describe(call)}`,
              );
            if (call.kind === 'error') {
              // A server may publish its own limits on keys (no spaces, say): a refusal matches nothing.
              refused.push(`${how} refused (${describe(call)})`);
              continue;
            }
            const n = executionsBetween(counter, prior, call);
            if (n === undefined)
              return unreadable(counter, prior, call, `${describe(prior)}, then ${describe(call)}`);
            if (n <= 0)
              return fail(
                `the key ${how}, ${JSON.stringify(key)}, got ${describe(call)}, nothing executed (counter ${reading(counter, prior)} → ${reading(counter, call)}): taken for ${JSON.stringify(first?.key)}, whose result it replayed`,
              );
            if (n !== 1)
              return fail(
                `the key ${how}, ${JSON.stringify(key)}, moved the counter by ${executionCount(n)} executions: ${reading(counter, prior)} → ${reading(counter, call)}`,
              );
            prior = call;
            readings.push(reading(counter, call));
          }
          const executed = calls.length - refused.length;
          return pass(
            `${executed} spellings of one key executed once each (${JSON.stringify(first?.key)}, ${KEY_SPELLINGS.map((k) => k.how).join(', ')}): counter ${readings.join(' → ')}${refused.length ? `; ${refused.join('; ')}` : ''}`,
          );
        }),
    },
  ]),
  ...section('Server behavior on a repeated key', [
    {
      id: 'in-progress.not-executed',
      sentence:
        'If a request bearing the same key is still executing […] the server MUST NOT begin a second execution of the tool for the duplicate request',
      needs: 'slowArguments',
      essential: true,
      judge: whileInProgress(({ original, duplicate, extra, moved, account, retry, replayed }) => {
        if (extra !== 0)
          return fail(`the duplicate got ${describe(duplicate)}, yet ${unexpected(extra)}: ${account}`);
        if (!replayed)
          return fail(
            `once the original finished, the key got ${describe(retry)}, ${notStored(original, retry)}`,
          );
        return pass(
          `one execution: the duplicate got ${describe(duplicate)}; ${moved}; the key then replays`,
        );
      }),
    },
    {
      id: 'in-progress.not-blocked',
      sentence: 'and MUST NOT block the duplicate request indefinitely waiting for the original to finish.',
      needs: 'slowArguments',
      judge: whileInProgress(({ original, duplicate, latency, remaining, held, extra }) => {
        const took = `answered after ${ms(latency)}`;
        if (!held) return pass(`${took}, while the original ran ${ms(remaining)} more`);
        // A duplicate that executed took its own run's time; in-progress.not-executed reports it.
        if (extra > 0 && duplicate.kind !== 'error' && !same(original, duplicate))
          return pass(`${took}: it executed on its own (in-progress.not-executed), nothing held it`);
        return fail(
          `${took}, of the ${ms(remaining)} the original still ran: held for it, where an answer at once was due`,
        );
      }),
    },
    {
      id: 'in-progress.data',
      sentence:
        'the server SHOULD reject the duplicate immediately with an error indicating a request with this key is already in progress […] servers SHOULD populate `error.data` with a structured value identifying this specific failure mode (for example `{"type": "idempotency_key_in_progress", "idempotencyKey": "<the key>"}`)',
      needs: 'slowArguments',
      judge: whileInProgress(({ key, duplicate, latency, remaining, held }) => {
        const { type, idempotencyKey } = errorData(duplicate);
        const when = held ? `, after ${ms(latency)} of the original's ${ms(remaining)}` : '';
        const observed = `the duplicate got ${describe(duplicate)}${when}`;
        return !held && type === SEP_ERROR.inProgress && idempotencyKey === key
          ? pass(observed)
          : fail(observed);
      }),
    },
    {
      id: 'replay.not-executed',
      sentence:
        "If the new request's arguments are equivalent to the arguments of a completed original call […], the server MUST NOT execute the tool again.",
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const { original, retries, probe, before } = await replay(run);
          const [retry] = retries;
          if (!probe || !retry) return nc(`the keyed call failed: ${describe(original)}`);
          const stale = notExecuted(counter, before, original);
          if (stale) return stale;
          const { extra, moved, account } = afterwards(counter, original, probe);
          if (extra === undefined) return unreadable(counter, original, probe, account);
          const stored = same(original, retry) ? ', the stored answer' : '';
          if (extra !== 0)
            return fail(`the retry got ${describe(retry)}${stored}, yet ${unexpected(extra)}: ${account}`);
          return pass(`the retry got ${describe(retry)}; ${moved}`);
        }),
    },
    {
      id: 'replay.identical',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response',
      essential: true,
      judge: async (run) => {
        const { original, retries } = await replay(run);
        const [retry] = retries;
        if (!retry) return nc(`the keyed call failed: ${describe(original)}`);
        if (!same(original, retry))
          return fail(`the retry's answer differs from the original's at ${difference(original, retry)}`);
        const bytes = (call: Call) => call.answer.text.replace(/"id":\d+/, '');
        return pass(
          `${describe(retry)}, ${bytes(original) === bytes(retry) ? 'byte for byte but the id' : 'the same value'}`,
        );
      },
    },
    {
      id: 'replay.own-result',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const seen = await retriedAfterAnotherKey(run, counter);
          if ('outcome' in seen) return seen;
          const { original, other, retry, extra } = seen;
          if (extra > 0)
            return na(
              `the first key's retry executed again (retention.per-key): no replay to compare, it got ${describe(retry)}`,
            );
          if (same(other, retry) && !same(original, other))
            return fail(
              `the first key's retry, after a second key with the same arguments, got the second key's ${describe(other)}, not its own ${describe(original)}`,
            );
          if (!replays(counter, original, retry))
            return fail(
              `the first key's retry, after a second key, got ${describe(retry)}, ${notStored(original, retry)}`,
            );
          return pass(
            `the first key's retry, after a second key with the same arguments, got its own ${describe(retry)}, not the second key's ${describe(other)}`,
          );
        }),
    },
    {
      id: 'errors.replayed',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response — unless that result has since expired',
      needs: 'errorArguments',
      judge: async (run) => {
        const { first, second, unkeyed } = await errorReplay(run);
        if (!second || !unkeyed) return nc(`--error-arguments did not fail: ${describe(first)}`);
        // Failures count their own executions (a decline number), or none can be told apart.
        const [a, b] = unkeyed;
        const counter = counterOf(a, b);
        if (!counter)
          return nc(`failures without a key are alike (${describe(a)}): replay looks like re-execution`);
        const { extra, account } = afterwards(counter, first, a, 'the keyed failure');
        if (extra === undefined) return unreadable(counter, first, a, account);
        const ran = extra === 0 ? '' : `; ${unexpected(extra)}: ${account}`;
        if (!same(first, second))
          return fail(
            extra > 0
              ? `ran again: ${describe(first)}, then ${describe(second)}${ran}`
              : `the retry got another answer, at ${difference(first, second)}`,
          );
        if (extra !== 0) return fail(`the stored failure came back, yet ${unexpected(extra)}: ${account}`);
        return pass(`the stored failure was replayed: ${describe(second)}`);
      },
    },
    {
      id: 'conflict.other-arguments',
      sentence:
        "If the new request's arguments differ from the arguments of the original call, the server MUST reject the request […]. The server MUST NOT execute the tool with the new arguments, and MUST NOT silently return the cached result from the original, differently-parameterized call.",
      essential: true,
      judge: async (run) =>
        otherArguments(run.inputs.arguments)
          ? conflict(conflictArguments)(run)
          : na('the arguments have no number, string or boolean to change'),
    },
    {
      id: 'conflict.other-tool',
      sentence:
        'Two requests bearing the same `idempotencyKey` are equivalent if they specify the same tool name and equivalent arguments as parsed JSON values.',
      // The consequence is the conflict rule's MUST: another tool is another request.
      severity: 'failure',
      needs: 'otherTool',
      judge: conflict(conflictTool),
    },
    {
      id: 'conflict.data',
      sentence:
        'servers SHOULD populate the standard JSON-RPC `error.data` field […] with a structured value identifying the failure as an idempotency key conflict, for example `{"type": "idempotency_key_conflict", "idempotencyKey": "<the key>"}`.',
      judge: async (run) => {
        const observed: Conflicted[] = [];
        if (otherArguments(run.inputs.arguments)) observed.push(await conflictArguments(run));
        if (run.inputs.otherTool) observed.push(await conflictTool(run));
        const rejections = observed.flatMap(({ key, rejected }) =>
          rejected?.kind === 'error' ? [{ key, rejected }] : [],
        );
        if (rejections.length === 0)
          return observed.length ? nc('there was no rejection to inspect') : na('no conflict to provoke');
        const wrong = rejections.filter(({ key, rejected }) => {
          const { type, idempotencyKey } = errorData(rejected);
          return type !== SEP_ERROR.conflict || idempotencyKey !== key;
        });
        const shown = [...new Set((wrong.length ? wrong : rejections).map((r) => describe(r.rejected)))];
        return wrong.length
          ? fail(`${wrong.length} of ${rejections.length} rejections: ${shown.join('; ')}`)
          : pass(shown.join('; '));
      },
    },
  ]),
  ...section('Request equivalence', [
    {
      id: 'equivalence.key-order',
      sentence:
        '`{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` MUST be treated as equivalent despite differing key order',
      essential: true,
      judge: async (run) =>
        some(run.inputs.arguments, (v) => isObject(v) && Object.keys(v).length > 1)
          ? reorderedKeys(run)
          : na('the arguments have no object with two members to reorder'),
    },
    {
      id: 'equivalence.whitespace',
      sentence:
        'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
      essential: true,
      judge: equivalent((args) => [write(args, { spaced: true })]),
    },
    {
      id: 'equivalence.number-spelling',
      sentence:
        'numeric values representing the same mathematical value MUST compare equal — `1` and `1.0` MUST be treated as the same value.',
      essential: true,
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'number')
          ? respelledNumbers(run)
          : na('the arguments have no number to spell another way'),
    },
    {
      id: 'equivalence.string-escapes',
      sentence:
        'two differently-escaped encodings of the same string (for example, a literal character versus its `\\uXXXX` escape) MUST be treated as equivalent, since both parse to the same value.',
      essential: true,
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'string')
          ? escapedStrings(run)
          : na('the arguments have no string or member name to escape'),
    },
    {
      id: 'equivalence.absent-arguments',
      sentence:
        'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
      // The SEP does not say whether a missing `arguments` and `{}` are one parsed value; the tool
      // receives the same input either way, so a difference is worth a warning, not a failure.
      severity: 'warning',
      judge: async (run) =>
        Object.keys(run.inputs.arguments).length === 0
          ? absentArguments(run)
          : na('only for a call whose arguments are {} (absent vs {})'),
    },
    {
      id: 'equivalence.no-unicode-normalization',
      sentence:
        'This SEP does not require Unicode normalization (e.g., NFC/NFD) beyond what parsing already resolves; two strings that are distinct after parsing remain distinct for this comparison.',
      // Distinct arguments make a conflict, so the conflict rule's MUST applies.
      severity: 'failure',
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'string' && renormalise(v) !== v)
          ? conflict(renormalised)(run)
          : na('the arguments have no string whose NFC and NFD forms differ (such as "café")'),
    },
    {
      id: 'equivalence.tool-implementation',
      sentence:
        "A server that replaces a tool's implementation while a previously-recorded call remains within its retention window will still replay that call's original recorded result",
      notCheckable: 'a client cannot replace the tool between a call and its retry',
    },
  ]),
  ...section('Retention', [
    {
      id: 'retention.per-key',
      sentence: 'A server MUST retain enough state to answer a repeated key within a bounded window',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const seen = await retriedAfterAnotherKey(run, counter);
          if ('outcome' in seen) return seen;
          const { retry, extra, moved, account } = seen;
          if (extra !== 0)
            return fail(
              `the first key, retried after a second key, got ${describe(retry)}, yet ${unexpected(extra)}: ${account}; its record was gone`,
            );
          return pass(`the first key, retried after a second key, got ${describe(retry)}; ${moved}`);
        }),
    },
    {
      id: 'retention.bounded',
      sentence: 'A server MUST retain enough state to answer a repeated key within a bounded window',
      notCheckable:
        'the window is the server’s choice and not advertised; replay.* cover seconds, expiry means waiting it out',
    },
    {
      id: 'retention.documented',
      sentence: 'Servers SHOULD document their retention window through server-level documentation',
      notCheckable: 'documentation is not on the wire',
    },
  ]),
  ...section('Implementation ordering is intentionally unspecified', [
    {
      id: 'ordering.crash',
      sentence:
        'A server that executes a side effect and crashes before persisting the corresponding idempotency record will, if retried, execute that side effect again',
      notCheckable: 'it would take crashing the server between the side effect and its record',
    },
  ]),
  ...section('Relationship to the 2026-07-28 stateless core and MRTR', [
    {
      id: 'stateless.shared-store',
      sentence:
        "A server implementing this SEP in a horizontally-scaled, stateless deployment MUST therefore make its idempotency record store visible to every instance handling that server's traffic",
      notCheckable:
        'a client cannot tell instances apart behind one URL; replay.* pass by luck on an unshared store',
    },
  ]),
  ...section('Backward Compatibility', [
    {
      id: 'no-key.executes-every-time',
      sentence:
        'A client MAY omit `idempotencyKey` entirely and receive the same behavior as before this proposal.',
      // A MAY for the client is a promise by the server: calls without a key all execute.
      severity: 'failure',
      judge: async (run) => {
        const { first, second, counter } = await baseline(run);
        if (first.kind === 'error') return nc(`the call failed: ${describe(first)}`);
        if (counter) return pass(`${describe(first)}, then ${describe(second)}`);
        return nc(
          `${noCounter(first, second, run.inputs.counter)}: pick a --tool whose result shows each execution (a balance, a counter)`,
        );
      },
    },
  ]),
  ...section('Security Implications', [
    {
      id: 'scope.per-caller',
      sentence:
        'Servers MUST scope their idempotency records to whatever authorization boundary already governs access to the underlying tool call […] so that a key is only ever matched against a prior request from the same authorized caller.',
      needs: 'other',
      judge: (run) =>
        counted(run, async (counter) => {
          const { first, fresh, second } = await otherCaller(run);
          if (!fresh || !second) return nc(`the first caller's call failed: ${describe(first)}`);
          if (fresh.kind === 'error')
            return nc(
              `the other caller's call with a fresh key failed (may it call the tool?): ${describe(fresh)}`,
            );
          const { type } = errorData(second);
          if (type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress)
            return fail(`matched against the first caller's record: ${describe(second)}`);
          if (second.kind === 'error')
            return fail(
              `the other caller's first use of the key was refused: ${describe(second)}, though its call with a fresh key executed`,
            );
          if (same(first, second))
            return fail(`the other caller got the first caller's result: ${describe(second)}`);
          const n = executionsBetween(counter, fresh, second);
          if (n === undefined)
            return unreadable(counter, fresh, second, `${describe(fresh)}, then ${describe(second)}`);
          if (n !== 1)
            return fail(
              `the other caller's call with the key moved its counter by ${executionCount(n)} executions: ${reading(counter, fresh)} → ${reading(counter, second)}`,
            );
          return pass(`the other caller's call executed: ${describe(second)}`);
        }),
    },
    {
      id: 'authorization.at-replay',
      sentence:
        'A replayed response MUST still be subject to whatever authorization check would ordinarily govern access to it',
      needs: 'forbidden',
      judge: (run) =>
        counted(run, async () => {
          const { fresh, original, replayed, retry } = await forbiddenReplay(run);
          if (!original)
            return nc(
              `the --forbidden-header credentials may call the tool: a first call got ${describe(fresh)}`,
            );
          if (!replayed || !retry) return nc(`the keyed call failed: ${describe(original)}`);
          const firstCall = `a first call with them got ${describe(fresh)}`;
          if (!refused(replayed)) {
            if (same(original, replayed))
              return fail(
                `the stored result went to credentials that may not call it: ${describe(replayed)} (${firstCall})`,
              );
            return fail(`not refused: ${describe(replayed)} (${firstCall}; original ${describe(original)})`);
          }
          if (carries(replayed, original))
            return fail(
              `refused with ${describe(replayed)}, but the refusal carries the stored ${describe(original)}`,
            );
          if (!same(original, retry)) {
            // A server that never replays fails replay.not-executed already; whether the forbidden
            // call touched the record cannot be told from there being no record to touch.
            const plain = await replay(run);
            const [again] = plain.retries;
            if (again && again.kind !== 'error' && !same(plain.original, again))
              return na(
                `no replay to authorize: the server executes a keyed retry again (replay.not-executed); the caller's retry got ${describe(retry)} after the original ${describe(original)}`,
              );
            return fail(
              `refused with ${describe(replayed)}, but the caller's retry then got ${describe(retry)}, not the original ${describe(original)}`,
            );
          }
          return pass(
            `refused: ${describe(replayed)}, like a first call; the caller's retry replayed ${describe(retry)}`,
          );
        }),
    },
    {
      id: 'security.resource-limits',
      sentence:
        'Servers SHOULD apply the same rate-limiting and resource-quota mechanisms they already apply to other server-side state (e.g., Tasks) to their idempotency records',
      notCheckable:
        'seeing a quota means flooding the server with keys; the checker makes only the calls it needs',
    },
  ]),
];

// Each spelling of an equivalent retry is a keyed scenario of its own, made once per run.
const reorderedKeys = equivalent((args) => [write(args, { reverseKeys: true })]);
const respelledNumbers = equivalent((args) =>
  [0, 1, 2].map((i) => write(args, { number: (n) => respellings(n)[i] ?? JSON.stringify(n) })),
);
const escapedStrings = equivalent((args) => ESCAPINGS.map((escaping) => write(args, { string: escaping })));
const absentArguments = equivalent(() => [null]);

/** One rule against `run`: its scenarios run now unless an earlier rule of the run made them. */
export async function checkRule(run: Run, rule: Rule): Promise<CheckResult> {
  const { id, section, severity, sentence } = rule;
  run.current = id;
  const verdict = await judge(run, rule).catch((error: unknown) =>
    nc(`the exchange broke: ${run.broken?.reason ?? messageOf(error)}`),
  );
  const { outcome, observed } = verdict;
  const broken = severity === 'failure' ? 'failed' : 'warned';
  const status = outcome === 'holds' ? 'passed' : outcome === 'broken' ? broken : outcome;
  return { id, section, severity, sentence, status, observed };
}

function judge(run: Run, rule: Rule): Promise<Verdict> {
  if ('notCheckable' in rule) return Promise.resolve(nc(rule.notCheckable));
  if (rule.needs && run.inputs[rule.needs] === undefined)
    return Promise.resolve(na(NEEDS[rule.needs](run.inputs.transport)));
  return rule.judge(run);
}

/** What a run found: each rule judged, and what keeps the run from meaning anything, if so. */
export interface Report {
  results: CheckResult[];
  /** The rules left unjudged because the exchange broke. */
  notRun: string[];
  broken?: Broken;
  /** The essential rules that could not be observed (not checkable, or not run). */
  unobserved: string[];
  /** Which numbers of the tool's result were read as its counter, in words; absent if none. */
  counter?: string;
}

const ESSENTIAL = new Set(RULES.flatMap((rule) => ('essential' in rule && rule.essential ? [rule.id] : [])));

/** Every rule in the SEP's order; each scenario runs once, for whichever rule needs it first. */
export async function runChecks(run: Run): Promise<Report> {
  // First: every judgement of "executed" reads the counter these calls prove.
  const { counter } = await baseline(run).catch(() => ({ counter: undefined }));
  const results: CheckResult[] = [];
  const notRun: string[] = [];
  for (const rule of RULES) {
    if (run.broken) notRun.push(rule.id);
    else results.push(await checkRule(run, rule));
  }
  const unobserved = [
    ...results.filter((r) => ESSENTIAL.has(r.id) && r.status === 'not checkable').map((r) => r.id),
    ...notRun.filter((id) => ESSENTIAL.has(id)),
  ];
  return {
    results,
    notRun,
    unobserved,
    ...(run.broken && { broken: run.broken }),
    ...(counter && { counter: describeCounter(counter) }),
  };
}
