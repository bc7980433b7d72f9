// --- How the benchmark measures: interleaved rounds, summaries, reports, processes of their own ---
//
// Machine drift (another job starting, a CPU clocking down) must not land on one kind of call
// only, or it would pass for the guard's cost. So a run is cut into rounds, and every round
// times one batch of every variant of every group, in an order that rotates from round to
// round; a variant's median and p99 are over all its rounds' samples, and its ratio is its
// median over its group's baseline median, measured side by side in the same rounds.

import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { z } from 'zod';

/**
 * Something timed call by call; `prepare` and `finish` around each batch, `beforeCall`,
 * `elsewhere` and `check` around each call, are untimed.
 */
export interface Variant {
  name: string;
  prepare?(calls: number): Promise<void>;
  /** Restores what the call needs, if the machine's pace undid it (an original that ended). */
  beforeCall?(): Promise<void>;
  call(i: number): Promise<unknown>;
  /**
   * A right answer from another path than the one measured (the original ended under the
   * call): not counted, and the call is made again.
   */
  elsewhere?(outcome: Outcome): boolean;
  /** Throws at a wrong answer. */
  check(outcome: Outcome): void;
  finish?(): Promise<void>;
  /** Waits for anything still in flight (a slow original); once, at the end. */
  settle?(): Promise<void>;
}

export type Outcome = { ok: true; result: unknown } | { ok: false; error: unknown };

/** Variants compared with each other; the first is the baseline their ratios divide by. */
export interface Group<Meta> {
  meta: Meta;
  variants: Variant[];
  batchCalls: number;
  /** After each round of this group: drop collected log lines, replace a client. */
  afterRound?: () => Promise<void>;
}

/** A variant's figures, and its median over its group's baseline median. */
export type Row<Meta> = Meta & Summary & { variant: string; ratio: number };

/** Rounds before `rounds` are warm-up, their samples dropped. */
export async function interleave<Meta>(
  groups: ReadonlyArray<Group<Meta>>,
  { rounds, warmupRounds }: { rounds: number; warmupRounds: number },
  progress: (line: string) => void = () => {},
): Promise<Array<Row<Meta>>> {
  const cells = groups.map((group) => ({
    group,
    variants: group.variants.map((variant) => ({ variant, samples: [] as number[] })),
  }));
  try {
    for (let round = -warmupRounds; round < rounds; round++) {
      const started = performance.now();
      for (const { group, variants } of rotate(cells, round + warmupRounds)) {
        for (const { variant, samples } of rotate(variants, round + warmupRounds)) {
          const batch = await timeBatch(variant, group.batchCalls);
          if (round >= 0) samples.push(...batch);
        }
        await group.afterRound?.();
      }
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      if (round >= 0) progress(`round ${round + 1}/${rounds} (${seconds} s)`);
    }
  } finally {
    await Promise.allSettled(groups.flatMap((group) => group.variants.map((variant) => variant.settle?.())));
  }
  return cells.flatMap(({ group, variants }) => {
    const baseline = quantile(variants[0]?.samples ?? [], 0.5);
    return variants.map(({ variant, samples }) => {
      const summary = summarize(samples);
      return { ...group.meta, variant: variant.name, ...summary, ratio: summary.medianUs / baseline };
    });
  });
}

async function timeBatch(variant: Variant, calls: number): Promise<number[]> {
  const samples: number[] = [];
  await variant.prepare?.(calls);
  for (let i = 0; i < calls; i++) samples.push(await checkedCall(variant, i));
  await variant.finish?.();
  return samples;
}

/** How often one call may be made again before the run gives up on its variant. */
const MAX_CALLS_AGAIN = 10;

/** Call `i` of `variant`, checked, made again while its answer came from another path: its µs. */
export async function checkedCall(variant: Variant, i: number): Promise<number> {
  for (let made = 0; made <= MAX_CALLS_AGAIN; made++) {
    await variant.beforeCall?.();
    const sample: number[] = [];
    const outcome = await timed(() => variant.call(i), sample);
    if (variant.elsewhere?.(outcome)) continue;
    variant.check(outcome);
    return sample[0] ?? 0;
  }
  throw new Error(`${variant.name}: call ${i} took another path ${MAX_CALLS_AGAIN + 1} times running`);
}

