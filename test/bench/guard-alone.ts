// --- What does the guard alone cost, and each of its pieces? ---
//
// In a process of its own, whose stderr is a pipe as a server's is:
//   node --expose-gc --import tsx test/bench/guard-alone.ts <rounds> <ms per piece per round>
// The real guard in front of a no-op tool: no SDK, no transport, no parsing. Then its pieces:
// key validation, the fingerprint by size, server.ts's decision log line, and what the other hop's
// provider key costs: deriving one, and running each dispatch in the execution context that
// carries it (packages/idempotency/core/execution.ts), against calling the dispatch directly. mitata runs each
// piece's timing loop (batches of calls for what takes nanoseconds, fresh arguments made outside
// the timed region, a GC before each piece); the pieces take turns in rotating order, round after
// round, and a piece's median and p99 are over all its rounds' samples.

import { randomUUID } from 'node:crypto';
import {
  checkIdempotencyKey,
  createToolCallGuard,
  type DecisionEvent,
  fingerprintToolCall,
  type JsonObject,
  MemoryIdempotencyStore,
  runExecution,
  ToolExecution,
} from 'mcp-request-idempotency';
import { measure } from 'mitata';
import { logDecision } from '../../demo/hosting/log.js';
import { AMOUNT, chargeResult, jsonBytes, orderArgumentsOfSize, TOOL, WrongAnswerError } from './calls.js';
import { answerIfMain, type Report, rotate, summarize, summaryCells, table, yesNo } from './harness.js';

export interface Piece {
  piece: string;
  input: string;
  run(params: unknown): unknown;
  params?: () => unknown;
  /** A bound on what the piece costs a call: its median, or what it adds to the median of `over`. */
  targetUs?: number;
  over?: Piece;
  samples: number[];
}

/** A piece to time: `params`, when given, are made per call outside the timed region (a fresh key, a fresh parse). */
export function piece(
  piece: string,
  input: string,
  run: (params: unknown) => unknown,
  params?: () => unknown,
): Piece {
  return { piece, input, run, params, samples: [] };
}

/** What the provider key may cost a call: nothing a tool call would notice (an unkeyed one takes tens of µs in process). */
const PROVIDER_KEY_TARGET_US = 1;

const SMALL = { amount: AMOUNT };
const NOOP_RESULT: JsonObject = chargeResult(AMOUNT);

async function pieces(): Promise<Piece[]> {
  const room = { maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000 };
  const guard = createToolCallGuard({ store: new MemoryIdempotencyStore(room) });
  const answered = async (params: unknown) => {
    const result = await guard(Object(params), {}, async () => NOOP_RESULT);
    if (result !== NOOP_RESULT) throw new WrongAnswerError('guard alone: not the tool result');
  };
  const stored = { name: TOOL, arguments: SMALL, idempotencyKey: randomUUID() };
  await answered(stored);
  const key = randomUUID();
  const validate = () => {
    if (!checkIdempotencyKey(key).ok) throw new WrongAnswerError(key);
  };
  const fingerprint = (parsed: unknown) => {
    if (!fingerprintToolCall(TOOL, parsed).ok) throw new WrongAnswerError('fingerprint failed');
  };
  const sizes = {
    small: SMALL,
    '1 KB': orderArgumentsOfSize(1_024),
    '100 KB': orderArgumentsOfSize(102_400),
  };
  // Once per keyed decision, before the guard's answer goes out: built and batched (demo/hosting/log.ts), the
  // batch written to stderr (a pipe, written synchronously on Linux) every 25 ms.
  const event: DecisionEvent = { decision: 'executed', scope: 'local', idempotencyKey: key, durationMs: 0.1 };
  const logLine = () => logDecision({ ...event, tool: TOOL });
  const input = 'no-op tool, small arguments';
  const fresh = () => ({ ...stored, idempotencyKey: randomUUID() });
  const parse = (args: unknown) => () => JSON.parse(JSON.stringify(args));
  // The other hop: a tool derives its provider key from the execution it runs in, which the guard
  // builds per call and runs every dispatch inside (an AsyncLocalStorage).
  const keyedKey = () => new ToolExecution('local', TOOL, key).providerKey('charge');
  const unkeyedKey = () => new ToolExecution('local', TOOL).providerKey('charge');
  const dispatch = async () => NOOP_RESULT;
  const execution = new ToolExecution('local', TOOL, key);
  const direct = piece('dispatch', 'called directly', dispatch);
  const inContext = piece('dispatch', 'in the execution context', () => runExecution(execution, dispatch));
  const targetUs = PROVIDER_KEY_TARGET_US;
  return [
    piece('guard alone: first execution', input, answered, fresh),
    piece('guard alone: replay', input, () => answered(stored)),
    piece('key validation', 'UUID (36 chars)', validate),
    // A fresh parse per call, as the guard gets: no strings or shapes cached from last time.
    ...Object.entries(sizes).map(([label, args]) =>
      piece('fingerprint', `${label} (${jsonBytes(args)} B)`, fingerprint, parse(args)),
    ),
    piece('decision log line', 'batched for stderr (a pipe)', logLine),
    { ...piece('provider key', 'keyed call (from the MCP key)', keyedKey), targetUs },
    { ...piece('provider key', 'unkeyed call (a fresh seed)', unkeyedKey), targetUs },
    direct,
    { ...inContext, targetUs, over: direct },
  ];
}

