// --- The cost targets, checked against this run's figures ---
//
// Reported, never asserted: a missed target is a finding to explain, not a failed build.

import type { StoreName, TransportName } from './endpoints.js';
import type { MatrixRow } from './matrix.js';
import type { MemoryResult } from './memory.js';
import type { PieceRow } from './pieces.js';
import type { RoundTripRow } from './round-trips.js';
import type { ScalingResult } from './scaling.js';
import type { VariantName } from './variants.js';

/** Largest ratio to the unkeyed baseline the targets accept, by transport and variant. */
const LATENCY_TARGETS: Record<TransportName, Partial<Record<VariantName, number>>> = {
  'in-process': { first: 1.1, replay: 1.0 },
  stdio: { first: 1.05, replay: 1.0 },
  http: { first: 1.05, replay: 1.0 },
};

/**
 * The latency targets are for the memory store: with Redis, a keyed call adds the guard's
 * round trips to Redis, and the Redis store's target is stated in round trips.
 */
export function latencyTarget(
  transport: TransportName,
  store: StoreName,
  variant: VariantName,
): number | undefined {
  return store === 'memory' ? LATENCY_TARGETS[transport][variant] : undefined;
}

/** "Well under": at most half. */
export const WELL_UNDER = 0.5;

/** "Flat": the median with a million records stored within 10% of the median with a thousand. */
export const FLAT = 1.1;

/** "Bounded": the heap after every call within 5% of the heap when the store reached its cap. */
export const BOUNDED = 1.05;

export interface TargetCheck {
  target: string;
  figure: string;
  met: boolean;
}

export interface TargetInputs {
  matrix: MatrixRow[];
  pieces: PieceRow[];
  roundTrips: RoundTripRow[] | undefined;
  memory: MemoryResult;
  scaling: ScalingResult;
}

export function checkTargets(inputs: TargetInputs): TargetCheck[] {
  const checks: TargetCheck[] = [];
  for (const row of inputs.matrix) {
    const target = latencyTarget(row.transport, row.store, row.variant);
    if (target === undefined || row.argumentsLabel !== 'small') continue;
    checks.push({
      target: `${row.transport}, ${row.store} store, ${row.variant === 'first' ? 'keyed first execution' : 'replay'} ≤ ${target.toFixed(2)} × unkeyed`,
      figure: `${row.ratio.toFixed(3)} × (${row.medianUs.toFixed(1)} µs)`,
      met: row.ratio <= target,
    });
  }
  for (const row of inputs.roundTrips ?? []) {
    if (row.variant === 'baseline') continue;
    checks.push({
      target: `Redis store, ${row.variant}: ≤ ${row.target} round trip${row.target === 1 ? '' : 's'}`,
      figure: `${row.perCall.toFixed(2)}`,
      met: row.met,
    });
  }
  const fingerprint = inputs.pieces.find((p) => p.piece === 'fingerprint' && p.input.startsWith('100 KB'));
  const stdio = inputs.matrix.find(
    (r) =>
      r.transport === 'stdio' &&
      r.store === 'memory' &&
      r.variant === 'baseline' &&
      r.argumentsLabel === 'small',
  );
  if (fingerprint && stdio) {
    const ratio = fingerprint.medianUs / stdio.medianUs;
    checks.push({
      target: `fingerprint of 100 KB arguments well under (≤ ${WELL_UNDER} ×) one stdio round trip`,
      figure: `${fingerprint.medianUs.toFixed(0)} µs = ${ratio.toFixed(2)} × ${stdio.medianUs.toFixed(0)} µs`,
      met: ratio <= WELL_UNDER,
    });
  }
  const { memory } = inputs;
  const growth = memory.after.heapUsedBytes / memory.atCap.heapUsedBytes;
  checks.push({
    target: `memory bounded by the cap at ${memory.calls.toLocaleString('en')} keys (heap ≤ ${BOUNDED} × at the cap)`,
    figure: `${memory.recordsStored.toLocaleString('en')} records; heap ${growth.toFixed(3)} × at the cap`,
    met: memory.recordsStored === memory.cap && growth <= BOUNDED,
  });
  const firsts = inputs.scaling.rows.filter((r) => r.variant === 'first');
  const largest = firsts.at(-1);
  const smallest = firsts[0];
  if (largest && smallest) {
    checks.push({
      target: `first execution flat from ${smallest.storedRecords.toExponential(0)} to ${largest.storedRecords.toExponential(0)} stored records (≤ ${FLAT} ×)`,
      figure: `${largest.ratioToSmallest.toFixed(3)} × (${smallest.medianUs.toFixed(1)} → ${largest.medianUs.toFixed(1)} µs)`,
      met: largest.ratioToSmallest <= FLAT,
    });
  }
  return checks;
}
