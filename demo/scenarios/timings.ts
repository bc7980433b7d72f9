// --- The demo's timings: a charge slow enough to be caught running, a client too impatient to wait ---

import type { RetryPolicy } from 'mcp-request-idempotency/client';

/** A charge slow enough to overlap a duplicate, or to outlast a client's patience. */
export const SLOW_CHARGE_MS = 800;
/** The demo client's per-request timeout in the lost-response scenarios: well under the charge. */
export const IMPATIENT_TIMEOUT_MS = 250;

/**
 * How the lost-response scenarios retry: give up on each attempt after IMPATIENT_TIMEOUT_MS, then
 * retry soon and often enough that the slow charge is met still running, and later finished.
 */
export const IMPATIENT_RETRIES: RetryPolicy = {
  timeoutMs: IMPATIENT_TIMEOUT_MS,
  initialBackoffMs: 100,
  maxBackoffMs: 300,
  maxAttempts: 30,
};

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
