#!/usr/bin/env node
// --- `mcp-idempotency-check` (`npm run check` here): point the SEP-3182 checker at your own MCP server ---
//
// Parses the command line, connects (stdio or Streamable HTTP, either era), runs the checks in
// `rules.ts`, then the explorer's generated histories (`explore.ts`), and prints them as a table
// for people, under a headline saying what kind of server this is (`headline.ts`), or as JSON for
// programs. Exit status (the
// README's table): 0 when every rule that rests on deduplication was observed and no MUST failed,
// 1 when one failed, 2 for a bad command line, 3 when the server could not be reached, 4 when the
// run checked nothing that matters (those rules could not be observed, or the exchange broke).

import { randomInt } from 'node:crypto';
import { parseArgs } from 'node:util';
import type { CounterOption } from './effect.js';
import { explore } from './explore.js';
import { generatedHistories, headline } from './headline.js';
import { counterMistake, type Report, RULES, Run, runChecks, type Status, withExploration } from './rules.js';
import { baseline } from './scenarios.js';
import {
  connect,
  isObject,
  LEGACY_PROTOCOL_VERSION,
  MODERN_PROTOCOL_VERSION,
  type Peer,
  splitCommandLine,
  type Target,
} from './wire.js';

const USAGE = `Usage: mcp-idempotency-check (--command "CMD ARGS…" [--arg A]… | --url URL [--header "K: V"]…) --tool NAME [options]
  --command CMD          spawn CMD and speak stdio (split on spaces; quote with '…' or "…")
  --arg A                one more argument for --command, taken as is (repeatable; --arg=-x for one that starts with -)
  --url URL              a Streamable HTTP endpoint, e.g. http://127.0.0.1:3001/mcp
  --header "K: V"        sent on every HTTP request, e.g. "Authorization: Bearer …" (repeatable)
  --era E                2026-07-28 | 2025-11-25 | auto (default: auto, server/discover then initialize)
  --tool NAME            a tool whose result shows each execution (a balance, a counter)
  --arguments JSON       its arguments (default {})
  --slow-arguments JSON  arguments that keep the call running for a while (in-progress checks)
  --error-arguments JSON arguments that make the call fail (stored-error check)
  --other-tool NAME      a second tool safe to call with the same arguments (conflict check)
  --other-header "K: V"  a second caller's credentials over HTTP, e.g. "Authorization: Bearer …" (scope check; repeatable)
  --forbidden-header "K: V"
                         the same caller's credentials that may not call --tool (authorization-at-replay check; repeatable)
  --same-caller-header "K: V"
                         a second credential of the same caller, e.g. a refreshed token (explored retries; repeatable)
  --counter WHERE        the number that counts executions, if guessing is not enough: a JSON pointer
                         into structuredContent (/balance), or a pattern on the text ("executions: (\\d+)")
  --budget N             how many generated histories the explorer runs (default 30, or 30 s; 0: the rules' checks only)
  --seed N               the explorer's seed, to repeat a run (default: a new one, printed)
  --timeout-ms N         how long to wait for any answer (default 10000)
  --json                 print the results as JSON
  --help                 print this, and exit 0
Exit status: 0 passed, 1 a MUST failed, 2 a bad command line, 3 the server could not be reached,
4 nothing certain about deduplication (the rules that rest on it could not be observed)`;

class UsageError extends Error {}

/** Histories the explorer runs unless --budget says otherwise: well within a minute on a quick server. */
const DEFAULT_BUDGET = 30;
/** Without --budget the explorer also stops generating after this long: a slow tool's run stays short. */
const DEFAULT_EXPLORE_MS = 30_000;

