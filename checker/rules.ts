// --- The checks: every rule of SEP-3182 a client can observe, in the order the SEP gives them ---
//
// Each check quotes the SEP sentence it tests and takes its severity from that sentence's keyword
// (MUST → failure, SHOULD → warning). A check observes outcomes only: it never asks the server
// whether it deduplicated, it watches whether a call's result shows a new execution. That is why
// the run starts by proving two calls without a key give different results: if they do not, a
// replay cannot be told from a re-execution, and the checks that rest on that say so.

import { randomUUID } from 'node:crypto';
import { IdempotencyErrorType } from '../idempotency/errors.js';
import { type Answer, isObject, type Peer } from './wire.js';

export type Severity = 'failure' | 'warning' | 'note';
export type Status = 'passed' | 'failed' | 'warned' | 'not applicable' | 'not checkable';

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
  arguments: Record<string, unknown>;
  slowArguments?: Record<string, unknown>;
  errorArguments?: Record<string, unknown>;
  otherTool?: string;
  /** A second caller's connection to the same server (its own credentials), for scope. */
  other?: Peer;
  transport: 'stdio' | 'http';
}

/** A duplicate is sent this long after its original, so the original is surely under way. */
const DUPLICATE_DELAY_MS = 100;

/** One `tools/call` as observed: the answer and what kind of outcome it carried. */
interface Call {
  key?: string;
  answer: Answer;
  sentAt: number;
  kind: 'success' | 'tool error' | 'error';
  /** The `result` or `error` member; what "the same response" compares. */
  value: unknown;
}

type Verdict = { holds: boolean; observed: string } | { notApplicable: string } | { notCheckable: string };

interface CallSpec {
  tool?: string;
  /** The `arguments` member exactly as sent; `null` leaves it out. */
  argumentsText?: string | null;
  key?: string;
  caller?: Peer;
}

/** What one run of the checker knows and has done. */
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
    if (isObject(result)) {
      return { key, answer, sentAt, kind: result.isError === true ? 'tool error' : 'success', value: result };
    }
    return { key, answer, sentAt, kind: 'error', value: error };
  }
}

/** A scenario runs once per run; every check that judges it reads the same observations. */
function scenario<T>(observe: (run: Run) => Promise<T>): (run: Run) => Promise<T> {
  const seen = new WeakMap<Run, Promise<T>>();
  return (run) => {
    let observed = seen.get(run);
    if (!observed) {
      observed = observe(run);
      seen.set(run, observed);
    }
    return observed;
  };
}

/** Two calls without a key: do their results show each execution? */
const baseline = scenario(async (run) => {
  const first = await run.call({});
  const second = await run.call({});
  return { first, second, distinguishable: first.kind !== 'error' && !same(first, second) };
});

/** A keyed call (the inputs' arguments unless `original` says otherwise), then the same key with `retry`. */
function keyedPair(
  retry: (run: Run) => Omit<CallSpec, 'key'>,
  original: (run: Run) => Omit<CallSpec, 'key'> = () => ({}),
) {
  return scenario(async (run) => {
    const key = randomUUID();
    const first = await run.call({ ...original(run), key });
    return { key, first, second: await run.call({ ...retry(run), key }) };
  });
}

// --- Reading outcomes ---

/** Canonical JSON (keys sorted), so "the same response" means the same parsed value. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isObject(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'undefined';
}

function same(a: Call, b: Call): boolean {
  return a.kind === b.kind && canonical(a.value) === canonical(b.value);
}

function errorData(call: Call): { type?: unknown; idempotencyKey?: unknown } {
  const data = isObject(call.value) ? call.value.data : undefined;
  return isObject(data) ? data : {};
}

/** A short, readable account of one answer. */
export function describe(call: Call): string {
  const value = isObject(call.value) ? call.value : {};
  if (call.kind === 'error') {
    const type = errorData(call).type;
    return `error ${String(value.code)} ${typeof type === 'string' ? type : JSON.stringify(value.message)}`;
  }
  const content = Array.isArray(value.content) ? value.content[0] : undefined;
  const text = isObject(content) && typeof content.text === 'string' ? content.text : undefined;
  const shown = text ?? canonical(value.structuredContent ?? value);
  const short = shown.length > 60 ? `${shown.slice(0, 57)}…` : shown;
  return call.kind === 'tool error' ? `isError "${short}"` : `"${short}"`;
}

