/**
 * SEP-3182 Request Idempotency: the server side of `idempotencyKey` on
 * `tools/call`, including the 2026-07-28 rule that makes the retry certain
 * ("a broken response stream loses the in-flight request; clients MUST
 * re-issue it as a new request with a new request ID").
 *
 * Whether the server executed is never taken from its answer: it is read from
 * the fixture tool's effect. The tool's result shows a counter that moves by
 * the same step at every execution (a balance, a count), so a call without a
 * key after each case says how many executions there were since the case's
 * original, whatever the answers in between claimed.
 *
 * Requests are written as raw JSON text, not through `Connection.request()`:
 * the equivalence cases send the same arguments spelled differently (`1.0`,
 * `\u00e9`, reordered members), which a serializer would normalise away, and
 * the replay case compares the response bytes.
 */

import {
  buildStandardHeaders,
  type RunContext,
  withRequestMeta
} from '../../connection';
import type {
  ClientScenario,
  ConformanceCheck,
  SpecReference
} from '../../types';
import { untestableCheck } from '../untestable';

const SEP_3182_REF: SpecReference = {
  id: 'SEP-3182',
  url: 'https://github.com/modelcontextprotocol/modelcontextprotocol/pull/3182'
};
const REISSUE_REF: SpecReference = {
  id: 'MCP-2026-07-28-transports',
  url: 'https://modelcontextprotocol.io/specification/2026-07-28/basic/transports'
};

export const IDEMPOTENCY_EXTENSION_ID = 'io.modelcontextprotocol/idempotency';

/** The `error.data.type` values the SEP suggests for its two rejections. */
const CONFLICT_TYPE = 'idempotency_key_conflict';
const IN_PROGRESS_TYPE = 'idempotency_key_in_progress';

/** A duplicate goes this long after its original, so the original is surely under way. */
const DUPLICATE_DELAY_MS = 100;
/** The stream of a slow call is broken this long after it was sent: surely under way by then. */
const BREAK_AFTER_MS = 200;
/** A re-issue that finds the original still running tries again after this. */
const REISSUE_INTERVAL_MS = 100;
/** Re-issues before giving up on the original ever being recorded (10 s). */
const MAX_REISSUES = 100;

/**
 * What the server under test provides. The defaults name fixture tools for
 * the everything-server; a server with tools of its own names them in the
 * JSON of MCP_CONFORMANCE_SEP_3182_FIXTURE (any subset of the fields).
 */
export interface IdempotencyFixture {
  /** A tool whose result text ends with a counter moved by each execution. */
  tool: string;
  /** Its arguments: two members, a number, and a string NFC and NFD spell apart. */
  arguments: Record<string, unknown>;
  /** Arguments that keep the call running at least 500 ms (same counter step). */
  slowArguments: Record<string, unknown>;
  /** A second tool that accepts the same arguments. */
  otherTool: string;
  /** Arguments that make the call fail, each failure numbered (a decline count). */
  errorArguments?: Record<string, unknown>;
  /** Headers of every request (e.g. the caller's Authorization). */
  headers: Record<string, string>;
  /** A second authorized caller's headers; without them scope is not testable. */
  otherCallerHeaders?: Record<string, string>;
  /** The same caller's credentials that may not call the tool (read-only). */
  forbiddenHeaders?: Record<string, string>;
}

export const FIXTURE_ENV = 'MCP_CONFORMANCE_SEP_3182_FIXTURE';

const DEFAULT_FIXTURE: IdempotencyFixture = {
  tool: 'test_idempotency_counter',
  arguments: { amount: 1, note: 'café' },
  slowArguments: { amount: 1, note: 'café', delayMs: 600 },
  otherTool: 'test_idempotency_counter_other',
  errorArguments: { amount: 1, note: 'café', fail: true },
  headers: {}
};

function readFixture(): IdempotencyFixture {
  const text = process.env[FIXTURE_ENV];
  return text
    ? { ...DEFAULT_FIXTURE, ...(JSON.parse(text) as object) }
    : DEFAULT_FIXTURE;
}

// --- The wire: one tools/call as raw text, one answer as raw text ---

interface JsonRpcAnswer {
  result?: { content?: unknown; isError?: unknown };
  error?: { code: number; message: string; data?: unknown };
}

interface Call {
  /** The HTTP status of the response. */
  status: number;
  /** The response body (for SSE, the data of the event answering the call). */
  text: string;
  answer?: JsonRpcAnswer;
  /** Milliseconds since the scenario started, when the answer arrived. */
  answeredAt: number;
}

interface CallSpec {
  tool?: string;
  /** The `arguments` member exactly as sent. */
  argumentsText?: string;
  key?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

class Wire {
  private nextId = 1;
  private readonly started = performance.now();