/** Runs `call`, pushing its duration in µs (answered or thrown alike) onto `samples`. */
export async function timed(call: () => Promise<unknown>, samples: number[] = []): Promise<Outcome> {
  const started = performance.now();
  let outcome: Outcome;
  try {
    outcome = { ok: true, result: await call() };
  } catch (error) {
    outcome = { ok: false, error };
  }
  samples.push((performance.now() - started) * 1000);
  return outcome;
}

/** The items starting at `by` (mod length): each round starts with a different one. */
export function rotate<T>(items: readonly T[], by: number): T[] {
  const start = items.length === 0 ? 0 : by % items.length;
  return [...items.slice(start), ...items.slice(0, start)];
}

/** Nearest-rank quantile (q in 0..1). */
export function quantile(values: readonly number[], q: number): number {
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}

export type Summary = ReturnType<typeof summarize>;
export function summarize(samplesUs: readonly number[]) {
  return { samples: samplesUs.length, medianUs: quantile(samplesUs, 0.5), p99Us: quantile(samplesUs, 0.99) };
}

// --- What a question answers: a table for stdout, its targets (reported, never asserted), its figures ---

export const Report = z.object({
  title: z.string(),
  how: z.string(),
  table: z.string(),
  checks: z.array(z.object({ target: z.string(), figure: z.string(), met: z.boolean() })),
  /** Everything measured, for test/bench/results/latest.json. */
  figures: z.unknown(),
});
export type Report = z.infer<typeof Report>;

/** A plain-text table (headers separated by " | "); a column whose cells all read as numbers is right-aligned. */
export function table(header: string, rows: string[][]): string {
  const headers = header.split(' | ');
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const numeric = headers.map((_, i) => rows.every((row) => /^[-\d.,×% ]*$/.test(row[i] ?? '')));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (numeric[i] ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** A piece's median, p99 (µs, two decimals) and sample count, as table cells. */
export const summaryCells = (summary: Summary): string[] => [
  summary.medianUs.toFixed(2),
  summary.p99Us.toFixed(2),
  String(summary.samples),
];
export const us = (value: number): string => (value >= 100 ? value.toFixed(0) : value.toFixed(1));
export const int = (value: number): string => Math.round(value).toLocaleString('en');
export const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;
/**
 * Set by a quick run, for the processes it starts too: its figures are too rough to judge, so
 * every verdict reads as not judged rather than as a miss or a pass.
 */
export const UNJUDGED_ENV = 'SEP3182_BENCH_UNJUDGED';

/** The Redis the question beside other libraries (peers/measure.ts) runs on, handed to its process. */
export const PEERS_REDIS_URL_ENV = 'SEP3182_BENCH_PEERS_REDIS_URL';

export const yesNo = (met: boolean): string =>
  process.env[UNJUDGED_ENV] === '1' ? 'not judged' : met ? 'yes' : 'NO';

// --- Questions that need a process of their own ---
//
// Memory is measured after `global.gc()` (`--expose-gc`) in a process that holds nothing else;
// a million stored records must not slow what is measured after them; the decision log line is
// written to a pipe, as a server's stderr is. Such a question runs as
// `node <flags> --import tsx test/bench/<file> <args>` and prints its Report as one prefixed JSON line.

const HERE = dirname(fileURLToPath(import.meta.url));
const REPORT_PREFIX = 'BENCH-REPORT ';

/** In a question's own process: `answer` runs if this file is the one node was started with. */
export async function answerIfMain(url: string, answer: (args: number[]) => Promise<Report>): Promise<void> {
  if (process.argv[1] === undefined || url !== pathToFileURL(process.argv[1]).href) return;
  const report = await answer(process.argv.slice(2).map(Number));
  process.stdout.write(`${REPORT_PREFIX}${JSON.stringify(report)}\n`);
}

export async function runChild(file: string, args: number[], nodeFlags: string[]): Promise<Report> {
  const script = [...nodeFlags, '--import', 'tsx', join(HERE, file), ...args.map(String)];
  // Both pipes are read as they fill, so a child writing its stderr never blocks on them.
  const ran = await promisify(execFile)(process.execPath, script, {
    cwd: join(HERE, '..'),
    maxBuffer: 2 ** 30,
  }).catch((error: unknown) => {
    throw new Error(`${file} failed: ${String(Reflect.get(Object(error), 'stderr')).slice(-8_000)}`);
  });
  const line = ran.stdout.split('\n').find((l) => l.startsWith(REPORT_PREFIX)) ?? '';
  return Report.parse(JSON.parse(line.slice(REPORT_PREFIX.length)));
}