const ms = (from: number, to: number) => `${Math.round(to - from)} ms`;

function isIdempotencyError(call: Call): boolean {
  const type = errorData(call).type;
  return type === IdempotencyErrorType.conflict || type === IdempotencyErrorType.inProgress;
}

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
  if (isObject(value)) {
    const entries = Object.entries(value);
    if (how.reverseKeys) entries.reverse();
    return `${open}${entries.map(([k, v]) => `${write(k, how)}${colon}${write(v, how)}`).join(comma)}${close}`;
  }
  return JSON.stringify(value);
}

/** Every value (and object key) in `value`, depth first. */
function* leaves(value: unknown): Generator<unknown> {
  if (Array.isArray(value)) for (const v of value) yield* leaves(v);
  else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) {
      yield k;
      yield* leaves(v);
    }
  } else yield value;
}

function* objects(value: unknown): Generator<Record<string, unknown>> {
  if (Array.isArray(value)) for (const v of value) yield* objects(v);
  else if (isObject(value)) {
    yield value;
    for (const v of Object.values(value)) yield* objects(v);
  }
}

/** Another spelling of the same number: `1` → `1.0`, `1.5` → `1.50`, `1e+21` → `1E+21`. */
function respell(n: number): string {
  const text = JSON.stringify(n);
  if (text.includes('e')) return text.replace('e', 'E');
  return text.includes('.') ? `${text}0` : `${text}.0`;
}

/** Every character as a `\uXXXX` escape: the same string once parsed. */
function escapeAll(s: string): string {
  return `"${[...s].map((c) => [...c].map((u) => `\\u${u.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')).join('')}"`;
}

/** The other Unicode normalisation form, where it differs: distinct strings once parsed. */
const renormalise = (s: string) => (s.normalize('NFD') !== s ? s.normalize('NFD') : s.normalize('NFC'));

/** The inputs' arguments with their first number, string or boolean changed. */
function otherArguments(args: Record<string, unknown>): Record<string, unknown> | undefined {
  let changed = false;
  const change = (value: unknown): unknown => {
    if (changed) return value;
    if (Array.isArray(value)) return value.map(change);
    if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, change(v)]));
    const other =
      typeof value === 'number'
        ? value + 1
        : typeof value === 'string'
          ? `${value}-other`
          : typeof value === 'boolean'
            ? !value
            : undefined;
    if (other === undefined) return value;
    changed = true;
    return other;
  };
  const result = change(args);
  return changed && isObject(result) ? result : undefined;
}

// --- Judging the shapes of observation the checks share ---

/** An equivalent retry must get the stored result, not a new execution and not a rejection. */
async function judgeEquivalent(
  run: Run,
  variant: (args: Record<string, unknown>) => string | null,
): Promise<Verdict> {
  const { distinguishable } = await baseline(run);
  const { first, second } = await equivalentPair(variant)(run);
  if (first.kind === 'error') return { notCheckable: `the keyed original failed: ${describe(first)}` };
  const argumentsText = variant(run.inputs.arguments);
  const sent = argumentsText === null ? 'no arguments member' : argumentsText;
  if (same(first, second)) {
    if (!distinguishable) return { notCheckable: unjudgeable };
    return { holds: true, observed: `retry with ${sent} replayed ${describe(first)}` };
  }
  const what = second.kind === 'error' ? 'rejected it' : 'executed it again';
  return {
    holds: false,
    observed: `retry with ${sent}: ${what}, ${describe(second)} (original ${describe(first)})`,
  };
}

/** A retry with the same key and a different request must be rejected: neither executed nor replayed. */
async function judgeConflict(run: Run, pair: (run: Run) => Promise<Pair>): Promise<Verdict> {
  const { first, second } = await pair(run);
  if (first.kind === 'error') return { notCheckable: `the keyed original failed: ${describe(first)}` };
  if (second.kind === 'error') return { holds: true, observed: `rejected: ${describe(second)}` };
  const what = same(first, second) ? 'returned the stored result' : 'executed it';
  return { holds: false, observed: `${what}: ${describe(second)} (original ${describe(first)})` };
}

