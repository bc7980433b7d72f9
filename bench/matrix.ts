// --- Per-call latency of every variant, on every transport and store, interleaved ---
//
// Machine drift (another job starting, a CPU clocking down) must not land on one variant
// only, or it would pass for the guard's cost. So the run is cut into rounds, and every
// round runs one batch of every variant of every group, in an order that rotates from round
// to round; each variant's median and p99 are taken over all its rounds' samples.

import type { Endpoint, StoreName, TransportName } from './endpoints.js';
import { elapsedUs, median, type Summary, summarize } from './stats.js';
import type { Outcome, Variant, VariantName } from './variants.js';

/** Variants compared with each other: the same transport, store and arguments. */
export interface MatrixGroup {
  transport: TransportName;
  store: StoreName;
  /** The arguments' size, e.g. "small"; the main matrix uses small arguments only. */
  argumentsLabel: string;
  variants: Variant[];
  /** Servers whose collected log lines are dropped, and clients refreshed, after each round. */
  endpoints: Endpoint[];
  /** Timed calls of each variant per round. */
  batchCalls: number;
  /** Untimed calls of each variant before the first round. */
  warmupCalls: number;
}

export interface MatrixRow extends Summary {
  transport: TransportName;
  store: StoreName;
  argumentsLabel: string;
  variant: VariantName;
  /** This variant's median over the baseline's median, same group. */
  ratio: number;
  /** The spread of that ratio from round to round (median, min and max of each round's own ratio). */
  roundRatio: { median: number; min: number; max: number };
}

interface Cell {
  group: MatrixGroup;
  variant: Variant;
  samplesUs: number[];
  /** Median of each round's batch, for the round-to-round ratio. */
  roundMediansUs: number[];
}

export async function runMatrix(
  groups: readonly MatrixGroup[],
  rounds: number,
  progress: (message: string) => void,
): Promise<MatrixRow[]> {
  const cells: Cell[][] = groups.map((group) =>
    group.variants.map((variant) => ({ group, variant, samplesUs: [], roundMediansUs: [] })),
  );
  try {
    for (const group of groups) {
      for (const variant of group.variants) await runBatch(variant, group.warmupCalls);
      for (const endpoint of group.endpoints) await endpoint.refresh?.();
    }
    for (let round = 0; round < rounds; round++) {
      const started = performance.now();
      for (const groupCells of rotate(cells, round)) {
        for (const cell of rotate(groupCells, round)) {
          const samples = await runBatch(cell.variant, cell.group.batchCalls);
          cell.samplesUs.push(...samples);
          cell.roundMediansUs.push(median(samples));
        }
        for (const endpoint of groupCells[0]?.group.endpoints ?? []) {
          endpoint.forgetLogs();
          await endpoint.refresh?.();
        }
      }
      progress(`round ${round + 1}/${rounds} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
    }
  } finally {
    await Promise.allSettled(cells.flat().map((cell) => cell.variant.settle()));
  }
  return cells.flatMap(rowsOf);
}

async function runBatch(variant: Variant, calls: number): Promise<number[]> {
  const samples: number[] = [];
  await variant.prepare(calls);
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    let outcome: Outcome;
    try {
      const result = await variant.call(i);
      samples.push(elapsedUs(started));
      outcome = { ok: true, result };
    } catch (error) {
      samples.push(elapsedUs(started));
      outcome = { ok: false, error };
    }
    variant.check(outcome);
  }
  await variant.finish();
  return samples;
}

function rowsOf(groupCells: Cell[]): MatrixRow[] {
  const baseline = groupCells.find((cell) => cell.variant.name === 'baseline');
  if (!baseline) throw new Error('every group measures a baseline');
  const baselineSummary = summarize(baseline.samplesUs);
  return groupCells.map((cell) => {
    const summary = cell === baseline ? baselineSummary : summarize(cell.samplesUs);
    const perRound = cell.roundMediansUs.map((value, round) => value / (baseline.roundMediansUs[round] ?? 0));
    return {
      transport: cell.group.transport,
      store: cell.group.store,
      argumentsLabel: cell.group.argumentsLabel,
      variant: cell.variant.name,
      ...summary,
      ratio: summary.medianUs / baselineSummary.medianUs,
      roundRatio: { median: median(perRound), min: Math.min(...perRound), max: Math.max(...perRound) },
    };
  });
}

/** The items starting at `by` (mod length): each round starts with a different one. */
export function rotate<T>(items: readonly T[], by: number): T[] {
  const start = items.length === 0 ? 0 : by % items.length;
  return [...items.slice(start), ...items.slice(0, start)];
}
