// --- Exploring: generated histories of calls, each judged against a model of what the SEP requires ---
//
// The rules (`rules.ts`) each test one example of their dimension; a bug that lives between the
// examples passes them. The explorer generates histories over every dimension at once: keys (their
// length up to the server's limit, long shared prefixes, case, spaces, Unicode forms), arguments
// (each field at each depth changed in value or type, the whole respelled), timing (a second call
// under a key sent with the first, a little after, or while a slow one runs), record pressure (many
// keys between a call and its retry), time (retries of keys made early in the run), and the
// connection a call goes over (a fresh HTTP session, a second credential of the same caller, the
// other protocol era). After each step a call without a key reads the counter, and a model of the
// SEP says how many executions the step may have caused and what its answers may be.
//
// A history that breaks the model is shrunk (fast-check) to the smallest one that still does,
// re-run against the server each time, and printed as a transcript a user can replay: every
// request as sent, what came back, and what the counter said. `--seed` makes a run repeatable,
// `--budget` bounds it (histories, and the shrinking after a failure).

import { randomInt, randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { canonical, describe, errorData, SEP_ERROR, same } from './answers.js';
import { type Counter, executionsBetween, reading } from './effect.js';
import { type Args, type Call, type Run, sleep } from './run.js';
import { ESCAPINGS, renormalise, respellings, write } from './spellings.js';
import { isObject, type Peer } from './wire.js';

// --- What a history is made of ---

/** The connection a call goes over; all of them are the same caller. */
type Conn = 'main' | 'fresh-session' | 'same-caller' | 'other-era';

/** How a call's arguments relate to the key's first call. */
type Variant =
  | { kind: 'same' }
  | { kind: 'respelled'; how: Respelling; which: number }
  | { kind: 'different'; how: 'value' | 'type' | 'normalisation' | 'member'; path: number }
  | { kind: 'other-tool' };
type Respelling = 'key-order' | 'whitespace' | 'number-spelling' | 'string-escapes';

/** How a key slot's key is made, afresh at every run of the history. */
type KeyShape =
  | { kind: 'accepted' }
  | { kind: 'length'; length: number }
  | { kind: 'non-ascii' }
  | { kind: 'shared-prefix' | 'case' | 'spaced' | 'nfd'; of: number };

type Step =
  | { kind: 'call'; slot: number; variant: Variant; conn: Conn }
  /** Two calls under one key: the second `delay` ms after the first (a slow one, if `slow`). */
  | { kind: 'pair'; slot: number; slow: boolean; delay: 0 | 20 | 100; variant: Variant; conn: Conn }
  /** `count` calls under fresh keys, each executed once: other records between a call and its retry. */
  | { kind: 'pressure'; count: number }
  /** A retry of one of the keys made when exploring began, tens of seconds ago. */
  | { kind: 'late'; which: number; conn: Conn };

export interface History {
  shapes: KeyShape[];
  steps: Step[];
}

const SLOTS = 3;

// --- What the explorer is given, and what it reports ---

export interface ExploreOptions {
  /** Histories to generate; 0 explores nothing. */
  budget: number;
  seed: number;
  /** Stop generating once this many ms have gone by (a default run's bound); shrinking still ends. */
  timeLimitMs?: number;
  /** A new connection of the same caller over HTTP: a fresh session. Absent over stdio. */
  reconnect?: () => Promise<Peer>;
  /** The same caller with a second credential (`--same-caller-header`). */
  sameCaller?: Peer;
  /** The same server in the other protocol era, where it serves both. */
  otherEra?: Peer;
}

export interface Exploration {
  seed: number;
  budget: number;
  /** Histories run (shrinking's re-runs not counted), and tools/call requests made. */
  histories: number;
  calls: number;
  /** Histories left unjudged: the counter could not be read, or the exchange broke. */
  unjudged: number;
  /** Set when the time limit stopped the run before its budget: the histories run by then. */
  stoppedAt?: number;
  failure?: {
    rule: string;
    observed: string;
    /** The shrunk history as it was sent, a line per request and per reading. */
    transcript: string[];
    /** How many steps the first failing history had, and the shrunk one. */
    steps: { found: number; shrunk: number };
  };
  /** What the explorer could not vary, and why (no --slow-arguments, stdio). */
  notes: string[];
}

/** A history that broke the model: the rule, what was seen, and the calls as a user replays them. */
interface Finding {
  rule: string;
  observed: string;
}

// --- The model: what each call may do, given the history so far ---

interface Kept {
  key: string;
  slot: number;
  /** Tool name and parsed arguments: what "equivalent" compares. */
  fingerprint: string;
  /** The answer of the call that executed: what a replay must be. */
  stored: Call;
  /** The equivalence rule its spelling tests, if it was respelled: a plain retry then tests it too. */
  spelling?: string;
  at: number;
}

/** The explorer's whole state for one run of one history. */
interface Ctx {
  run: Run;
  counter: Counter;
  options: ExploreOptions;
  keys: string[];
  shapes: KeyShape[];
  records: Map<string, Kept>;
  /** Keys the server refused (its own limits): a later use of one is a first use again. */
  refusedKeys: Set<string>;
  /** Keys made fresh under pressure since each record: a record older than them has had company. */
  pressureSince: Map<string, number>;
  transcript: string[];
  probe: Call;
}

/** The keys made when exploring began, retried late in the run. */
interface Early {
  /** Retried already, by a history or a shrinking's re-run of it. */
  retried?: boolean;
  /** The run's keyed calls when it was made: how many came between it and its retry. */
  keyedCalls: number;
  key: string;
  fingerprint: string;
  stored: Call;
  at: number;
}

// --- Arguments ---

type Path = (string | number)[];

/** Every scalar in `value`, each by its path: the fields a different request changes, at every depth. */
function scalarPaths(value: unknown, path: Path = []): Path[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => scalarPaths(v, [...path, i]));
  if (isObject(value)) return Object.entries(value).flatMap(([k, v]) => scalarPaths(v, [...path, k]));
  return [path];
}