const unjudgeable =
  'the two calls without a key gave the same result, so a replay cannot be told from a re-execution';

const otherArgs = (run: Run) => otherArguments(run.inputs.arguments);

type Pair = { key: string; first: Call; second: Call };

/** One keyed pair per spelling, made once per run whichever check asks first. */
const equivalentPairs = new Map<
  (args: Record<string, unknown>) => string | null,
  (run: Run) => Promise<Pair>
>();
function equivalentPair(variant: (args: Record<string, unknown>) => string | null) {
  let pair = equivalentPairs.get(variant);
  if (!pair) {
    pair = keyedPair((run) => ({ argumentsText: variant(run.inputs.arguments) }));
    equivalentPairs.set(variant, pair);
  }
  return pair;
}

const replayPair = keyedPair(() => ({}));
const conflictArgumentsPair = keyedPair((run) => ({ argumentsText: JSON.stringify(otherArgs(run)) }));
const conflictToolPair = keyedPair((run) => ({ tool: run.inputs.otherTool }));
const unicodePair = keyedPair((run) => ({
  argumentsText: write(run.inputs.arguments, { string: (s) => JSON.stringify(renormalise(s)) }),
}));
const scopePair = keyedPair((run) => ({ caller: run.inputs.other }));
const errorsPair = keyedPair(
  (run) => ({ argumentsText: JSON.stringify(run.inputs.errorArguments) }),
  (run) => ({ argumentsText: JSON.stringify(run.inputs.errorArguments) }),
);

const reorderKeys = (args: Record<string, unknown>) => write(args, { reverseKeys: true });
const addWhitespace = (args: Record<string, unknown>) => write(args, { spaced: true });
const respellNumbers = (args: Record<string, unknown>) => write(args, { number: respell });
const escapeStrings = (args: Record<string, unknown>) => write(args, { string: escapeAll });
const leaveOut = () => null;

/** The in-progress scenario: a slow keyed call, and the same key again while it runs. */
const inProgress = scenario(async (run) => {
  const slow = run.inputs.slowArguments;
  if (!slow) return undefined;
  const key = randomUUID();
  const argumentsText = JSON.stringify(slow);
  const original = run.call({ argumentsText, key });
  let originalDone: number | undefined;
  original.then(
    (call) => (originalDone = call.answer.at),
    () => {},
  );
  await new Promise((resolve) => setTimeout(resolve, DUPLICATE_DELAY_MS));
  const tooFast = originalDone !== undefined;
  const duplicate = run.call({ argumentsText, key });
  return { key, tooFast, original: await original, duplicate: await duplicate };
});

const needsSlow = {
  notApplicable: 'needs --slow-arguments (a call slow enough to still run when its duplicate arrives)',
};

type InProgress = NonNullable<Awaited<ReturnType<typeof inProgress>>>;

async function inProgressVerdict(run: Run, judge: (observed: InProgress) => Verdict): Promise<Verdict> {
  const observed = await inProgress(run);
  if (!observed) return needsSlow;
  if (observed.tooFast) {
    return {
      notCheckable: `the original finished within ${DUPLICATE_DELAY_MS} ms, before its duplicate was sent`,
    };
  }
  return judge(observed);
}

// --- The checks ---

interface Rule {
  id: string;
  section: string;
  severity: Severity;
  sentence: string;
  judge: (run: Run) => Promise<Verdict>;
}

const notCheckable = (reason: string) => async (): Promise<Verdict> => ({ notCheckable: reason });

const CAPABILITY = 'Capability declaration';
const REPEATED = 'Server behavior on a repeated key';
const EQUIVALENCE = 'Request equivalence';
const SECURITY = 'Security Implications';