  constructor(
    private readonly ctx: RunContext,
    private readonly fixture: IdempotencyFixture
  ) {}

  now(): number {
    return performance.now() - this.started;
  }

  async call(spec: CallSpec = {}): Promise<Call> {
    const tool = spec.tool ?? this.fixture.tool;
    const id = this.nextId++;
    const meta = withRequestMeta(undefined, this.ctx.specVersion)._meta;
    const members = [
      `"name":${JSON.stringify(tool)}`,
      `"arguments":${spec.argumentsText ?? JSON.stringify(this.fixture.arguments)}`,
      ...(spec.key === undefined
        ? []
        : [`"idempotencyKey":${JSON.stringify(spec.key)}`]),
      `"_meta":${JSON.stringify(meta)}`
    ];
    const body = `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{${members.join(',')}}}`;
    const headers = buildStandardHeaders(
      'tools/call',
      { name: tool },
      {
        headers: { ...this.fixture.headers, ...spec.headers },
        specVersion: this.ctx.specVersion
      }
    );
    const res = await fetch(this.ctx.serverUrl, {
      method: 'POST',
      headers,
      body,
      signal: spec.signal
    });
    const raw = await res.text();
    const text = (res.headers.get('content-type') ?? '').includes(
      'text/event-stream'
    )
      ? (sseDataAnswering(raw, id) ?? raw)
      : raw;
    return {
      status: res.status,
      text,
      answer: parseAnswer(text),
      answeredAt: this.now()
    };
  }
}

/** The data line of the SSE event that answers request `id`. */
function sseDataAnswering(stream: string, id: number): string | undefined {
  for (const line of stream.split(/\r?\n/)) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice('data:'.length).trim();
    if (parseAnswer(data) && JSON.parse(data).id === id) return data;
  }
  return undefined;
}

function parseAnswer(text: string): JsonRpcAnswer | undefined {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null || !('jsonrpc' in value))
      return undefined;
    return 'result' in value || 'error' in value
      ? (value as JsonRpcAnswer)
      : undefined;
  } catch {
    return undefined;
  }
}

/** The response without its `id`: what a replay must reproduce byte for byte. */
const withoutId = (call: Call) => call.text.replace(/"id":\s*\d+\s*,?/, '');

const isResult = (call: Call) =>
  call.answer?.result !== undefined && call.answer.result.isError !== true;

function errorData(call: Call): { type?: unknown; idempotencyKey?: unknown } {
  const data = call.answer?.error?.data;
  return typeof data === 'object' && data !== null ? data : {};
}

function describe(call: Call): string {
  if (call.answer === undefined)
    return `HTTP ${call.status}: ${call.text.slice(0, 120)}`;
  const error = call.answer.error;
  if (error) {
    const type = errorData(call).type;
    return `error ${error.code}${typeof type === 'string' ? ` (${type})` : ''}`;
  }
  const count = reading(call);
  return count === undefined
    ? call.text.slice(0, 120)
    : `a result showing ${count}`;
}

/** The text content of a result (an `isError` one included). */
function resultText(call: Call): string {
  const content = call.answer?.result?.content;
  if (!Array.isArray(content)) return '';
  return content
    .map((item: { type?: unknown; text?: unknown }) =>
      item.type === 'text' && typeof item.text === 'string' ? item.text : ''
    )
    .join(' ');
}

function lastNumber(text: string): number | undefined {
  const numbers = text.match(/-?\d+(\.\d+)?/g);
  return numbers ? Number(numbers[numbers.length - 1]) : undefined;
}

/** The last number in the result's text: the fixture's counter. */
function reading(call: Call): number | undefined {
  return call.answer?.result ? lastNumber(resultText(call)) : undefined;
}

/** The number a failure shows (its JSON-RPC message, or an `isError` text). */
function failureNumber(call: Call): number | undefined {
  return lastNumber(call.answer?.error?.message ?? resultText(call));
}

/** Refused: an HTTP error status, a JSON-RPC error, or an `isError` result. */
const refused = (call: Call) =>
  call.status >= 400 ||
  call.answer?.error !== undefined ||
  call.answer?.result?.isError === true;

// --- Arguments spelled another way (same parsed value), or changed ---

interface Spelling {
  reverseMembers?: boolean;
  spaced?: boolean;
  number?: (n: number) => string;
  string?: (s: string) => string;
}