function at(value: unknown, path: Path): unknown {
  let node = value;
  for (const step of path) node = isObject(node) || Array.isArray(node) ? Reflect.get(node, step) : undefined;
  return node;
}

/** `value` with the scalar at `path` replaced by `change(old)`; `undefined` drops an object member. */
function replaced(value: unknown, path: Path, change: (old: unknown) => unknown): unknown {
  if (path.length === 0) return change(value);
  const [head, ...rest] = path;
  if (Array.isArray(value)) return value.map((v, i) => (i === head ? replaced(v, rest, change) : v));
  if (!isObject(value)) return value;
  const out: Args = {};
  for (const [k, v] of Object.entries(value)) {
    if (k !== head) out[k] = v;
    else {
      const next = replaced(v, rest, change);
      if (next !== undefined) out[k] = next;
    }
  }
  return out;
}

const changedValue = (old: unknown): unknown =>
  typeof old === 'number'
    ? old + 1
    : typeof old === 'string'
      ? `${old}-other`
      : typeof old === 'boolean'
        ? !old
        : old === null
          ? 0
          : 'other';
/** The same value as another JSON type: `1` → `"1"`, `"x"` → `["x"]`, `true` → `"true"`. */
const changedType = (old: unknown): unknown =>
  typeof old === 'number' || typeof old === 'boolean' || old === null ? String(old) : [old];

/** What a call with `variant` sends: its tool and its arguments as written, and what it means. */
interface Spelled {
  tool: string;
  text: string;
  parsed: unknown;
  what: string;
  /** The rule a server breaks by treating this call wrongly, where it is not the plain retry's. */
  rule?: string;
}

