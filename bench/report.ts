// --- The tables the benchmark prints ---

import type { ConcurrencyRow } from './concurrency.js';
import type { MatrixRow } from './matrix.js';
import type { MemoryResult } from './memory.js';
import type { PieceRow } from './pieces.js';
import type { RoundTripRow } from './round-trips.js';
import type { ScalingResult } from './scaling.js';
import { latencyTarget, type TargetCheck } from './targets.js';
import { VARIANT_LABEL } from './variants.js';

type Align = 'left' | 'right';

/** A plain-text table: a header, a rule, the rows; numbers right-aligned. */
export function table(headers: string[], rows: string[][], align: Align[]): string {
  const widths = headers.map((header, i) =>
    Math.max(header.length, ...rows.map((row) => (row[i] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (align[i] === 'right' ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

export const us = (value: number): string => (value >= 100 ? value.toFixed(0) : value.toFixed(1));
export const int = (value: number): string => Math.round(value).toLocaleString('en');
export const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;
const yesNo = (met: boolean): string => (met ? 'yes' : 'NO');

export function formatMatrix(rows: MatrixRow[], skipped: string | undefined): string {
  const body: string[][] = [];
  for (const row of rows) {
    const target = latencyTarget(row.transport, row.store, row.variant);
    body.push([
      row.transport,
      row.store,
      VARIANT_LABEL[row.variant],
      us(row.medianUs),
      us(row.p99Us),
      int(row.callsPerSecond),
      row.ratio.toFixed(3),
      target === undefined ? '' : `≤ ${target.toFixed(2)}`,
      target === undefined ? '' : yesNo(row.ratio <= target),
    ]);
  }
  if (skipped) {
    for (const transport of ['in-process', 'stdio', 'http'])
      body.push([transport, 'redis', skipped, '', '', '', '', '', '']);
  }
  return table(
    ['transport', 'store', 'variant', 'median µs', 'p99 µs', 'calls/s', 'ratio', 'target', 'met?'],
    body,
    ['left', 'left', 'left', 'right', 'right', 'right', 'right', 'left', 'left'],
  );
}

export function formatLargeArguments(rows: MatrixRow[]): string {
  return table(
    ['arguments', 'variant', 'median µs', 'p99 µs', 'calls/s', 'ratio'],
    rows.map((row) => [
      row.argumentsLabel,
      VARIANT_LABEL[row.variant],
      us(row.medianUs),
      us(row.p99Us),
      int(row.callsPerSecond),
      row.ratio.toFixed(3),
    ]),
    ['left', 'left', 'right', 'right', 'right', 'right'],
  );
}

export function formatPieces(rows: PieceRow[]): string {
  return table(
    ['piece', 'input', 'median µs', 'p99 µs', 'calls per batch'],
    rows.map((row) => [
      row.piece,
      row.input,
      row.medianUs.toFixed(2),
      row.p99Us.toFixed(2),
      int(row.batchCalls),
    ]),
    ['left', 'left', 'right', 'right', 'right'],
  );
}

export function formatRoundTrips(rows: RoundTripRow[]): string {
  const list = (counts: Record<string, number>) =>
    Object.entries(counts)
      .map(([name, n]) => `${name} ${n.toFixed(2)}`)
      .join(', ') || '-';
  return table(
    [
      'decision',
      'round trips',
      'target',
      'met?',
      'sent by the guard',
      'run inside scripts',
      'tool (not counted)',
    ],
    rows.map((row) => [
      VARIANT_LABEL[row.variant],
      row.perCall.toFixed(2),
      row.variant === 'baseline' ? '' : `≤ ${row.target}`,
      row.variant === 'baseline' ? '' : yesNo(row.met),
      list(row.byCommand),
      list(row.inScripts),
      list(row.tool),
    ]),
    ['left', 'right', 'left', 'left', 'left', 'left', 'left'],
  );
}

export function formatMemory(memory: MemoryResult): string {
  const rows = [
    ['before (warm, nothing stored)', mb(memory.before.heapUsedBytes), mb(memory.before.rssBytes)],
    [`at the cap (${int(memory.cap)} calls)`, mb(memory.atCap.heapUsedBytes), mb(memory.atCap.rssBytes)],
    [`after ${int(memory.calls)} calls`, mb(memory.after.heapUsedBytes), mb(memory.after.rssBytes)],
  ];
  return [
    `executed ${int(memory.executed)}, refused with idempotency_store_full ${int(memory.refusedStoreFull)}, records stored ${int(memory.recordsStored)} (${memory.seconds.toFixed(1)} s)`,
    table(['after global.gc()', 'heap used', 'RSS'], rows, ['left', 'right', 'right']),
    `per record: ${int(memory.bytesPerRecord)} B of heap = stored result ${int(memory.resultBytes)} B + the record itself ${int(memory.recordOverheadBytes)} B`,
  ].join('\n');
}

export function formatScaling(scaling: ScalingResult): string {
  return table(
    ['records stored', 'variant', 'median µs', 'p99 µs', 'calls/s', 'ratio to fewest'],
    scaling.rows.map((row) => [
      int(row.storedRecords),
      VARIANT_LABEL[row.variant],
      us(row.medianUs),
      us(row.p99Us),
      int(row.callsPerSecond),
      row.ratioToSmallest.toFixed(3),
    ]),
    ['right', 'left', 'right', 'right', 'right', 'right'],
  );
}

export function formatConcurrency(rows: ConcurrencyRow[]): string {
  return table(
    ['transport', 'store', 'clients', 'variant', 'calls/s', 'median µs', 'p99 µs', 'ratio'],
    rows.map((row) => [
      row.transport,
      row.store,
      String(row.clients),
      VARIANT_LABEL[row.variant],
      int(row.callsPerSecond),
      us(row.medianUs),
      us(row.p99Us),
      row.ratio.toFixed(3),
    ]),
    ['left', 'left', 'right', 'left', 'right', 'right', 'right', 'right'],
  );
}

export function formatTargets(checks: TargetCheck[]): string {
  return table(
    ['target', 'figure', 'met?'],
    checks.map((check) => [check.target, check.figure, yesNo(check.met)]),
    ['left', 'left', 'left'],
  );
}