export const RULES: readonly Rule[] = [
  {
    id: 'capability.advertised',
    section: CAPABILITY,
    severity: 'failure',
    sentence:
      'This SEP introduces the `tools.idempotency` capability, discoverable via `server/discover` (SEP-2575), rather than treating `idempotencyKey` as a bare optional field with no negotiation',
    judge: async (run) => {
      const tools = isObject(run.peer.capabilities) ? run.peer.capabilities.tools : undefined;
      const found = isObject(tools) ? tools.idempotency : undefined;
      const where = `in the ${run.peer.discoveredBy} result`;
      if (found === undefined)
        return { holds: false, observed: `no tools.idempotency ${where}: tools = ${JSON.stringify(tools)}` };
      return { holds: isObject(found), observed: `tools.idempotency = ${JSON.stringify(found)} ${where}` };
    },
  },
  {
    id: 'in-progress.not-executed',
    section: REPEATED,
    severity: 'failure',
    sentence:
      'If a request bearing the same key is still executing […] the server MUST NOT begin a second execution of the tool for the duplicate request',
    judge: (run) =>
      inProgressVerdict(run, ({ original, duplicate }) => {
        if (original.kind !== 'error' && duplicate.kind !== 'error' && !same(original, duplicate)) {
          return {
            holds: false,
            observed: `both executed: ${describe(original)}, then ${describe(duplicate)}`,
          };
        }
        return { holds: true, observed: `one execution; the duplicate got ${describe(duplicate)}` };
      }),
  },
  {
    id: 'in-progress.not-blocked',
    section: REPEATED,
    severity: 'failure',
    sentence: 'and MUST NOT block the duplicate request indefinitely waiting for the original to finish.',
    judge: (run) =>
      inProgressVerdict(run, ({ original, duplicate }) => {
        const took = `answered after ${ms(duplicate.sentAt, duplicate.answer.at)}`;
        if (duplicate.answer.at < original.answer.at) {
          return {
            holds: true,
            observed: `${took}, while the original ran (${ms(original.sentAt, original.answer.at)})`,
          };
        }
        if (duplicate.kind !== 'error' && !same(original, duplicate)) {
          return { holds: true, observed: `${took}: it executed on its own (see in-progress.not-executed)` };
        }
        return { holds: false, observed: `${took}, only once the original had finished: it waited for it` };
      }),
  },
  {
    id: 'in-progress.data',
    section: REPEATED,
    severity: 'warning',
    sentence:
      'the server SHOULD reject the duplicate immediately with an error indicating a request with this key is already in progress […] servers SHOULD populate `error.data` with a structured value identifying this specific failure mode (for example `{"type": "idempotency_key_in_progress", "idempotencyKey": "<the key>"}`)',
    judge: (run) =>
      inProgressVerdict(run, ({ key, original, duplicate }) => {
        const data = errorData(duplicate);
        const immediate = duplicate.answer.at < original.answer.at;
        const holds =
          immediate && data.type === IdempotencyErrorType.inProgress && data.idempotencyKey === key;
        return {
          holds,
          observed: `the duplicate got ${describe(duplicate)}${immediate ? '' : ' (after the original)'}`,
        };
      }),
  },
  {
    id: 'replay.not-executed',
    section: REPEATED,
    severity: 'failure',
    sentence:
      "If the new request's arguments are equivalent to the arguments of a completed original call […], the server MUST NOT execute the tool again.",
    judge: async (run) => {
      const { distinguishable } = await baseline(run);
      const { first, second } = await replayPair(run);
      if (first.kind === 'error') return { notCheckable: `the keyed call failed: ${describe(first)}` };
      if (same(first, second)) {
        return distinguishable
          ? { holds: true, observed: `the retry got ${describe(second)}, no new execution` }
          : { notCheckable: unjudgeable };
      }
      if (second.kind === 'error') return { holds: true, observed: `not executed: ${describe(second)}` };
      return { holds: false, observed: `executed again: ${describe(first)}, then ${describe(second)}` };
    },
  },
  {
    id: 'replay.identical',
    section: REPEATED,
    severity: 'failure',
    sentence:
      'It MUST return the previously produced result — whether that result was a successful response or an error response',
    judge: async (run) => {
      const { first, second } = await replayPair(run);
      if (first.kind === 'error') return { notCheckable: `the keyed call failed: ${describe(first)}` };
      const bytes = first.answer.text.replace(/"id":\d+/, '') === second.answer.text.replace(/"id":\d+/, '');
      if (same(first, second)) {
        return {
          holds: true,
          observed: `${describe(second)}, ${bytes ? 'byte for byte but the id' : 'the same parsed value'}`,
        };
      }
      return { holds: false, observed: `original ${describe(first)}, retry ${describe(second)}` };
    },
  },
  {
    id: 'errors.replayed',
    section: REPEATED,
    severity: 'failure',
    sentence:
      'It MUST return the previously produced result — whether that result was a successful response or an error response — unless that result has since expired',
    judge: async (run) => {
      const errorArguments = run.inputs.errorArguments;
      if (!errorArguments)
        return { notApplicable: 'needs --error-arguments (arguments that make the call fail)' };
      const argumentsText = JSON.stringify(errorArguments);
      const { first, second } = await errorsPair(run);
      if (first.kind === 'success')
        return { notCheckable: `--error-arguments did not fail: ${describe(first)}` };
      if (!same(first, second))
        return { holds: false, observed: `ran again: ${describe(first)}, then ${describe(second)}` };
      // Only now are unkeyed failures worth their calls: do they show each execution?
      const a = await run.call({ argumentsText });
      const b = await run.call({ argumentsText });
      if (same(a, b))
        return {
          notCheckable: `failures without a key are all alike (${describe(a)}): replay and re-execution look the same`,
        };
      return { holds: true, observed: `the stored failure was replayed: ${describe(second)}` };
    },
  },
  {
    id: 'conflict.other-arguments',
    section: REPEATED,
    severity: 'failure',
    sentence:
      "If the new request's arguments differ from the arguments of the original call, the server MUST reject the request […]. The server MUST NOT execute the tool with the new arguments, and MUST NOT silently return the cached result from the original, differently-parameterized call.",
    judge: async (run) => {
      const other = otherArgs(run);
      if (!other) return { notApplicable: 'the arguments have no number, string or boolean to change' };
      return judgeConflict(run, conflictArgumentsPair);
    },
  },
  {
    id: 'conflict.other-tool',
    section: REPEATED,
    severity: 'failure',
    sentence:
      'Two requests bearing the same `idempotencyKey` are equivalent if they specify the same tool name and equivalent arguments as parsed JSON values.',
    judge: async (run) => {
      const tool = run.inputs.otherTool;
      if (!tool)
        return {
          notApplicable: 'needs --other-tool (a second tool that is safe to call with these arguments)',
        };
      return judgeConflict(run, conflictToolPair);
    },
  },
  {
    id: 'conflict.data',
    section: REPEATED,
    severity: 'warning',
    sentence:
      'servers SHOULD populate the standard JSON-RPC `error.data` field […] with a structured value identifying the failure as an idempotency key conflict, for example `{"type": "idempotency_key_conflict", "idempotencyKey": "<the key>"}`.',
    judge: async (run) => {
      const pairs: Pair[] = [];
      if (otherArgs(run)) pairs.push(await conflictArgumentsPair(run));
      if (run.inputs.otherTool) pairs.push(await conflictToolPair(run));
      if (pairs.length === 0) return { notApplicable: 'no conflict could be provoked (see conflict.*)' };
      const rejections = pairs.filter((p) => p.first.kind !== 'error' && p.second.kind === 'error');
      if (rejections.length === 0)
        return { notCheckable: 'there was no rejection to inspect (see conflict.*)' };
      const wrong = rejections.filter(({ key, second }) => {
        const data = errorData(second);
        return data.type !== IdempotencyErrorType.conflict || data.idempotencyKey !== key;
      });
      const shown = [...new Set((wrong.length > 0 ? wrong : rejections).map((p) => describe(p.second)))];
      return {
        holds: wrong.length === 0,
        observed: `${rejections.length} rejection(s): ${shown.join('; ')}`,
      };
    },
  },
  {
    id: 'equivalence.key-order',
    section: EQUIVALENCE,
    severity: 'failure',
    sentence:
      '`{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` MUST be treated as equivalent despite differing key order',
    judge: async (run) => {
      if (![...objects(run.inputs.arguments)].some((o) => Object.keys(o).length > 1)) {
        return { notApplicable: 'the arguments have no object with two members to reorder' };
      }
      return judgeEquivalent(run, reorderKeys);
    },
  },
  {
    id: 'equivalence.whitespace',
    section: EQUIVALENCE,
    severity: 'failure',
    sentence:
      'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
    judge: (run) => judgeEquivalent(run, addWhitespace),
  },
  {
    id: 'equivalence.number-spelling',
    section: EQUIVALENCE,
    severity: 'failure',
    sentence:
      'numeric values representing the same mathematical value MUST compare equal — `1` and `1.0` MUST be treated as the same value.',
    judge: async (run) => {
      if (![...leaves(run.inputs.arguments)].some((v) => typeof v === 'number')) {
        return { notApplicable: 'the arguments have no number to spell another way' };
      }
      return judgeEquivalent(run, respellNumbers);
    },
  },
  {
    id: 'equivalence.string-escapes',
    section: EQUIVALENCE,
    severity: 'failure',
    sentence:
      'two differently-escaped encodings of the same string (for example, a literal character versus its `\\uXXXX` escape) MUST be treated as equivalent, since both parse to the same value.',
    judge: async (run) => {
      if (![...leaves(run.inputs.arguments)].some((v) => typeof v === 'string')) {
        return { notApplicable: 'the arguments have no string (or member name) to escape' };
      }
      return judgeEquivalent(run, escapeStrings);
    },
  },
  {
    id: 'equivalence.absent-arguments',
    section: EQUIVALENCE,
    // The SEP does not say whether a missing `arguments` and `{}` are one parsed value; a tool
    // receives the same input either way, so a difference is reported, not failed.
    severity: 'warning',
    sentence:
      'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
    judge: async (run) => {
      if (Object.keys(run.inputs.arguments).length > 0) {
        return { notApplicable: 'only for a call whose arguments are {} (absent vs {})' };
      }
      return judgeEquivalent(run, leaveOut);
    },
  },
  {
    id: 'equivalence.no-unicode-normalization',
    section: EQUIVALENCE,
    severity: 'failure',
    sentence:
      'This SEP does not require Unicode normalization (e.g., NFC/NFD) beyond what parsing already resolves; two strings that are distinct after parsing remain distinct for this comparison.',
    judge: async (run) => {
      if (![...leaves(run.inputs.arguments)].some((v) => typeof v === 'string' && renormalise(v) !== v)) {
        return {
          notApplicable: 'the arguments have no string whose NFC and NFD forms differ (such as "café")',
        };
      }
      return judgeConflict(run, unicodePair);
    },
  },
  {
    id: 'equivalence.tool-implementation',
    section: EQUIVALENCE,
    severity: 'note',
    sentence:
      "A server that replaces a tool's implementation while a previously-recorded call remains within its retention window will still replay that call's original recorded result",
    judge: notCheckable('a client cannot replace the tool between a call and its retry'),
  },
  {
    id: 'retention.bounded',
    section: 'Retention',
    severity: 'failure',
    sentence: 'A server MUST retain enough state to answer a repeated key within a bounded window',
    judge: notCheckable(
      "the window is the server's choice and not advertised; replay.* show retention over seconds, and expiry would mean waiting the window out",
    ),
  },
  {
    id: 'retention.documented',
    section: 'Retention',
    severity: 'warning',
    sentence: 'Servers SHOULD document their retention window through server-level documentation',
    judge: notCheckable('documentation is not on the wire'),
  },
  {
    id: 'ordering.crash',
    section: 'Implementation ordering is intentionally unspecified',
    severity: 'note',
    sentence:
      'A server that executes a side effect and crashes before persisting the corresponding idempotency record will, if retried, execute that side effect again',
    judge: notCheckable('it would take crashing the server between the side effect and its record'),
  },
  {
    id: 'stateless.shared-store',
    section: 'Relationship to the 2026-07-28 stateless core and MRTR',
    severity: 'failure',
    sentence:
      "A server implementing this SEP in a horizontally-scaled, stateless deployment MUST therefore make its idempotency record store visible to every instance handling that server's traffic",
    judge: notCheckable(
      'one URL reaches whichever instance serves it; a client cannot tell instances apart (behind a balancer, replay.* pass only by luck if the store is not shared)',
    ),
  },
  {
    id: 'no-key.executes-every-time',
    section: 'Backward Compatibility',
    severity: 'failure',
    sentence:
      'A client MAY omit `idempotencyKey` entirely and receive the same behavior as before this proposal.',
    judge: async (run) => {
      const { first, second, distinguishable } = await baseline(run);
      if (first.kind === 'error') return { notCheckable: `the call failed: ${describe(first)}` };
      if (distinguishable) return { holds: true, observed: `${describe(first)}, then ${describe(second)}` };
      return {
        notCheckable: `both gave ${describe(first)}: either the result does not show each execution (choose a --tool whose result changes, such as a balance) or calls without a key were deduplicated`,
      };
    },
  },
  {
    id: 'scope.per-caller',
    section: SECURITY,
    severity: 'failure',
    sentence:
      'Servers MUST scope their idempotency records to whatever authorization boundary already governs access to the underlying tool call […] so that a key is only ever matched against a prior request from the same authorized caller.',
    judge: async (run) => {
      const other = run.inputs.other;
      if (run.inputs.transport === 'stdio') {
        return {
          notApplicable: "over stdio the boundary is the process's local user: there is no second caller",
        };
      }
      if (!other) return { notApplicable: "needs --other-header (a second caller's credentials)" };
      const { distinguishable } = await baseline(run);
      const { first, second } = await scopePair(run);
      if (first.kind === 'error')
        return { notCheckable: `the first caller's call failed: ${describe(first)}` };
      if (isIdempotencyError(second))
        return { holds: false, observed: `matched against the first caller's record: ${describe(second)}` };
      if (second.kind === 'error')
        return { notCheckable: `the other caller's call failed: ${describe(second)}` };
      if (!same(first, second))
        return { holds: true, observed: `the other caller's call executed: ${describe(second)}` };
      if (!distinguishable) return { notCheckable: unjudgeable };
      return {
        holds: false,
        observed: `the other caller got the first caller's stored result: ${describe(second)}`,
      };
    },
  },
  {
    id: 'authorization.at-replay',
    section: SECURITY,
    severity: 'failure',
    sentence:
      'A replayed response MUST still be subject to whatever authorization check would ordinarily govern access to it',
    judge: notCheckable(
      'it needs a credential whose authorization changes between the call and its replay; the checker only has the credentials it is given',
    ),
  },
  {
    id: 'security.resource-limits',
    section: SECURITY,
    severity: 'warning',
    sentence:
      'Servers SHOULD apply the same rate-limiting and resource-quota mechanisms they already apply to other server-side state (e.g., Tasks) to their idempotency records',
    judge: notCheckable(
      'seeing a quota means flooding the server with keys; the checker makes only the calls its checks need',
    ),
  },
];

/** Runs every check in order. Each scenario runs once, whichever check needs it first. */
export async function runChecks(run: Run): Promise<CheckResult[]> {
  await baseline(run); // first: every other judgement leans on it
  const results: CheckResult[] = [];
  for (const rule of RULES) {
    const verdict = await rule.judge(run).catch((error: unknown) => ({
      notCheckable: `the exchange failed: ${error instanceof Error ? error.message : String(error)}`,
    }));
    const { id, section, severity, sentence } = rule;
    results.push({ id, section, severity, sentence, ...statusOf(verdict, severity) });
  }
  return results;
}

function statusOf(verdict: Verdict, severity: Severity): { status: Status; observed: string } {
  if ('notApplicable' in verdict) return { status: 'not applicable', observed: verdict.notApplicable };
  if ('notCheckable' in verdict) return { status: 'not checkable', observed: verdict.notCheckable };
  if (verdict.holds) return { status: 'passed', observed: verdict.observed };
  return { status: severity === 'failure' ? 'failed' : 'warned', observed: verdict.observed };
}