function spell(run: Run, base: Args, variant: Variant): Spelled {
  const tool = run.inputs.tool;
  const plain = JSON.stringify(base);
  switch (variant.kind) {
    case 'same':
      return { tool, text: plain, parsed: base, what: 'the same call' };
    case 'other-tool': {
      const other = run.inputs.otherTool;
      if (!other) return { tool, text: plain, parsed: base, what: 'the same call' };
      return {
        tool: other,
        text: plain,
        parsed: base,
        what: `${other}, another tool`,
        rule: 'conflict.other-tool',
      };
    }
    case 'respelled': {
      const i = variant.which % 3;
      const text =
        variant.how === 'key-order'
          ? write(base, { reverseKeys: true })
          : variant.how === 'whitespace'
            ? write(base, { spaced: true })
            : variant.how === 'number-spelling'
              ? write(base, { number: (n) => respellings(n)[i] ?? JSON.stringify(n) })
              : write(base, { string: ESCAPINGS[i] });
      if (text === plain) return { tool, text: plain, parsed: base, what: 'the same call' };
      return {
        tool,
        text,
        parsed: base,
        what: `the same arguments written another way (${variant.how})`,
        rule: `equivalence.${variant.how}`,
      };
    }
    case 'different': {
      const paths = scalarPaths(base).filter((p) => p.length > 0);
      const path = paths[variant.path % Math.max(1, paths.length)];
      if (!path) return { tool, text: plain, parsed: base, what: 'the same call' };
      const where = path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`)).join('');
      const old = at(base, path);
      let parsed: unknown;
      let what: string;
      let rule = 'conflict.other-arguments';
      if (variant.how === 'normalisation' && typeof old === 'string' && renormalise(old) !== old) {
        parsed = replaced(base, path, () => renormalise(old));
        what = `arguments${where} in its other Unicode normalisation form`;
        rule = 'equivalence.no-unicode-normalization';
      } else if (variant.how === 'type') {
        parsed = replaced(base, path, changedType);
        what = `arguments${where} as another JSON type (${JSON.stringify(at(parsed, path))})`;
      } else if (variant.how === 'member' && typeof path[path.length - 1] === 'string') {
        parsed = replaced(base, path, () => undefined);
        what = `arguments${where} left out`;
      } else {
        parsed = replaced(base, path, changedValue);
        what = `arguments${where} changed to ${JSON.stringify(at(parsed, path))}`;
      }
      return { tool, text: JSON.stringify(parsed), parsed, what, rule };
    }
  }
}

const fingerprintOf = (tool: string, parsed: unknown) => canonical([tool, parsed]);

/**
 * The stored answer again: the same value, or the same result as far as the tool wrote it (its
 * `content`, `structuredContent` and `isError`). A server writes the rest per protocol era (the
 * 2026-07-28 envelope's `resultType` and `_meta`), so a replay in the other era carries that era's.
 * `replay.identical` holds a replay on one connection to every byte.
 */
function alike(stored: Call, later: Call): boolean {
  if (same(stored, later)) return true;
  if (stored.kind === 'error' || stored.kind !== later.kind) return false;
  const body = ({ value }: Call) =>
    isObject(value)
      ? canonical([value.content, value.structuredContent, value.isError === true])
      : canonical(value);
  return body(stored) === body(later);
}

// --- Keys ---

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

function randomKey(length: number, used: Set<string>): string {
  for (let tries = 0; ; tries++) {
    const size = length + Math.floor(tries / 20);
    const key = Array.from({ length: size }, () => ALPHABET.charAt(randomInt(ALPHABET.length))).join('');
    if (!used.has(key)) return key;
  }
}

/** Each slot's key for this run of the history: fresh, but shaped as the history says. */
function keysFor(shapes: KeyShape[], used: Set<string>): string[] {
  const keys: string[] = [];
  for (const shape of shapes) {
    const base = 'of' in shape ? (keys[shape.of % Math.max(1, keys.length)] ?? randomUUID()) : '';
    let key: string;
    switch (shape.kind) {
      case 'accepted':
        key = randomUUID();
        break;
      case 'length':
        key = randomKey(shape.length, used);
        break;
      case 'non-ascii':
        key = `${randomUUID()}-café`;
        break;
      case 'shared-prefix':
        key = `${base.slice(0, -1)}${base.endsWith('x') ? 'y' : 'x'}`;
        break;
      case 'case': {
        const swapped = [...base]
          .map((c) => (c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()))
          .join('');
        key = swapped;
        break;
      }
      case 'spaced':
        key = ` ${base}`;
        break;
      case 'nfd':
        key = base.normalize('NFD') === base ? base.normalize('NFC') : base.normalize('NFD');
        break;
    }
    keys.push(key);
  }
  return keys;
}

/** The slot whose key a key is spelled from, as `keysFor` picks it. */
function baseSlot(ctx: Ctx, slot: number): number {
  const shape = ctx.shapes[slot];
  return shape && 'of' in shape ? shape.of % Math.max(1, slot) : slot;
}

/** How a key relates to another slot's: a spelling of it, for the report and for `key.opaque`. */
function kinship(ctx: Ctx, slot: number): string | undefined {
  const shape = ctx.shapes[slot];
  if (!shape || !('of' in shape)) return undefined;
  const of = baseSlot(ctx, slot);
  const names = {
    'shared-prefix': 'shares all but its last character with',
    case: 'is, in the other case,',
    spaced: 'is, after a space,',
    nfd: 'is, in another Unicode normalisation form,',
  } as const;
  return `${JSON.stringify(ctx.keys[slot])} ${names[shape.kind]} ${JSON.stringify(ctx.keys[of])}`;
}

// --- Generating histories ---

function arbitraries(run: Run, options: ExploreOptions, maxKeyLength: number) {
  const conns: Conn[] = ['main'];
  if (options.reconnect) conns.push('fresh-session');
  if (options.sameCaller) conns.push('same-caller');
  if (options.otherEra) conns.push('other-era');
  const conn = fc.constantFrom(...conns);
  const respelling = fc.constantFrom<Respelling>(
    'key-order',
    'whitespace',
    'number-spelling',
    'string-escapes',
  );
  const variant: fc.Arbitrary<Variant> = fc.oneof(
    { weight: 4, arbitrary: fc.constant<Variant>({ kind: 'same' }) },
    {
      weight: 2,
      arbitrary: fc.record({ kind: fc.constant('respelled' as const), how: respelling, which: fc.nat(2) }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('different' as const),
        how: fc.constantFrom('value' as const, 'type' as const, 'normalisation' as const, 'member' as const),
        path: fc.nat(31),
      }),
    },
    ...(run.inputs.otherTool ? [{ weight: 1, arbitrary: fc.constant<Variant>({ kind: 'other-tool' }) }] : []),
  );
  const slot = fc.nat(SLOTS - 1);
  const slow = run.inputs.slowArguments !== undefined;
  const step: fc.Arbitrary<Step> = fc.oneof(
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('call' as const), slot, variant, conn }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('pair' as const),
        slot,
        slow: slow ? fc.boolean() : fc.constant(false),
        delay: fc.constantFrom<0 | 20 | 100>(0, 20, 100),
        variant,
        conn,
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('pressure' as const),
        count: fc.integer({ min: 1, max: 12 }),
      }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('late' as const), which: fc.nat(1), conn }) },
  );
  const length = fc.oneof(
    fc.constantFrom(1, 2, 36, 64, maxKeyLength),
    fc.integer({ min: 1, max: maxKeyLength }),
  );
  const shape: fc.Arbitrary<KeyShape> = fc.oneof(
    { weight: 6, arbitrary: fc.constant<KeyShape>({ kind: 'accepted' }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('length' as const), length }) },
    { weight: 1, arbitrary: fc.constant<KeyShape>({ kind: 'non-ascii' }) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constantFrom('shared-prefix' as const, 'case' as const, 'spaced' as const, 'nfd' as const),
        of: fc.nat(SLOTS - 1),
      }),
    },
  );
  const shapes = fc.tuple(fc.constant<KeyShape>({ kind: 'accepted' }), shape, shape);
  return fc.record({ shapes, steps: fc.array(step, { minLength: 1, maxLength: 7 }) });
}

// --- Running a history ---

/** The connection a call goes over, made when first needed; a fresh session is new every time. */
async function peerFor(ctx: Ctx, conn: Conn): Promise<Peer> {
  const { run, options } = ctx;
  if (conn === 'main') return run.peer;
  if (conn === 'same-caller' && options.sameCaller) return options.sameCaller;
  if (conn === 'other-era' && options.otherEra) return options.otherEra;
  if (conn === 'fresh-session' && options.reconnect) return options.reconnect();
  return run.peer;
}

const CONN_WORDS: Record<Conn, string> = {
  main: '',
  'fresh-session': ' on a fresh HTTP session',
  'same-caller': ' with the --same-caller-header credentials (the same caller)',
  'other-era': ' in the other protocol era',
};

/** The request as a user replays it: its params, as sent. */
function request(tool: string, text: string | null, key: string | undefined): string {
  const members = [`"name":${JSON.stringify(tool)}`];
  if (text !== null) members.push(`"arguments":${text}`);
  if (key !== undefined) members.push(`"idempotencyKey":${JSON.stringify(key)}`);
  return `tools/call {${members.join(',')}}`;
}

/** One keyed call, written to the transcript. */
async function send(
  ctx: Ctx,
  {
    tool,
    text,
    key,
    conn,
    note = '',
  }: { tool: string; text: string; key: string; conn: Conn; note?: string },
): Promise<Call> {
  const caller = await peerFor(ctx, conn);
  const call = await ctx.run.call({ tool, argumentsText: text, key, caller });
  const number = ctx.transcript.length + 1;
  ctx.transcript.push(`${number}. ${request(tool, text, key)}${CONN_WORDS[conn]}${note} → ${describe(call)}`);
  return call;
}

/** A call without a key: how many executions since the last one, beyond its own. */
async function measure(
  ctx: Ctx,
  due: number,
): Promise<{ count: number | undefined; from: string; to: string }> {
  const before = ctx.probe;
  ctx.probe = await ctx.run.probe();
  const n = executionsBetween(ctx.counter, before, ctx.probe, due + 1);
  const [from, to] = [reading(ctx.counter, before), reading(ctx.counter, ctx.probe)];
  const number = ctx.transcript.length + 1;
  ctx.transcript.push(
    `${number}. ${request(ctx.run.inputs.tool, JSON.stringify(ctx.run.inputs.arguments), undefined)} (no key) → ${describe(ctx.probe)}: counter ${from} → ${to}`,
  );
  return { count: n === undefined ? undefined : n - 1, from, to };
}

const executions = (n: number) => `${n} execution${n === 1 ? '' : 's'}`;

/** What the counter said against what the model allowed, in words. */
function countWords(count: number, expected: number, m: { from: string; to: string }): string {
  return `the counter went ${m.from} → ${m.to} with the call without a key after it: ${executions(count)} where ${executions(expected)} ${expected === 1 ? 'was' : 'were'} due`;
}

/** An answer that refuses a key under the server's own limits (too long, not a UUID, a full store). */
function limitRefusal(call: Call, shape: KeyShape | undefined): boolean {
  if (call.kind !== 'error') return false;
  const { type } = errorData(call);
  if (type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress) return false;
  return (typeof type === 'string' && type.startsWith('idempotency_')) || shape?.kind !== 'accepted';
}

class Unjudged extends Error {}

/** Runs one history against the server; the first call the model does not allow is the finding. */
async function perform(ctx: Ctx, history: History, early: Early[]): Promise<Finding | undefined> {
  const { run } = ctx;
  for (const step of history.steps) {
    if (step.kind === 'pressure') {
      for (let i = 0; i < step.count; i++) {
        const key = randomUUID();
        await send(ctx, {
          tool: run.inputs.tool,
          text: JSON.stringify(run.inputs.arguments),
          key,
          conn: 'main',
        });
      }
      const m = await measure(ctx, step.count);
      if (m.count === undefined) throw new Unjudged();
      // Refused keys (a full store) execute nothing: fewer is allowed, more is not.
      if (m.count > step.count)
        return {
          rule: 'new-key.executes',
          observed: `${step.count} calls with fresh keys: ${countWords(m.count, step.count, m)}`,
        };
      for (const key of ctx.records.keys())
        ctx.pressureSince.set(key, (ctx.pressureSince.get(key) ?? 0) + step.count);
      continue;
    }
    if (step.kind === 'late') {
      // Each early key is retried once: a retry that executed made a record of its own.
      const record = early.find((e) => !e.retried);
      if (!record) continue;
      record.retried = true;
      const seconds = Math.round((performance.now() - record.at) / 1000);
      const since = `${seconds} s and ${run.keyedCalls - record.keyedCalls} keyed calls after its original`;
      // The original, made before this history, heads its transcript: a replay starts with it.
      ctx.transcript.push(
        `${ctx.transcript.length + 1}. ${request(run.inputs.tool, JSON.stringify(run.inputs.arguments), record.key)} (when exploring began, ${seconds} s before the next line) → ${describe(record.stored)}`,
      );
      const call = await send(ctx, {
        tool: run.inputs.tool,
        text: JSON.stringify(run.inputs.arguments),
        key: record.key,
        conn: step.conn,
        note: ` (a retry of a key first used ${seconds} s earlier, when exploring began)`,
      });
      const m = await measure(ctx, 0);
      if (m.count === undefined) throw new Unjudged();
      if (m.count !== 0)
        return {
          rule: 'retention.per-key',
          observed: `a retry ${since} executed again: ${countWords(m.count, 0, m)}; the record was gone long before the run ended`,
        };
      if (!alike(record.stored, call))
        return {
          rule: 'replay.identical',
          observed: `a retry ${since} got ${describe(call)}, not the stored ${describe(record.stored)}`,
        };
      continue;
    }
    const finding = step.kind === 'call' ? await single(ctx, step) : await pair(ctx, step);
    if (finding) return finding;
  }
  return undefined;
}

/** The model's view of a slot: its key, its record if it has one, and how a call now relates to it. */
function lookup(ctx: Ctx, slot: number) {
  const key = ctx.keys[slot] ?? '';
  const record = ctx.refusedKeys.has(key) ? undefined : ctx.records.get(key);
  return { key, record, shape: ctx.shapes[slot] };
}

/** The rule a retry that executed again breaks, by what set it apart from a plain retry. */
function retryRule(
  ctx: Ctx,
  key: string,
  conn: Conn,
  rule: string | undefined,
): { rule: string; why: string } {
  const pressure = ctx.pressureSince.get(key) ?? 0;
  if (pressure > 0)
    return { rule: 'retention.per-key', why: `after ${pressure} other keys, its record was gone` };
  if (conn === 'fresh-session')
    return { rule: 'replay.not-executed', why: 'a new session forgot the record' };
  if (conn === 'same-caller')
    return { rule: 'replay.not-executed', why: "the same caller's second credential found no record" };
  if (conn === 'other-era') return { rule: 'replay.not-executed', why: 'the other era found no record' };
  if (rule?.startsWith('equivalence.')) return { rule, why: 'an equivalent request was taken for a new one' };
  return { rule: 'replay.not-executed', why: 'the retry executed again' };
}

/**
 * The rule an equivalent retry's wrong answer breaks. Refused with an error, it was taken for another
 * request: the rule of the spelling that set it apart from the original, whichever of the two was
 * respelled. Answered otherwise, it is a replay that is not the stored answer.
 */
function replayRule(record: Kept, call: Call, spelling: string | undefined): string {
  const respelled = spelling ?? record.spelling;
  return call.kind === 'error' && respelled ? respelled : 'replay.identical';
}

/**
 * What is wrong with a later call's answer under a used key, nothing having executed: a retry must
 * get the stored answer, another request an error (a conflict, or in progress while it ran).
 */
function laterAnswerFault(record: Kept, call: Call, sent: Spelled, where: string): Finding | undefined {
  if (fingerprintOf(sent.tool, sent.parsed) === record.fingerprint) {
    if (alike(record.stored, call)) return undefined;
    return {
      rule: replayRule(record, call, sent.rule),
      observed: `${sent.what} under a used key${where} got ${describe(call)}, not the stored ${describe(record.stored)} (nothing executed)`,
    };
  }
  if (call.kind === 'error') return undefined;
  return {
    rule: sent.rule ?? 'conflict.other-arguments',
    observed: `${sent.what} under a used key${where} got ${describe(call)}${alike(record.stored, call) ? ', the stored result of the other request' : ''}, where a JSON-RPC error belongs (nothing executed)`,
  };
}

async function single(ctx: Ctx, step: Extract<Step, { kind: 'call' }>): Promise<Finding | undefined> {
  const { run } = ctx;
  const { key, record, shape } = lookup(ctx, step.slot);
  const base = run.inputs.arguments;
  // A key's first use is always the call itself (respelled at most): another tool or other
  // arguments on a fresh key would execute with an effect the counter cannot predict.
  const variant: Variant =
    record || step.variant.kind === 'respelled' ? step.variant : ({ kind: 'same' } as const);
  const sent = spell(run, base, variant);
  const print = fingerprintOf(sent.tool, sent.parsed);
  // The call as given, under a key first used with other arguments (the slow ones): a conflict too.
  if (record && print !== record.fingerprint && variant.kind === 'same')
    sent.what = 'the call with --arguments, under a key first used with other arguments,';
  const call = await send(ctx, { tool: sent.tool, text: sent.text, key, conn: step.conn });
  const m = await measure(ctx, record ? 0 : 1);
  if (m.count === undefined) throw new Unjudged();
  const on = step.conn === 'main' ? '' : `, sent${CONN_WORDS[step.conn]},`;
  if (!record) {
    if (m.count === 0 && limitRefusal(call, shape)) {
      ctx.refusedKeys.add(key);
      return undefined;
    }
    if (m.count === 1 && call.kind !== 'error') {
      ctx.records.set(key, {
        key,
        slot: step.slot,
        fingerprint: print,
        stored: call,
        spelling: sent.rule,
        at: performance.now(),
      });
      ctx.refusedKeys.delete(key);
      return undefined;
    }
    const kin = kinship(ctx, step.slot);
    const taken = kin !== undefined && ctx.records.has(ctx.keys[baseSlot(ctx, step.slot)] ?? '');
    return {
      rule: taken ? 'key.opaque' : 'new-key.executes',
      observed: `a key never used before${kin ? ` (${kin})` : ''}${on} got ${describe(call)}: ${countWords(m.count, 1, m)}`,
    };
  }
  if (m.count !== 0) {
    if (print === record.fingerprint) {
      const { rule, why } = retryRule(ctx, key, step.conn, sent.rule ?? record.spelling);
      return {
        rule,
        observed: `${why}: ${sent.what} under a used key${on} got ${describe(call)}; ${countWords(m.count, 0, m)}`,
      };
    }
    return {
      rule: sent.rule ?? 'conflict.other-arguments',
      observed: `${sent.what} under a used key${on} executed: ${describe(call)}; ${countWords(m.count, 0, m)}`,
    };
  }
  return laterAnswerFault(record, call, sent, on);
}

async function pair(ctx: Ctx, step: Extract<Step, { kind: 'pair' }>): Promise<Finding | undefined> {
  const { run } = ctx;
  const { key, record, shape } = lookup(ctx, step.slot);
  const base = (step.slow ? run.inputs.slowArguments : undefined) ?? run.inputs.arguments;
  const first = spell(run, base, { kind: 'same' });
  const second = spell(run, base, step.variant);
  const firstPrint = fingerprintOf(first.tool, first.parsed);
  // A record made with the other arguments (slow or not) is not this pair's to judge.
  if (record && record.fingerprint !== firstPrint) return undefined;
  const sameRequest = fingerprintOf(second.tool, second.parsed) === firstPrint;
  // Two different requests sent at once may arrive in either order, and the second's effect is not
  // the counter's step: a different request goes a little after the first, which is then the original.
  const delay = sameRequest ? step.delay : Math.max(step.delay, 20);
  const when =
    (delay === 0
      ? ', sent together with the call above'
      : `, sent ${delay} ms after the call above${step.slow ? ', while it ran' : ''}`) +
    CONN_WORDS[step.conn];
  let firstAnswered = false;
  const sending = send(ctx, { tool: first.tool, text: first.text, key, conn: 'main' }).finally(() => {
    firstAnswered = true;
  });
  await sleep(delay);
  // Sent while the first still ran, a duplicate that executes breaks the in-progress rule, however
  // it is spelled; sent after the first was answered, it is a retry.
  const whileFirstRan = !firstAnswered;
  const later = send(ctx, { tool: second.tool, text: second.text, key, conn: step.conn, note: when });
  const [a, b] = await Promise.all([sending, later]);
  const due = record ? 0 : 1;
  const m = await measure(ctx, due);
  if (m.count === undefined) throw new Unjudged();
  if (!record && m.count === 0 && [a, b].every((c) => limitRefusal(c, shape))) {
    ctx.refusedKeys.add(key);
    return undefined;
  }
  if (m.count !== due) {
    const rule = !sameRequest
      ? (second.rule ?? 'conflict.other-arguments')
      : record
        ? retryRule(ctx, key, step.conn, second.rule ?? record.spelling).rule
        : whileFirstRan
          ? 'in-progress.not-executed'
          : (second.rule ?? 'replay.not-executed');
    const what = sameRequest ? `${second.what}, a duplicate` : `${second.what}, a different request`;
    return {
      rule,
      observed: `${what} under one key${when}: ${countWords(m.count, due, m)}; the answers: ${describe(a)}, then ${describe(b)}`,
    };
  }
  if (record) {
    if (!alike(record.stored, a))
      return {
        rule: replayRule(record, a, undefined),
        observed: `a retry under a used key got ${describe(a)}, not the stored ${describe(record.stored)} (nothing executed)`,
      };
    return laterAnswerFault(record, b, second, when);
  }
  // Whichever executed holds the record; the other must be an error, or (the same request) its replay.
  const stored = sameRequest && a.kind === 'error' && b.kind !== 'error' ? b : a;
  const other = stored === a ? b : a;
  if (stored.kind !== 'error')
    ctx.records.set(key, {
      key,
      slot: step.slot,
      fingerprint: firstPrint,
      stored,
      spelling: stored === b ? second.rule : undefined,
      at: performance.now(),
    });
  if (other.kind === 'error') {
    // A conflict for the very same request is no answer to a duplicate.
    if (sameRequest && errorData(other).type === SEP_ERROR.conflict)
      return {
        rule: second.rule ?? 'replay.identical',
        observed: `${second.what}, a duplicate under one key${when}, got ${describe(other)}`,
      };
    return undefined;
  }
  if (!sameRequest)
    return {
      rule: second.rule ?? 'conflict.other-arguments',
      observed: `${second.what} under one key${when}, got ${describe(other)}, where a JSON-RPC error belongs (nothing more executed)`,
    };
  if (!alike(stored, other))
    return {
      rule: 'replay.identical',
      observed: `${second.what}, a duplicate under one key${when}, got ${describe(other)}, not the stored ${describe(stored)}`,
    };
  return undefined;
}

// --- The explorer ---

/** Re-runs of a failing history while shrinking it, at most. */
const SHRINK_RUNS = 40;
/** The keys made when exploring begins, for the late retries (each retried once, shrinking included). */
const EARLY_KEYS = 8;

/**
 * Explores: `options.budget` generated histories from `options.seed`, each run against the server
 * and judged by the model; the first that breaks it is shrunk and returned as the finding.
 */
export async function explore(run: Run, counter: Counter, options: ExploreOptions): Promise<Exploration> {
  const notes: string[] = [];
  if (!run.inputs.slowArguments) notes.push('no --slow-arguments: pairs are of quick calls only');
  if (!options.reconnect) notes.push('over stdio: one connection, no fresh sessions');
  else if (!options.sameCaller) notes.push('no --same-caller-header: one credential');
  const exploration: Exploration = {
    seed: options.seed,
    budget: options.budget,
    histories: 0,
    calls: 0,
    unjudged: 0,
    notes,
  };
  if (options.budget <= 0) return exploration;
  const callsBefore = run.calls;
  const start = run.standing() ?? (await run.probe());
  const early: Early[] = [];
  for (let i = 0; i < EARLY_KEYS; i++) {
    const key = randomUUID();
    const stored = await run.call({ key });
    if (stored.kind === 'error') break;
    early.push({
      key,
      keyedCalls: run.keyedCalls,
      fingerprint: fingerprintOf(run.inputs.tool, run.inputs.arguments),
      stored,
      at: performance.now(),
    });
  }
  let probe = await run.probe();
  if (executionsBetween(counter, start, probe) !== early.length + 1) {
    exploration.unjudged += 1;
    notes.push('the counter could not be read around the keys made when exploring began');
  }
  const maxKeyLength = publishedMaxKeyLength(run) ?? 255;
  const usedKeys = new Set<string>();
  let found: { finding: Finding; transcript: string[]; steps: number } | undefined;
  let firstSteps = 0;
  let shrinkRuns = 0;
  let stop = false;
  const limit = options.timeLimitMs;
  const deadline = limit === undefined ? Infinity : performance.now() + limit;
  // Shrinking re-runs histories as long as the first; with a time limit it gets that long again.
  let shrinkDeadline = Infinity;
  const property = fc.asyncProperty(arbitraries(run, options, maxKeyLength), async (history) => {
    if (stop || run.broken) return true;
    if (!found && performance.now() > deadline) {
      if (!exploration.stoppedAt)
        notes.push(
          `stopped after ${Math.round(options.timeLimitMs ?? 0) / 1000} s (pass --budget to run them all)`,
        );
      exploration.stoppedAt = exploration.histories;
      return true;
    }
    if (found) {
      if (shrinkRuns >= SHRINK_RUNS) return true;
      if (performance.now() > shrinkDeadline) {
        if (!notes.some((note) => note.startsWith('stopped shrinking')))
          notes.push(
            `stopped shrinking after ${Math.round(limit ?? 0) / 1000} s: a smaller history may break the rule too (pass --budget to shrink it all the way)`,
          );
        return true;
      }
      shrinkRuns += 1;
    } else exploration.histories += 1;
    const keys = keysFor(history.shapes, usedKeys);
    for (const key of keys) usedKeys.add(key);
    const ctx: Ctx = {
      run,
      counter,
      options,
      keys,
      shapes: history.shapes,
      records: new Map(),
      refusedKeys: new Set(),
      pressureSince: new Map(),
      transcript: [],
      probe,
    };
    let finding: Finding | undefined;
    try {
      finding = await perform(ctx, history, early);
    } catch (error) {
      if (!(error instanceof Unjudged) && !run.broken) throw error;
      exploration.unjudged += 1;
      if (run.broken) stop = true;
      return true;
    } finally {
      probe = ctx.probe;
    }
    if (!finding) return true;
    // Shrinking keeps to the rule first broken: a smaller history that breaks another proves another thing.
    if (found && finding.rule !== found.finding.rule) return true;
    if (!found) {
      firstSteps = history.steps.length;
      if (limit !== undefined) shrinkDeadline = performance.now() + limit;
    }
    found = { finding, transcript: ctx.transcript, steps: history.steps.length };
    return false;
  });
  const details = await fc.check(property, { seed: options.seed, numRuns: options.budget });
  exploration.calls = run.calls - callsBefore;
  // A history that threw without breaking the exchange is the explorer's own mistake: say so.
  if (details.failed && !found) throw details.errorInstance;
  if (found)
    exploration.failure = {
      ...found.finding,
      transcript: found.transcript,
      steps: { found: firstSteps, shrunk: found.steps },
    };
  return exploration;
}

/** The longest key the server says it takes, if its capability says so (`maxKeyLength`). */
function publishedMaxKeyLength(run: Run): number | undefined {
  const tools = isObject(run.peer.capabilities) ? run.peer.capabilities.tools : undefined;
  const idempotency = isObject(tools) ? tools.idempotency : undefined;
  const max = isObject(idempotency) ? idempotency.maxKeyLength : undefined;
  return typeof max === 'number' && Number.isSafeInteger(max) && max > 0 ? max : undefined;
}