function parseCommandLine(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      command: { type: 'string' },
      arg: { type: 'string', multiple: true, default: [] },
      url: { type: 'string' },
      header: { type: 'string', multiple: true, default: [] },
      era: { type: 'string', default: 'auto' },
      tool: { type: 'string' },
      arguments: { type: 'string', default: '{}' },
      'slow-arguments': { type: 'string' },
      'error-arguments': { type: 'string' },
      'other-tool': { type: 'string' },
      'other-header': { type: 'string', multiple: true, default: [] },
      'forbidden-header': { type: 'string', multiple: true, default: [] },
      'same-caller-header': { type: 'string', multiple: true, default: [] },
      budget: { type: 'string' },
      seed: { type: 'string' },
      counter: { type: 'string' },
      'timeout-ms': { type: 'string', default: '10000' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) throw new UsageError('');
  if ((values.command === undefined) === (values.url === undefined)) {
    throw new UsageError('give exactly one of --command or --url');
  }
  if (!values.tool) throw new UsageError('--tool is required');
  const era = ([MODERN_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSION, 'auto'] as const).find(
    (e) => e === values.era,
  );
  if (!era)
    throw new UsageError(
      `--era must be ${MODERN_PROTOCOL_VERSION}, ${LEGACY_PROTOCOL_VERSION} or auto, got "${values.era}"`,
    );
  const budget = values.budget === undefined ? DEFAULT_BUDGET : Number(values.budget);
  if (!Number.isSafeInteger(budget) || budget < 0)
    throw new UsageError(`--budget must be a whole number, 0 or more, got "${values.budget}"`);
  const seed = values.seed === undefined ? randomInt(2 ** 31) : Number(values.seed);
  if (!Number.isSafeInteger(seed)) throw new UsageError(`--seed must be an integer, got "${values.seed}"`);
  const timeoutMs = Number(values['timeout-ms']);
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) {
    throw new UsageError(`--timeout-ms must be a positive integer, got "${values['timeout-ms']}"`);
  }
  let target: Target;
  if (values.command !== undefined) {
    if (
      [values.header, values['other-header'], values['forbidden-header'], values['same-caller-header']].some(
        (lines) => lines.length > 0,
      )
    ) {
      throw new UsageError(
        '--header, --other-header, --forbidden-header and --same-caller-header apply to --url only (stdio has no headers)',
      );
    }
    const [command, ...args] = [...splitCommandLine(values.command), ...values.arg];
    if (!command) throw new UsageError('--command is empty');
    target = { kind: 'stdio', command, args };
  } else {
    const url = URL.canParse(values.url ?? '') ? new URL(values.url ?? '') : undefined;
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      throw new UsageError(`--url must be an http(s) URL, got "${values.url}"`);
    }
    target = { kind: 'http', url, headers: headers('--header', values.header) };
  }
  const other = values['other-header'];
  const forbidden = values['forbidden-header'];
  const sameCaller = values['same-caller-header'];
  return {
    target,
    otherHeaders: other.length > 0 ? headers('--other-header', other) : undefined,
    // The other headers stay: only the credentials change, the caller is the same.
    forbiddenHeaders:
      forbidden.length > 0 && target.kind === 'http'
        ? { ...target.headers, ...headers('--forbidden-header', forbidden) }
        : undefined,
    // Likewise: the same caller, another credential of theirs.
    sameCallerHeaders:
      sameCaller.length > 0 && target.kind === 'http'
        ? { ...target.headers, ...headers('--same-caller-header', sameCaller) }
        : undefined,
    budget,
    budgetGiven: values.budget !== undefined,
    seed,
    era,
    timeoutMs,
    json: values.json,
    inputs: {
      tool: values.tool,
      arguments: jsonObject('--arguments', values.arguments) ?? {},
      slowArguments: jsonObject('--slow-arguments', values['slow-arguments']),
      errorArguments: jsonObject('--error-arguments', values['error-arguments']),
      otherTool: values['other-tool'],
      counter: counterOption(values.counter),
    },
  };
}

type Options = ReturnType<typeof parseCommandLine>;

function headers(option: string, lines: string[]): Record<string, string> {
  const parsed: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon < 1) throw new UsageError(`${option} must look like "Name: value", got "${line}"`);
    parsed[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return parsed;
}

