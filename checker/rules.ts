// --- SEP-3182's rules, stated once: every rule a client can observe, in the order the SEP gives them ---
//
// The checker (`check.ts`) runs them against any server, and the project's own tests run them
// against the demo server (`test/support/sep-cases.ts`): one statement of each rule, two users.
// Each rule quotes the SEP sentence it tests and takes its severity from that sentence's keyword
// (MUST → failure, SHOULD → warning). A check watches outcomes only: it never asks the server
// whether it deduplicated, it sees whether a result shows a new execution. So a run starts by
// proving that two calls without a key give different results; if they do not, a replay cannot
// be told from a re-execution, and the checks that rest on that say so instead of guessing.

import { randomUUID } from 'node:crypto';
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
  transport: 'stdio' | 'http';
}

/** A duplicate goes this long after its original, so that the original is surely under way. */
const DUPLICATE_DELAY_MS = 100;

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

/** What one run of the checks knows and has done. */
export class Run {
  calls = 0;
  keyedCalls = 0;

  constructor(
    readonly peer: Peer,
    readonly inputs: CheckInputs,
  ) {}

  async call({ tool = this.inputs.tool, argumentsText, key, caller = this.peer }: CallSpec): Promise<Call> {
    const args = argumentsText === undefined ? JSON.stringify(this.inputs.arguments) : argumentsText;
    const members = [`"name":${JSON.stringify(tool)}`];
    if (args !== null) members.push(`"arguments":${args}`);
    if (key !== undefined) members.push(`"idempotencyKey":${JSON.stringify(key)}`);
    this.calls += 1;
    if (key !== undefined) this.keyedCalls += 1;
    const sentAt = performance.now();
    const answer = await caller.request('tools/call', `{${members.join(',')}}`, tool);
    const { result, error } = answer.message;
    if (!isObject(result)) return { answer, sentAt, kind: 'error', value: error };
    return { answer, sentAt, kind: result.isError === true ? 'tool error' : 'success', value: result };
  }
}

/** A scenario runs once per run; every check that judges it reads the same observations. */
function scenario<T>(observe: (run: Run) => Promise<T>): (run: Run) => Promise<T> {
  const seen = new WeakMap<Run, Promise<T>>();
  return (run) => {
    const observed = seen.get(run) ?? observe(run);
    seen.set(run, observed);
    return observed;
  };
}

/** Two calls without a key: do their results show each execution? */
const baseline = scenario(async (run) => {
  const first = await run.call({});
  const second = await run.call({});
  return { first, second, distinguishable: first.kind !== 'error' && !same(first, second) };
});

interface Pair {
  key: string;
  first: Call;
  second: Call;
}

/** A keyed call, then the same fresh key again with `retry` (and `original` for the first, if given). */
function keyedPair(retry: (run: Run) => CallSpec, original: (run: Run) => CallSpec = () => ({})) {
  return scenario(async (run): Promise<Pair> => {
    const key = randomUUID();
    const first = await run.call({ ...original(run), key });
    return { key, first, second: await run.call({ ...retry(run), key }) };
  });
}

// --- Reading outcomes ---

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
  const short = text.length > 60 ? `${text.slice(0, 57)}…` : text;
  return call.kind === 'tool error' ? `isError "${short}"` : `"${short}"`;
}

const ms = (from: number, to: number) => `${Math.round(to - from)} ms`;

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

/** Another spelling of the same number: `1` → `1.0`, `1.5` → `1.50`, `1e+21` → `1E+21`. */
function respell(n: number): string {
  const text = JSON.stringify(n);
  if (text.includes('e')) return text.replace('e', 'E');
  return text.includes('.') ? `${text}0` : `${text}.0`;
}

/** Every UTF-16 unit as a `\uXXXX` escape: the same string once parsed. */
const escapeAll = (s: string) =>
  `"${Array.from({ length: s.length }, (_, i) => `\\u${s.charCodeAt(i).toString(16).padStart(4, '0')}`).join('')}"`;

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

const unjudgeable =
  'the two calls without a key gave the same result: a replay cannot be told from a re-execution';

