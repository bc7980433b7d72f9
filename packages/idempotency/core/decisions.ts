// --- What the guard decided for a keyed call, told to the operator ---
//
// One word per outcome, the same in the settlement that leads to it, the `onDecision` event, the
// server's log line and the metric's attribute.

import type { RecordId } from '../stores/contract.js';

export type Decision =
  | 'executed'
  /** A round ran and answered `input_required`: the key awaits its continuation. */
  | 'awaitingInput'
  /**
   * A continuation was refused before anything ran (its `requestState` refused, or no opening
   * round under its key awaits input): the key is as it was.
   */
  | 'continuationRefused'
  /** The client lacks a capability the call needs (-32021): nothing acted, the key is as it was. */
  | 'capabilityMissing'
  | 'replayed'
  | 'conflict'
  | 'inProgress'
  | 'invalid'
  /** The caller's scope could not be told (`scopeOf` threw): refused, nothing executed. */
  | 'scopeUnknown'
  | 'storeFull'
  | 'quotaExceeded'
  | 'storeUnavailable'
  /**
   * Executed and answered, but not recorded (its outcome unknown, a store failure, or the lease ran
   * out): a retry may execute again.
   */
  | 'unrecorded';

export interface DecisionEvent {
  decision: Decision;
  scope?: string;
  idempotencyKey?: string;
  tool?: string;
  message?: string;
  durationMs: number;
}

/**
 * Tells `onDecision` what was decided for one keyed call, and how long deciding took.
 * (A class, not a closure made per call: under tsx, esbuild names every such closure with
 * Object.defineProperty as it is made.)
 */
export class DecisionLog {
  private readonly started = performance.now();
  private readonly tool: string | undefined;

  constructor(
    private readonly onDecision: (event: DecisionEvent) => void,
    name: unknown,
  ) {
    this.tool = typeof name === 'string' ? name : undefined;
  }

  decide(decision: Decision, id?: Partial<RecordId>, message?: string): void {
    try {
      this.onDecision({
        decision,
        ...id,
        tool: this.tool,
        message,
        durationMs: roundMs(performance.now() - this.started),
      });
    } catch {
      // A failing log line must never change what the caller is answered.
    }
  }
}

function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