function jsonObject(option: string, text: string | undefined): Record<string, unknown> | undefined {
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${option} is not JSON: ${messageOf(error)}`);
  }
  if (!isObject(value)) throw new UsageError(`${option} must be a JSON object, got ${text}`);
  return value;
}

/** `--counter`: a JSON pointer into `structuredContent` (it starts with `/`), or else a pattern. */
function counterOption(text: string | undefined): CounterOption | undefined {
  if (text === undefined) return undefined;
  if (text.startsWith('/')) return { pointer: text };
  try {
    return { pattern: new RegExp(text) };
  } catch (error) {
    throw new UsageError(`--counter is neither a JSON pointer (/…) nor a pattern: ${messageOf(error)}`);
  }
}

/** An error's message, with its cause's code where it has one: `fetch failed (ECONNREFUSED)`. */
function messageOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause: unknown = error.cause;
  const code =
    typeof cause === 'object' && cause !== null
      ? (Reflect.get(cause, 'code') ?? Reflect.get(cause, 'message'))
      : undefined;
  return typeof code === 'string' && !error.message.includes(code)
    ? `${error.message} (${code})`
    : error.message;
}

/** What to do about a target that could not be reached. */
function nextStep(target: Target, message: string): string {
  if (target.kind !== 'http') return '';
  if (/ENOTFOUND|EAI_AGAIN/.test(message))
    return `: no such host; check the host in --url ${target.url.href}`;
  if (/ECONNREFUSED|ECONNRESET|fetch failed/.test(message))
    return `: is the server running and listening at ${target.url.href}? Start it first, or correct --url`;
  return '';
}

/**
 * Refuses a --tool (or --other-tool) the server does not list, naming the ones it does: every rule
 * would otherwise end "not checkable" for a typo. A server that pages its list is not second-guessed.
 */
async function checkToolsListed(
  peer: Peer,
  tools: Array<[option: string, name: string | undefined]>,
): Promise<void> {
  const answer = await peer.request('tools/list', '{}');
  const result = answer.message.result;
  if (!isObject(result) || !Array.isArray(result.tools) || result.nextCursor !== undefined) return;
  const listed = result.tools.flatMap((tool) =>
    isObject(tool) && typeof tool.name === 'string' ? [tool.name] : [],
  );
  for (const [option, name] of tools) {
    if (name !== undefined && !listed.includes(name))
      throw new UsageError(
        `${option} ${name}: the server lists no such tool; its tools: ${listed.join(', ') || 'none'}`,
      );
  }
}

// --- Output ---

const SYMBOL: Record<Status, string> = {
  passed: '✓',
  failed: '✗',
  warned: '⚠',
  'not applicable': '–',
  'not checkable': '–',
};

function describeTarget(target: Target): string {
  return target.kind === 'stdio'
    ? `stdio: ${[target.command, ...target.args].join(' ')}`
    : `HTTP: ${target.url.href}`;
}

/** Exit status: a MUST failed; nothing that matters could be observed (see the README). */
const FAILED = 1;
const UNOBSERVED = 4;

function table(options: Options, peer: Peer, run: Run, report: Report): string {
  const { results } = report;
  const out: string[] = [];
  out.push(headline(report));
  out.push(`SEP-3182 idempotency check of ${describeTarget(options.target)}`);
  out.push(`protocol ${peer.era}; tool ${options.inputs.tool} ${JSON.stringify(options.inputs.arguments)}`);
  out.push(`counter: ${report.counter ?? 'none found'}`);
  const width = Math.max(...RULES.map((rule) => rule.id.length));
  let section = '';
  for (const result of results) {
    if (result.section !== section) {
      section = result.section;
      out.push('', section);
    }
    const note = result.status.startsWith('not') ? `${result.status}: ` : '';
    out.push(`  ${SYMBOL[result.status]} ${result.id.padEnd(width)}  ${note}${result.observed}`);
    if (result.status === 'failed' || result.status === 'warned') {
      out.push(`${' '.repeat(width + 6)}SEP: “${result.sentence}”`);
    }
  }
  const count = (status: Status) => results.filter((r) => r.status === status).length;
  out.push('', ...explorationLines(report));
  if (report.broken) {
    out.push(
      `The exchange broke during ${report.broken.during}: ${report.broken.reason}; ` +
        `${report.notRun.length} more checks not run`,
    );
  }
  const why = unobservedLine(report);
  if (why) out.push(why);
  out.push(`${run.calls} tools/call requests made (${run.keyedCalls} with an idempotencyKey)`);
  out.push(
    `${count('failed')} failed (MUST), ${count('warned')} warned (SHOULD), ${count('passed')} passed, ` +
      `${count('not applicable')} not applicable, ${count('not checkable')} not checkable` +
      (report.notRun.length ? `, ${report.notRun.length} not run` : ''),
  );
  return `${out.join('\n')}\n`;
}

/** What the explorer did, and the shrunk history of what it found, to replay as it was sent. */
function explorationLines({ exploration }: Report): string[] {
  if (!exploration) return [];
  const { histories, seed, budget, calls, unjudged, failure, notes } = exploration;
  const out = [
    `Explored ${generatedHistories(histories)} (--seed ${seed}, --budget ${budget}): ${calls} tools/call requests` +
      (unjudged ? `, ${unjudged} left unjudged (the counter could not be read)` : '') +
      (notes.length ? `; ${notes.join('; ')}` : ''),
  ];
  if (!failure) out.push('  every history did what the SEP requires of it');
  else {
    const { rule, steps, transcript } = failure;
    out.push(
      `  ✗ ${rule}: a history of ${steps.found} step${steps.found === 1 ? '' : 's'} broke it, shrunk to ${steps.shrunk}; as sent, to replay:`,
      ...transcript.map((line) => `    ${line}`),
    );
  }
  out.push('');
  return out;
}

/** The line that says why a run proved nothing, and what to pass; undefined if it proved something. */
function unobservedLine({ unobserved, results, broken }: Report): string | undefined {
  if (unobserved.length === 0) return undefined;
  const rules = `${unobserved.length === 1 ? '1 rule that rests' : `${unobserved.length} rules that rest`} on it could not be observed (${unobserved.join(', ')})`;
  if (broken)
    return `Nothing certain about deduplication: the exchange broke during ${broken.during}, so ${rules}. The server must answer every call within --timeout-ms.`;
  const first = results.find((r) => r.id === unobserved[0]);
  return (
    `Nothing certain about deduplication: ${rules}; ${first?.id}: ${first?.observed}. ` +
    'Pass a --tool and --arguments whose call succeeds, with a key and without, and shows a counter ' +
    'that moves at each execution (a balance, a count); --counter names it where the checker cannot ' +
    'tell which number it is.'
  );
}

/**
 * The report with the explorer's histories in it: over HTTP each may go over a fresh session, a
 * second credential of the caller (`--same-caller-header`) or the other era where it is served.
 */
async function explored(
  report: Report,
  run: Run,
  options: Options,
  peer: Peer,
  as: (option: string, headers?: Record<string, string>) => Promise<Peer | undefined>,
  peers: Peer[],
): Promise<Report> {
  const { target, timeoutMs, budget, seed } = options;
  if (budget === 0 || run.broken) return report;
  const { counter } = await baseline(run).catch(() => ({ counter: undefined }));
  if (!counter) return report;
  const sameCaller = await as('--same-caller-header', options.sameCallerHeaders);
  const reconnect =
    target.kind === 'http'
      ? async (era = peer.era) => {
          const fresh = await connect(target, { era, timeoutMs });
          peers.push(fresh);
          return fresh;
        }
      : undefined;
  const otherEra = await reconnect?.(
    peer.era === MODERN_PROTOCOL_VERSION ? LEGACY_PROTOCOL_VERSION : MODERN_PROTOCOL_VERSION,
  ).catch(() => undefined);
  run.current = 'the explorer';
  const exploration = await explore(run, counter, {
    budget,
    seed,
    // Without --budget a run stays short on a slow tool too; with it, every history runs.
    ...(!options.budgetGiven && { timeLimitMs: DEFAULT_EXPLORE_MS }),
    ...(reconnect && { reconnect: () => reconnect() }),
    ...(sameCaller && { sameCaller }),
    ...(otherEra && { otherEra }),
  });
  return withExploration(report, exploration);
}

async function main(argv: string[]): Promise<number> {
  let options: Options;
  try {
    options = parseCommandLine(argv);
  } catch (error) {
    const message = messageOf(error);
    // --help asked for the usage: it goes to stdout; a mistake gets it on stderr, after the error.
    if (!message) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    process.stderr.write(`error: ${message}\n${USAGE}\n`);
    return 2;
  }
  const { target, era, timeoutMs } = options;
  const peers: Peer[] = [];
  try {
    const peer = await connect(target, { era, timeoutMs });
    peers.push(peer);
    await checkToolsListed(peer, [
      ['--tool', options.inputs.tool],
      ['--other-tool', options.inputs.otherTool],
    ]);
    // The other callers are the same target with other headers, in the era the first one found.
    const as = async (option: string, headers?: Record<string, string>) => {
      if (!headers || target.kind !== 'http') return undefined;
      const caller = await connect({ ...target, headers }, { era: peer.era, timeoutMs }).catch((error) => {
        throw new Error(`with ${option}: ${messageOf(error)}`);
      });
      peers.push(caller);
      return caller;
    };
    const other = await as('--other-header', options.otherHeaders);
    const forbidden = await as('--forbidden-header', options.forbiddenHeaders);
    const run = new Run(peer, { ...options.inputs, other, forbidden, transport: target.kind });
    // A --counter that reads no moving number is a mistake of the command line: every rule would
    // end "not checkable" for it, so say what it found instead, as for a --tool the server lacks.
    const mistake = await counterMistake(run);
    if (mistake) throw new UsageError(mistake);
    const report = await explored(await runChecks(run), run, options, peer, as, peers);
    const summary = {
      target: describeTarget(target),
      era: peer.era,
      capabilitiesFrom: peer.discoveredBy,
      tool: options.inputs.tool,
      calls: run.calls,
      keyedCalls: run.keyedCalls,
      checks: report.results,
      notRun: report.notRun,
      broken: report.broken ?? null,
      unobserved: report.unobserved,
      counter: report.counter ?? null,
      headline: headline(report),
      explored: report.exploration
        ? { ...report.exploration, failure: report.exploration.failure ?? null }
        : null,
    };
    if (options.json) {
      process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
      const why = unobservedLine(report);
      if (why) process.stderr.write(`${why}\n`);
    } else process.stdout.write(table(options, peer, run, report));
    if (report.results.some((r) => r.status === 'failed')) return FAILED;
    return report.unobserved.length > 0 ? UNOBSERVED : 0;
  } catch (error) {
    const message = messageOf(error);
    if (error instanceof UsageError) {
      process.stderr.write(`error: ${message}\n`);
      return 2;
    }
    process.stderr.write(
      `could not check ${describeTarget(target)}: ${message}${nextStep(target, message)}\n`,
    );
    return 3;
  } finally {
    await Promise.all(peers.map((peer) => peer.close()));
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 3;
  },
);
