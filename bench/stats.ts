// --- Summaries of per-call samples ---
//
// Latency is reported as the median (what a typical call costs) and the 99th percentile
// (what the slow tail costs), in microseconds; throughput as calls per second of busy time.

export interface Summary {
  /** How many samples the figures come from. */
  samples: number;
  medianUs: number;
  p99Us: number;
  /** Calls per second: samples divided by the time they took together. */
  callsPerSecond: number;
}

/** Nearest-rank percentile of sorted values (p in 0..1). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[rank] ?? Number.NaN;
}

export function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    0.5,
  );
}

/** @param samplesUs per-call latencies in microseconds */
export function summarize(samplesUs: readonly number[]): Summary {
  const sorted = Float64Array.from(samplesUs).sort();
  const values = Array.from(sorted);
  let total = 0;
  for (const value of values) total += value;
  return {
    samples: values.length,
    medianUs: percentile(values, 0.5),
    p99Us: percentile(values, 0.99),
    callsPerSecond: total > 0 ? (values.length * 1e6) / total : Number.NaN,
  };
}

/** Microseconds since `startMs` (a `performance.now()` reading). */
export function elapsedUs(startMs: number): number {
  return (performance.now() - startMs) * 1000;
}