/** An equivalent retry must get the stored result: neither a new execution nor a rejection. */
function equivalent(spell: (args: Args) => string | null) {
  const pair = keyedPair((run) => ({ argumentsText: spell(run.inputs.arguments) }));
  return async (run: Run): Promise<Verdict> => {
    const { distinguishable } = await baseline(run);
    const { first, second } = await pair(run);
    if (first.kind === 'error') return nc(`the keyed original failed: ${describe(first)}`);
    const sent = spell(run.inputs.arguments) ?? 'no arguments member';
    if (same(first, second))
      return distinguishable ? pass(`retry with ${sent} replayed ${describe(first)}`) : nc(unjudgeable);
    const what = second.kind === 'error' ? 'rejected it' : 'executed it again';
    return fail(`retry with ${sent}: ${what}, ${describe(second)} (original ${describe(first)})`);
  };
}

/** A retry with the same key and a different request must be rejected: neither executed nor replayed. */
async function conflict(run: Run, pair: (run: Run) => Promise<Pair>): Promise<Verdict> {
  const { first, second } = await pair(run);
  if (first.kind === 'error') return nc(`the keyed original failed: ${describe(first)}`);
  if (second.kind === 'error') return pass(`rejected: ${describe(second)}`);
  const what = same(first, second) ? 'returned the stored result' : 'executed it';
  return fail(`${what}: ${describe(second)} (original ${describe(first)})`);
}

const conflictArguments = keyedPair((run) => ({
  argumentsText: JSON.stringify(otherArguments(run.inputs.arguments)),
}));
const conflictTool = keyedPair((run) => ({ tool: run.inputs.otherTool }));
const replay = keyedPair(() => ({}));
const errorCall = (run: Run) => ({ argumentsText: JSON.stringify(run.inputs.errorArguments) });
const errorReplay = keyedPair(errorCall, errorCall);
const otherCaller = keyedPair((run) => ({ caller: run.inputs.other }));

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

/** A slow keyed call, and the same key again while it runs. */
const inProgress = scenario(async (run) => {
  const key = randomUUID();
  const argumentsText = JSON.stringify(run.inputs.slowArguments);
  const original = run.call({ argumentsText, key });
  let finished = false;
  original.then(() => (finished = true)).catch(() => {});
  await new Promise((resolve) => setTimeout(resolve, DUPLICATE_DELAY_MS));
  const tooFast = finished;
  const duplicate = run.call({ argumentsText, key });
  return { key, tooFast, original: await original, duplicate: await duplicate };
});

function whileInProgress(judge: (o: { key: string; original: Call; duplicate: Call }) => Verdict) {
  return async (run: Run): Promise<Verdict> => {
    const observed = await inProgress(run);
    if (observed.tooFast)
      return nc(`the original finished within ${DUPLICATE_DELAY_MS} ms, before its duplicate`);
    return judge(observed);
  };
}