/** `value` as JSON text, each number, string and object written as `how` says. */
function write(value: unknown, how: Spelling): string {
  const gap = how.spaced ? ' ' : '';
  if (typeof value === 'number')
    return how.number ? how.number(value) : JSON.stringify(value);
  if (typeof value === 'string')
    return how.string ? how.string(value) : JSON.stringify(value);
  if (Array.isArray(value))
    return `[${gap}${value.map((v) => write(v, how)).join(`,${gap}`)}${gap}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value);
    if (how.reverseMembers) entries.reverse();
    const members = entries.map(
      ([k, v]) => `${write(k, how)}${gap}:${gap}${write(v, how)}`
    );
    return `{${gap}${members.join(`,${gap}`)}${gap}}`;
  }
  return JSON.stringify(value);
}

/** Every UTF-16 unit as a `\uXXXX` escape: the same string once parsed. */
const escapeAll = (s: string) =>
  `"${[...s].map((c) => [...c].map((u) => `\\u${u.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')).join('')}"`;

/** `1` as `1.0`, `2.5` as `2.50`: the same number once parsed. */
const respell = (n: number) =>
  Number.isInteger(n) ? `${n}.0` : `${JSON.stringify(n)}0`;

/** The arguments with their first number, else string, else boolean changed. */
function otherArguments(
  args: Record<string, unknown>
): Record<string, unknown> | undefined {
  for (const [k, v] of Object.entries(args)) {
    if (typeof v === 'number') return { ...args, [k]: v + 1 };
  }
  for (const [k, v] of Object.entries(args)) {
    if (typeof v === 'string') return { ...args, [k]: `${v}-other` };
    if (typeof v === 'boolean') return { ...args, [k]: !v };
  }
  return undefined;
}

/** The arguments with each string in NFD, or undefined if none changes. */
function renormalised(
  args: Record<string, unknown>
): Record<string, unknown> | undefined {
  let changed = false;
  const out = Object.fromEntries(
    Object.entries(args).map(([k, v]) => {
      if (typeof v !== 'string' || v.normalize('NFD') === v) return [k, v];
      changed = true;
      return [k, v.normalize('NFD')];
    })
  );
  return changed ? out : undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// --- Verdicts, and the checks they become ---

interface Verdict {
  /** Set when the requirement was violated. */
  error?: string;
  /** Set when the requirement could not be exercised (a missing prerequisite). */
  untestable?: string;
  details?: Record<string, unknown>;
}

interface Requirement {
  id: string;
  name: string;
  description: string;
  severity: 'FAILURE' | 'WARNING';
  specReferences?: SpecReference[];
}

function toCheck(req: Requirement, verdict: Verdict): ConformanceCheck {
  const refs = req.specReferences ?? [SEP_3182_REF];
  if (verdict.untestable !== undefined)
    return untestableCheck(
      req.id,
      req.name,
      req.description,
      verdict.untestable,
      refs,
      req.severity
    );
  return {
    id: req.id,
    name: req.name,
    description: req.description,
    status: verdict.error === undefined ? 'SUCCESS' : req.severity,
    timestamp: new Date().toISOString(),
    errorMessage: verdict.error,
    specReferences: refs,
    details: verdict.details
  };
}

const REQUIREMENTS = {
  capability: {
    id: 'sep-3182-capability-advertised',
    name: 'IdempotencyCapabilityAdvertised',
    description:
      'server/discover declares capabilities.tools.idempotency as an object',
    severity: 'FAILURE'
  },
  noKey: {
    id: 'sep-3182-no-key-executes',
    name: 'IdempotencyNoKeyExecutes',
    description: 'A tools/call without idempotencyKey executes every time',
    severity: 'FAILURE'
  },
  newKey: {
    id: 'sep-3182-new-key-executes',
    name: 'IdempotencyNewKeyExecutes',
    description: 'A tools/call with a key never seen before executes once',
    severity: 'FAILURE'
  },
  replayNotExecuted: {
    id: 'sep-3182-replay-not-executed',
    name: 'IdempotencyReplayNotExecuted',
    description:
      'A retry with the same key and arguments after the original completed does not execute the tool again',
    severity: 'FAILURE'
  },
  replayIdentical: {
    id: 'sep-3182-replay-identical',
    name: 'IdempotencyReplayIdentical',
    description:
      "A retry with the same key and arguments gets the original's response, byte for byte but the JSON-RPC id",
    severity: 'FAILURE'
  },
  errorsReplayed: {
    id: 'sep-3182-errors-replayed',
    name: 'IdempotencyErrorsReplayed',
    description:
      'A retry of a keyed call that failed gets the stored failure, and the tool does not run again',
    severity: 'FAILURE'
  },
  inProgressNotExecuted: {
    id: 'sep-3182-in-progress-not-executed',
    name: 'IdempotencyInProgressNotExecuted',
    description:
      'A duplicate sent while the original still executes does not start a second execution; the key then replays',
    severity: 'FAILURE'
  },
  inProgressNotBlocked: {
    id: 'sep-3182-in-progress-not-blocked',
    name: 'IdempotencyInProgressNotBlocked',
    description:
      'A duplicate sent while the original still executes is not held until the original finishes',
    severity: 'FAILURE'
  },
  inProgressError: {
    id: 'sep-3182-in-progress-error',
    name: 'IdempotencyInProgressError',
    description: `The duplicate is rejected at once with error.data {"type":"${IN_PROGRESS_TYPE}","idempotencyKey":<the key>}`,
    severity: 'WARNING'
  },
  conflictArguments: {
    id: 'sep-3182-conflict-other-arguments',
    name: 'IdempotencyConflictOtherArguments',
    description:
      'The same key with other arguments is rejected with a JSON-RPC error, neither executed nor answered from the record',
    severity: 'FAILURE'
  },
  conflictTool: {
    id: 'sep-3182-conflict-other-tool',
    name: 'IdempotencyConflictOtherTool',
    description:
      'The same key and arguments with another tool name is rejected, neither executed nor answered from the record',
    severity: 'FAILURE'
  },
  conflictError: {
    id: 'sep-3182-conflict-error',
    name: 'IdempotencyConflictError',
    description: `A conflict's error carries error.data {"type":"${CONFLICT_TYPE}","idempotencyKey":<the key>}`,
    severity: 'WARNING'
  },
  keyOrder: {
    id: 'sep-3182-equivalence-key-order',
    name: 'IdempotencyEquivalenceKeyOrder',
    description:
      'A retry whose arguments list their members in another order replays',
    severity: 'FAILURE'
  },
  whitespace: {
    id: 'sep-3182-equivalence-whitespace',
    name: 'IdempotencyEquivalenceWhitespace',
    description: 'A retry whose arguments carry other whitespace replays',
    severity: 'FAILURE'
  },
  numberSpelling: {
    id: 'sep-3182-equivalence-number-spelling',
    name: 'IdempotencyEquivalenceNumberSpelling',
    description: 'A retry that spells 1 as 1.0 replays',
    severity: 'FAILURE'
  },
  stringEscapes: {
    id: 'sep-3182-equivalence-string-escapes',
    name: 'IdempotencyEquivalenceStringEscapes',
    description: 'A retry that writes its strings as \\uXXXX escapes replays',
    severity: 'FAILURE'
  },
  noNormalization: {
    id: 'sep-3182-equivalence-no-unicode-normalization',
    name: 'IdempotencyEquivalenceNoUnicodeNormalization',
    description:
      'A retry whose string is the NFD form of the original NFC string is other arguments: a conflict',
    severity: 'FAILURE'
  },
  scope: {
    id: 'sep-3182-scope-per-caller',
    name: 'IdempotencyScopePerCaller',
    description:
      "Another authorized caller's first use of a key executes: it is not matched against the first caller's record",
    severity: 'FAILURE'
  },
  authorization: {
    id: 'sep-3182-authorization-at-replay',
    name: 'IdempotencyAuthorizationAtReplay',
    description:
      'Credentials of the same caller that may not call the tool are refused the stored response, as a first call would be',
    severity: 'FAILURE'
  },
  reissue: {
    id: 'sep-3182-reissue-after-broken-stream',
    name: 'IdempotencyReissueAfterBrokenStream',
    description:
      'A call whose response stream broke, re-issued with a new request id and the same key, executes once in all',
    severity: 'FAILURE',
    specReferences: [SEP_3182_REF, REISSUE_REF]
  }
} satisfies Record<string, Requirement>;