/**
 * Times every piece for `rounds` rounds, taking turns in rotating order, into its `samples` (µs a
 * call). Round -1 is warm-up, its samples dropped.
 */
export async function timePieces(all: Piece[], rounds: number, msPerPiece: number): Promise<void> {
  // A fresh object each time: mitata writes its defaults and a generator's parameters into it.
  const options = () => ({ min_cpu_time: msPerPiece * 1e6, min_samples: 4, batch_samples: 64 });
  for (let round = -1; round < rounds; round++) {
    for (const p of rotate(all, round + 1)) {
      const { params, run } = p;
      const stats = params
        ? await measure(function* () {
            yield { 0: params, bench: run };
          }, options())
        : await measure(() => run(undefined), options());
      // Nanoseconds per call (in a batch, its time over its calls).
      if (round >= 0) p.samples.push(...stats.samples.map((ns) => ns / 1000));
    }
  }
}

async function main([rounds = 20, msPerPiece = 5]: number[]): Promise<Report> {
  const all = await pieces();
  await timePieces(all, rounds, msPerPiece);
  const rows = all.map((p) => {
    const summary = summarize(p.samples);
    const row = { piece: p.piece, input: p.input, ...summary };
    if (p.targetUs === undefined) return { ...row, target: '' };
    const costUs = summary.medianUs - (p.over ? summarize(p.over.samples).medianUs : 0);
    const met = costUs <= p.targetUs;
    const added = p.over ? `+${costUs.toFixed(2)} over ${p.over.input}, ` : '';
    return { ...row, costUs, targetUs: p.targetUs, met, target: `${added}≤ ${p.targetUs} ${yesNo(met)}` };
  });
  return {
    title: 'The guard alone, and its pieces',
    how:
      `${rounds} interleaved rounds of ~${msPerPiece} ms per piece, timed by mitata (a sample: a batch's time over its calls).\n` +
      'Guard alone: the real guard in front of a no-op tool, no transport, no SDK parsing; stderr is a pipe.',
    table: table(
      'piece | input | median µs | p99 µs | samples | target µs a call',
      rows.map((r) => [r.piece, r.input, ...summaryCells(r), r.target]),
    ),
    checks: rows.flatMap((r) =>
      'met' in r
        ? [
            {
              target: `${r.piece}, ${r.input}: ≤ ${r.targetUs} µs a call`,
              figure: `${r.costUs.toFixed(2)} µs`,
              met: r.met,
            },
          ]
        : [],
    ),
    figures: rows,
  };
}

await answerIfMain(import.meta.url, main);