// Each spelling of an equivalent retry is its own keyed pair, made once per run.
const reorderedKeys = equivalent((args) => write(args, { reverseKeys: true }));
const respelledNumbers = equivalent((args) => write(args, { number: respell }));
const escapedStrings = equivalent((args) => write(args, { string: escapeAll }));
const absentArguments = equivalent(() => null);
const renormalised = keyedPair((run) => ({
  argumentsText: write(run.inputs.arguments, { string: (s) => JSON.stringify(renormalise(s)) }),
}));

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
  | { judge: (run: Run) => Promise<Verdict>; needs?: Need }
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
  ...section('Server behavior on a repeated key', [
    {
      id: 'in-progress.not-executed',
      sentence:
        'If a request bearing the same key is still executing […] the server MUST NOT begin a second execution of the tool for the duplicate request',
      needs: 'slowArguments',
      judge: whileInProgress(({ original, duplicate }) =>
        original.kind !== 'error' && duplicate.kind !== 'error' && !same(original, duplicate)
          ? fail(`both executed: ${describe(original)}, then ${describe(duplicate)}`)
          : pass(`one execution; the duplicate got ${describe(duplicate)}`),
      ),
    },
    {
      id: 'in-progress.not-blocked',
      sentence: 'and MUST NOT block the duplicate request indefinitely waiting for the original to finish.',
      needs: 'slowArguments',
      judge: whileInProgress(({ original, duplicate }) => {
        const took = `answered after ${ms(duplicate.sentAt, duplicate.answer.at)}`;
        const ran = ms(original.sentAt, original.answer.at);
        if (duplicate.answer.at < original.answer.at) return pass(`${took}, while the original ran (${ran})`);
        if (duplicate.kind !== 'error' && !same(original, duplicate))
          return pass(`${took}: it ran on its own`);
        return fail(`${took}, only once the original had finished (${ran}): it waited for it`);
      }),
    },
    {
      id: 'in-progress.data',
      sentence:
        'the server SHOULD reject the duplicate immediately with an error indicating a request with this key is already in progress […] servers SHOULD populate `error.data` with a structured value identifying this specific failure mode (for example `{"type": "idempotency_key_in_progress", "idempotencyKey": "<the key>"}`)',
      needs: 'slowArguments',
      judge: whileInProgress(({ key, original, duplicate }) => {
        const { type, idempotencyKey } = errorData(duplicate);
        const immediate = duplicate.answer.at < original.answer.at;
        const observed = `the duplicate got ${describe(duplicate)}${immediate ? '' : ' after the original'}`;
        const holds = immediate && type === SEP_ERROR.inProgress && idempotencyKey === key;
        return holds ? pass(observed) : fail(observed);
      }),
    },
    {
      id: 'replay.not-executed',
      sentence:
        "If the new request's arguments are equivalent to the arguments of a completed original call […], the server MUST NOT execute the tool again.",
      judge: async (run) => {
        const { distinguishable } = await baseline(run);
        const { first, second } = await replay(run);
        if (first.kind === 'error') return nc(`the keyed call failed: ${describe(first)}`);
        if (same(first, second))
          return distinguishable ? pass(`the retry got ${describe(second)}`) : nc(unjudgeable);
        if (second.kind === 'error') return pass(`not executed: ${describe(second)}`);
        return fail(`executed again: ${describe(first)}, then ${describe(second)}`);
      },
    },
    {
      id: 'replay.identical',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response',
      judge: async (run) => {
        const { first, second } = await replay(run);
        if (first.kind === 'error') return nc(`the keyed call failed: ${describe(first)}`);
        if (!same(first, second)) return fail(`original ${describe(first)}, retry ${describe(second)}`);
        const bytes = (call: Call) => call.answer.text.replace(/"id":\d+/, '');
        return pass(
          `${describe(second)}, ${bytes(first) === bytes(second) ? 'byte for byte but the id' : 'the same value'}`,
        );
      },
    },
    {
      id: 'errors.replayed',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response — unless that result has since expired',
      needs: 'errorArguments',
      judge: async (run) => {
        const { first, second } = await errorReplay(run);
        if (first.kind === 'success') return nc(`--error-arguments did not fail: ${describe(first)}`);
        if (!same(first, second)) return fail(`ran again: ${describe(first)}, then ${describe(second)}`);
        // Only now are two unkeyed failures worth their calls: does each show its execution?
        const [a, b] = [await run.call(errorCall(run)), await run.call(errorCall(run))];
        if (same(a, b))
          return nc(`failures without a key are alike (${describe(a)}): replay looks like re-execution`);
        return pass(`the stored failure was replayed: ${describe(second)}`);
      },
    },
    {
      id: 'conflict.other-arguments',
      sentence:
        "If the new request's arguments differ from the arguments of the original call, the server MUST reject the request […]. The server MUST NOT execute the tool with the new arguments, and MUST NOT silently return the cached result from the original, differently-parameterized call.",
      judge: async (run) =>
        otherArguments(run.inputs.arguments)
          ? conflict(run, conflictArguments)
          : na('the arguments have no number, string or boolean to change'),
    },
    {
      id: 'conflict.other-tool',
      sentence:
        'Two requests bearing the same `idempotencyKey` are equivalent if they specify the same tool name and equivalent arguments as parsed JSON values.',
      // The consequence is the conflict rule's MUST: another tool is another request.
      severity: 'failure',
      needs: 'otherTool',
      judge: (run) => conflict(run, conflictTool),
    },
    {
      id: 'conflict.data',
      sentence:
        'servers SHOULD populate the standard JSON-RPC `error.data` field […] with a structured value identifying the failure as an idempotency key conflict, for example `{"type": "idempotency_key_conflict", "idempotencyKey": "<the key>"}`.',
      judge: async (run) => {
        const pairs: Pair[] = [];
        if (otherArguments(run.inputs.arguments)) pairs.push(await conflictArguments(run));
        if (run.inputs.otherTool) pairs.push(await conflictTool(run));
        const rejected = pairs.filter((p) => p.first.kind !== 'error' && p.second.kind === 'error');
        if (rejected.length === 0)
          return pairs.length ? nc('there was no rejection to inspect') : na('no conflict to provoke');
        const wrong = rejected.filter(({ key, second }) => {
          const { type, idempotencyKey } = errorData(second);
          return type !== SEP_ERROR.conflict || idempotencyKey !== key;
        });
        const shown = [...new Set((wrong.length ? wrong : rejected).map((p) => describe(p.second)))];
        const observed = shown.join('; ');
        return wrong.length
          ? fail(`${wrong.length} of ${rejected.length} rejections: ${observed}`)
          : pass(observed);
      },
    },
  ]),
  ...section('Request equivalence', [
    {
      id: 'equivalence.key-order',
      sentence:
        '`{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` MUST be treated as equivalent despite differing key order',
      judge: async (run) =>
        some(run.inputs.arguments, (v) => isObject(v) && Object.keys(v).length > 1)
          ? reorderedKeys(run)
          : na('the arguments have no object with two members to reorder'),
    },
    {
      id: 'equivalence.whitespace',
      sentence:
        'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
      judge: equivalent((args) => write(args, { spaced: true })),
    },
    {
      id: 'equivalence.number-spelling',
      sentence:
        'numeric values representing the same mathematical value MUST compare equal — `1` and `1.0` MUST be treated as the same value.',
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'number')
          ? respelledNumbers(run)
          : na('the arguments have no number to spell another way'),
    },
    {
      id: 'equivalence.string-escapes',
      sentence:
        'two differently-escaped encodings of the same string (for example, a literal character versus its `\\uXXXX` escape) MUST be treated as equivalent, since both parse to the same value.',
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
          ? conflict(run, renormalised)
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
        const { first, second, distinguishable } = await baseline(run);
        if (first.kind === 'error') return nc(`the call failed: ${describe(first)}`);
        if (distinguishable) return pass(`${describe(first)}, then ${describe(second)}`);
        return nc(
          `both gave ${describe(first)}: pick a --tool whose result shows each execution (a balance, a counter)`,
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
      judge: async (run) => {
        const { distinguishable } = await baseline(run);
        const { first, second } = await otherCaller(run);
        const { type } = errorData(second);
        if (first.kind === 'error') return nc(`the first caller's call failed: ${describe(first)}`);
        if (type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress) {
          return fail(`matched against the first caller's record: ${describe(second)}`);
        }
        if (second.kind === 'error') return nc(`the other caller's call failed: ${describe(second)}`);
        if (!same(first, second)) return pass(`the other caller's call executed: ${describe(second)}`);
        return distinguishable
          ? fail(`the other caller got the first caller's result: ${describe(second)}`)
          : nc(unjudgeable);
      },
    },
    {
      id: 'authorization.at-replay',
      sentence:
        'A replayed response MUST still be subject to whatever authorization check would ordinarily govern access to it',
      needs: 'forbidden',
      judge: async (run) => {
        const { distinguishable } = await baseline(run);
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
          if (
            plain.first.kind !== 'error' &&
            plain.second.kind !== 'error' &&
            !same(plain.first, plain.second)
          )
            return na(
              `no replay to authorize: the server executes a keyed retry again (replay.not-executed); the caller's retry got ${describe(retry)} after the original ${describe(original)}`,
            );
          return fail(
            `refused with ${describe(replayed)}, but the caller's retry then got ${describe(retry)}, not the original ${describe(original)}`,
          );
        }
        if (!distinguishable) return nc(unjudgeable);
        return pass(
          `refused: ${describe(replayed)}, like a first call; the caller's retry replayed ${describe(retry)}`,
        );
      },
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

/** One rule against `run`: its scenarios run now unless an earlier rule of the run made them. */
export async function checkRule(run: Run, rule: Rule): Promise<CheckResult> {
  const { id, section, severity, sentence } = rule;
  const verdict = await judge(run, rule).catch((error: unknown) =>
    nc(`the exchange failed: ${error instanceof Error ? error.message : String(error)}`),
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

/** Every rule in the SEP's order; each scenario runs once, for whichever rule needs it first. */
export async function runChecks(run: Run): Promise<CheckResult[]> {
  await baseline(run); // first: the other judgements lean on it
  const results: CheckResult[] = [];
  for (const rule of RULES) results.push(await checkRule(run, rule));
  return results;
}