export class IdempotencyScenario implements ClientScenario {
  name = 'tools-call-idempotency';
  readonly source = { extensionId: IDEMPOTENCY_EXTENSION_ID } as const;
  description = `Test SEP-3182 request idempotency: \`idempotencyKey\` on \`tools/call\`.

**Server Implementation Requirements:**

- Declare \`capabilities.tools.idempotency = {}\` in \`server/discover\`.
- A call without a key executes as today; a key never seen executes once.
- The same key and equivalent arguments after the original completed: the
  stored response, byte for byte, and no execution. Equivalent means equal
  as parsed JSON: member order, whitespace, \`1\` vs \`1.0\`, \`\\uXXXX\`
  escapes do not matter; NFC and NFD strings differ.
- The same key while the original runs: no second execution, no waiting;
  SHOULD be an error at once with \`data.type = "${IN_PROGRESS_TYPE}"\`.
- The same key with other arguments or another tool: a JSON-RPC error,
  nothing executed, SHOULD carry \`data.type = "${CONFLICT_TYPE}"\`.
- A failure is stored and replayed like a success.
- Records scoped per authorized caller, and a replay authorized as a first
  call would be.
- A call whose response stream broke, re-issued with a new request id and the
  same key (2026-07-28), executes once in all.

**Required fixture tools** (or name your own in \`${FIXTURE_ENV}\`):
- \`${DEFAULT_FIXTURE.tool}\` — adds \`amount\` to a counter and returns text
  ending with the new value; \`delayMs\` holds the call that long; \`fail\`
  makes it fail with a message ending with a count of its failures.
- \`${DEFAULT_FIXTURE.otherTool}\` — the same, on the same counter.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const fixture = readFixture();
    const wire = new Wire(ctx, fixture);
    const cases = new IdempotencyCases(wire, fixture);
    const checks: ConformanceCheck[] = [];
    const judge = async (req: Requirement, verdict: () => Promise<Verdict>) => {
      try {
        checks.push(toCheck(req, await verdict()));
      } catch (error) {
        checks.push(
          toCheck(req, { error: `the exchange broke: ${String(error)}` })
        );
      }
    };

    await judge(REQUIREMENTS.capability, async () => {
      // Through the suite's connection, with the caller's headers (its credentials).
      const conn = await ctx.connect();
      const discovered = await conn.request<Record<string, unknown>>(
        'server/discover',
        undefined,
        fixture.headers
      );
      const capabilities = discovered.capabilities as
        | { tools?: { idempotency?: unknown } }
        | undefined;
      const found = capabilities?.tools?.idempotency;
      return typeof found === 'object' && found !== null
        ? { details: { idempotency: found } }
        : {
            error: `no tools.idempotency object in server/discover: tools = ${JSON.stringify(capabilities?.tools)}`
          };
    });

    const counter = await cases.baseline();
    await judge(REQUIREMENTS.noKey, async () => counter.verdict);
    if (counter.verdict.untestable !== undefined) {
      // Without a counter no execution can be seen: every other case says so.
      for (const req of Object.values(REQUIREMENTS).slice(2))
        checks.push(toCheck(req, counter.verdict));
      return checks;
    }

    await judge(REQUIREMENTS.newKey, () => cases.newKeys());
    const replay = await cases.replay();
    await judge(REQUIREMENTS.replayNotExecuted, async () => replay.notExecuted);
    await judge(REQUIREMENTS.replayIdentical, async () => replay.identical);
    await judge(REQUIREMENTS.errorsReplayed, () => cases.errorsReplayed());
    const inProgress = await cases.inProgress();
    await judge(
      REQUIREMENTS.inProgressNotExecuted,
      async () => inProgress.notExecuted
    );
    await judge(
      REQUIREMENTS.inProgressNotBlocked,
      async () => inProgress.notBlocked
    );
    await judge(REQUIREMENTS.inProgressError, async () => inProgress.error);
    const changed = otherArguments(fixture.arguments);
    const byArguments = await cases.conflict(
      changed === undefined
        ? undefined
        : { argumentsText: JSON.stringify(changed) },
      'the arguments have no number, string or boolean to change'
    );
    await judge(
      REQUIREMENTS.conflictArguments,
      async () => byArguments.verdict
    );
    const byTool = await cases.conflict({ tool: fixture.otherTool }, '');
    await judge(REQUIREMENTS.conflictTool, async () => byTool.verdict);
    await judge(REQUIREMENTS.conflictError, async () =>
      conflictErrorVerdict([byArguments, byTool])
    );
    const args = fixture.arguments;
    await judge(REQUIREMENTS.keyOrder, () =>
      Object.keys(args).length > 1
        ? cases.equivalent(write(args, { reverseMembers: true }))
        : Promise.resolve({
            untestable: 'the arguments have fewer than two members'
          })
    );
    await judge(REQUIREMENTS.whitespace, () =>
      cases.equivalent(write(args, { spaced: true }))
    );
    await judge(REQUIREMENTS.numberSpelling, () =>
      Object.values(args).some((v) => typeof v === 'number')
        ? cases.equivalent(write(args, { number: respell }))
        : Promise.resolve({ untestable: 'the arguments have no number' })
    );
    await judge(REQUIREMENTS.stringEscapes, () =>
      Object.values(args).some((v) => typeof v === 'string')
        ? cases.equivalent(write(args, { string: escapeAll }))
        : Promise.resolve({ untestable: 'the arguments have no string' })
    );
    const nfd = renormalised(args);
    const normalization = await cases.conflict(
      nfd === undefined ? undefined : { argumentsText: JSON.stringify(nfd) },
      'the arguments have no string whose NFC and NFD forms differ (such as "café")'
    );
    await judge(
      REQUIREMENTS.noNormalization,
      async () => normalization.verdict
    );
    await judge(REQUIREMENTS.scope, () => cases.otherCaller());
    await judge(REQUIREMENTS.authorization, () =>
      cases.authorizationAtReplay(replay.notExecuted.error === undefined)
    );
    await judge(REQUIREMENTS.reissue, () => cases.reissueAfterBrokenStream());
    return checks;
  }
}

/** The two calls of an in-progress case as the server ordered them. */
function arrivedInOrder(first: Call, second: Call): [Call, Call] {
  const inProgress = (call: Call) => errorData(call).type === IN_PROGRESS_TYPE;
  return inProgress(first) && !inProgress(second)
    ? [second, first]
    : [first, second];
}

/** What a conflict case saw: the key, and the answer to the conflicting call. */
interface Conflicted {
  key?: string;
  rejected?: Call;
  verdict: Verdict;
}

function conflictErrorVerdict(conflicts: Conflicted[]): Verdict {
  const rejections = conflicts.filter(
    (c) => c.rejected?.answer?.error !== undefined
  );
  if (rejections.length === 0)
    return { untestable: 'no conflicting call was rejected' };
  const wrong = rejections.filter(({ key, rejected }) => {
    const data = rejected ? errorData(rejected) : {};
    return data.type !== CONFLICT_TYPE || data.idempotencyKey !== key;
  });
  const shown = rejections.map((c) => c.rejected?.text);
  return wrong.length === 0
    ? { details: { rejections: shown } }
    : {
        error: `${wrong.length} of ${rejections.length} conflicts lacked data {"type":"${CONFLICT_TYPE}","idempotencyKey":<the key>}: ${wrong.map((c) => c.rejected?.text).join('; ')}`
      };
}

/**
 * The cases, each ending with a call without a key (a probe) whose counter
 * the next case starts from.
 */
class IdempotencyCases {
  private step = 0;
  private standing: Call | undefined;

  constructor(
    private readonly wire: Wire,
    private readonly fixture: IdempotencyFixture
  ) {}

  /** Executions from `from` (excluded) to `to` (included), by the counter. */
  private executions(from: Call, to: Call): number | undefined {
    const a = reading(from);
    const b = reading(to);
    return a === undefined || b === undefined ? undefined : (b - a) / this.step;
  }

  /** Any call may execute: the counter no longer stands where the last probe left it. */
  private call(spec?: CallSpec): Promise<Call> {
    this.standing = undefined;
    return this.wire.call(spec);
  }

  private async probe(): Promise<Call> {
    const probe = await this.call();
    this.standing = probe;
    return probe;
  }

  private async before(): Promise<Call> {
    return this.standing ?? (await this.probe());
  }

  /** How many executions a case caused: the probe after it counts one. */
  private async executionsSince(before: Call): Promise<number | undefined> {
    const probe = await this.probe();
    const n = this.executions(before, probe);
    return n === undefined ? undefined : n - 1;
  }

  async baseline(): Promise<{ verdict: Verdict }> {
    const first = await this.call();
    const second = await this.probe();
    const a = reading(first);
    const b = reading(second);
    if (a === undefined || b === undefined || a === b)
      return {
        verdict: {
          untestable: `two calls without a key show no counter that moves (${describe(first)}, then ${describe(second)}): the fixture tool's result must end with a counter`
        }
      };
    this.step = b - a;
    return { verdict: { details: { counter: [a, b] } } };
  }

  async newKeys(): Promise<Verdict> {
    let prior = await this.before();
    for (const key of [crypto.randomUUID(), crypto.randomUUID()]) {
      const call = await this.call({ key });
      const n = this.executions(prior, call);
      if (n !== 1)
        return {
          error: `a call with a fresh key got ${describe(call)}: ${n ?? 'no reading of'} executions after ${describe(prior)}`
        };
      prior = call;
    }
    this.standing = prior;
    return {};
  }

  async replay(): Promise<{ notExecuted: Verdict; identical: Verdict }> {
    const key = crypto.randomUUID();
    const before = await this.before();
    const original = await this.call({ key });
    const retry = await this.call({ key });
    const n = await this.executionsSince(before);
    const details = { original: original.text, retry: retry.text };
    const identical = withoutId(original) === withoutId(retry);
    return {
      notExecuted:
        n === 1
          ? { details }
          : {
              error: `the original and its retry executed ${n ?? 'an unknown number of'} times: ${describe(original)}, then ${describe(retry)}`,
              details
            },
      identical:
        isResult(original) && identical
          ? { details }
          : isResult(original)
            ? {
                error: `the retry's response differs from the original's: ${retry.text} vs ${original.text}`,
                details
              }
            : { untestable: `the keyed original failed: ${describe(original)}` }
    };
  }

  /** A keyed failure, its retry, then two unkeyed failures: their own count. */
  async errorsReplayed(): Promise<Verdict> {
    const failing = this.fixture.errorArguments;
    if (failing === undefined)
      return {
        untestable: `a call that fails (errorArguments in ${FIXTURE_ENV})`
      };
    const argumentsText = JSON.stringify(failing);
    const key = crypto.randomUUID();
    const first = await this.call({ key, argumentsText });
    if (isResult(first))
      return { untestable: `errorArguments did not fail: ${describe(first)}` };
    const retry = await this.call({ key, argumentsText });
    const unkeyed = await this.call({ argumentsText });
    const again = await this.call({ argumentsText });
    await this.probe();
    const details = {
      original: first.text,
      retry: retry.text,
      unkeyed: [unkeyed.text, again.text]
    };
    const [f, a, b] = [first, unkeyed, again].map(failureNumber);
    if (f === undefined || a === undefined || b === undefined || a === b)
      return {
        untestable: `failures without a key are alike (${describe(unkeyed)}): a stored failure cannot be told from a fresh one`,
        details
      };
    const executions = (a - f) / (b - a);
    if (withoutId(retry) !== withoutId(first))
      return {
        error: `the retry got another answer: ${retry.text} after ${first.text}`,
        details
      };
    return executions === 1
      ? { details }
      : {
          error: `the stored failure came back, yet ${executions - 1} more executions happened`,
          details
        };
  }

  async inProgress(): Promise<{
    notExecuted: Verdict;
    notBlocked: Verdict;
    error: Verdict;
  }> {
    const key = crypto.randomUUID();
    const argumentsText = JSON.stringify(this.fixture.slowArguments);
    const before = await this.before();
    const firstSent = this.call({ key, argumentsText });
    await sleep(DUPLICATE_DELAY_MS);
    const secondSent = await this.call({ key, argumentsText });
    // On a loaded machine the later request can reach the server first: the
    // original is whichever the server executed, the duplicate the other.
    const [original, duplicate] = arrivedInOrder(await firstSent, secondSent);
    const after = await this.call({ key, argumentsText });
    const n = await this.executionsSince(before);
    const details = {
      original: original.text,
      duplicate: duplicate.text,
      retryAfterwards: after.text,
      duplicateAnsweredBeforeOriginal:
        duplicate.answeredAt < original.answeredAt
    };
    const extra = n === undefined ? undefined : n - 1;
    const executedItself = extra !== 0;
    const heldForOriginal =
      !executedItself && duplicate.answeredAt >= original.answeredAt;
    const data = errorData(duplicate);
    return {
      notExecuted:
        extra !== 0
          ? {
              error: `the duplicate got ${describe(duplicate)}, and ${extra ?? 'an unknown number of'} executions more than the original happened`,
              details
            }
          : withoutId(after) !== withoutId(original)
            ? {
                error: `once the original finished, the key got ${describe(after)}, not the original's ${describe(original)}`,
                details
              }
            : { details },
      notBlocked: heldForOriginal
        ? {
            error: `the duplicate was answered (${describe(duplicate)}) only once the original had finished`,
            details
          }
        : { details },
      error:
        !heldForOriginal &&
        duplicate.answeredAt < original.answeredAt &&
        data.type === IN_PROGRESS_TYPE &&
        data.idempotencyKey === key
          ? { details }
          : {
              error: `the duplicate got ${duplicate.text}${duplicate.answeredAt >= original.answeredAt ? ', after the original finished' : ''}`,
              details
            }
    };
  }

  /** The same key with `retry`'s change: rejected, not executed, not the record. */
  async conflict(
    retry: Omit<CallSpec, 'key'> | undefined,
    untestable: string
  ): Promise<Conflicted> {
    if (retry === undefined) return { verdict: { untestable } };
    const key = crypto.randomUUID();
    const before = await this.before();
    const original = await this.call({ key });
    const rejected = await this.call({ ...retry, key });
    const n = await this.executionsSince(before);
    const details = { original: original.text, conflicting: rejected.text };
    if (!isResult(original))
      return {
        verdict: {
          untestable: `the keyed original failed: ${describe(original)}`
        }
      };
    if (rejected.answer?.error === undefined)
      return {
        key,
        rejected,
        verdict: {
          error:
            withoutId(rejected) === withoutId(original)
              ? `answered from the original's record: ${describe(rejected)}`
              : `not rejected: ${describe(rejected)} (${n ?? 'unknown'} executions in all)`,
          details
        }
      };
    return {
      key,
      rejected,
      verdict:
        n === 1
          ? { details }
          : {
              error: `rejected (${describe(rejected)}), yet ${n ?? 'an unknown number of'} executions happened`,
              details
            }
    };
  }

  /** A retry spelled `argumentsText`: replayed, neither rejected nor executed. */
  async equivalent(argumentsText: string): Promise<Verdict> {
    const key = crypto.randomUUID();
    const before = await this.before();
    const original = await this.call({ key });
    const retry = await this.call({ key, argumentsText });
    const n = await this.executionsSince(before);
    const details = {
      sent: argumentsText,
      original: original.text,
      retry: retry.text
    };
    if (retry.answer?.error !== undefined)
      return {
        error: `the retry spelled ${argumentsText} was rejected: ${describe(retry)}`,
        details
      };
    return n === 1
      ? { details }
      : {
          error: `the retry spelled ${argumentsText} got ${describe(retry)}; ${n ?? 'an unknown number of'} executions in all`,
          details
        };
  }

  async otherCaller(): Promise<Verdict> {
    const headers = this.fixture.otherCallerHeaders;
    if (headers === undefined)
      return {
        untestable: `a second caller's credentials (otherCallerHeaders in ${FIXTURE_ENV})`
      };
    const key = crypto.randomUUID();
    const original = await this.call({ key });
    const fresh = await this.call({ key: crypto.randomUUID(), headers });
    if (!isResult(fresh))
      return {
        untestable: `the second caller may not call the tool: ${describe(fresh)}`
      };
    const second = await this.call({ key, headers });
    await this.probe();
    const details = { original: original.text, otherCaller: second.text };
    const type = errorData(second).type;
    if (
      type === CONFLICT_TYPE ||
      type === IN_PROGRESS_TYPE ||
      second.answer?.error
    )
      return {
        error: `the second caller's first use of the key was refused: ${second.text}`,
        details
      };
    if (withoutId(second) === withoutId(original))
      return {
        error: `the second caller got the first caller's response: ${second.text}`,
        details
      };
    const n = this.executions(fresh, second);
    return n === 1
      ? { details }
      : {
          error: `the second caller's call moved the counter by ${n ?? 'an unknown number of'} executions`,
          details
        };
  }

  /**
   * A replay is authorized at replay time: credentials that may not call the
   * tool are refused, the record untouched. `replays` says whether this
   * server was seen to replay at all (no replay, nothing to authorize).
   */
  async authorizationAtReplay(replays: boolean): Promise<Verdict> {
    const forbidden = this.fixture.forbiddenHeaders;
    if (forbidden === undefined)
      return {
        untestable: `credentials of the same caller that may not call the tool (forbiddenHeaders in ${FIXTURE_ENV})`
      };
    const fresh = await this.call({
      key: crypto.randomUUID(),
      headers: forbidden
    });
    if (!refused(fresh))
      return {
        untestable: `the forbiddenHeaders credentials may call the tool: a first call got ${describe(fresh)}`
      };
    const key = crypto.randomUUID();
    const original = await this.call({ key });
    const replayed = await this.call({ key, headers: forbidden });
    const retry = await this.call({ key });
    await this.probe();
    const details = {
      firstCall: fresh.text,
      original: original.text,
      forbidden: replayed.text,
      retry: retry.text
    };
    const stored = resultText(original);
    if (!refused(replayed))
      return {
        error:
          withoutId(replayed) === withoutId(original)
            ? `the stored response went to credentials that may not call the tool: ${replayed.text}`
            : `not refused: ${describe(replayed)}`,
        details
      };
    if (stored !== '' && replayed.text.includes(stored))
      return {
        error: `refused, but the refusal carries the stored response: ${replayed.text}`,
        details
      };
    if (withoutId(retry) !== withoutId(original))
      return replays
        ? {
            error: `after the refused call, the caller's retry got ${describe(retry)}, not the stored ${describe(original)}`,
            details
          }
        : {
            untestable: `no replay to authorize: the server does not replay a keyed retry (${describe(retry)} after ${describe(original)})`,
            details
          };
    return { details };
  }

  /**
   * 2026-07-28: "a broken response stream loses the in-flight request; clients
   * MUST re-issue it as a new request with a new request ID". The re-issue
   * carries the same key; until the original is recorded it may be told "in
   * progress", then it gets the record. In all, one execution.
   */
  async reissueAfterBrokenStream(): Promise<Verdict> {
    const key = crypto.randomUUID();
    const argumentsText = JSON.stringify(this.fixture.slowArguments);
    const before = await this.before();
    const stream = new AbortController();
    const broken = this.wire
      .call({ key, argumentsText, signal: stream.signal })
      .then((call) => `answered before the break: ${describe(call)}`)
      .catch(() => 'no answer (stream broken)');
    await sleep(BREAK_AFTER_MS);
    stream.abort();
    const answers = [await broken];
    let reissue: Call | undefined;
    for (let i = 0; i < MAX_REISSUES; i++) {
      reissue = await this.call({ key, argumentsText });
      answers.push(describe(reissue));
      if (errorData(reissue).type !== IN_PROGRESS_TYPE) break;
      await sleep(REISSUE_INTERVAL_MS);
    }
    const n = await this.executionsSince(before);
    const details = { answers };
    if (reissue === undefined || !isResult(reissue))
      return {
        error: `the re-issue never got a result: ${answers.join(' → ')}`,
        details
      };
    return n === 1
      ? { details }
      : {
          error: `${n ?? 'an unknown number of'} executions for one call re-issued after its stream broke: ${answers.join(' → ')}`,
          details
        };
  }
}
