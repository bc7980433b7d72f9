// --- The payment provider: the external system a charge mutates ---
//
// It knows nothing about idempotency, like a real provider called by a tool that forgot to
// pass a key along. Its latency is configurable so the demo can hold a charge open long
// enough for a duplicate to arrive, or for the client to give up waiting.

export interface Ledger {
  /** Commits `amount` (minor units) and returns the new balance. */
  charge(amount: number): Promise<number>;
  balance(): Promise<number>;
  reset(): Promise<void>;
}

export class MemoryLedger implements Ledger {
  private total = 0;

  /** @param latencyMs how long the provider takes before a charge commits */
  constructor(private readonly latencyMs = 0) {}

  async charge(amount: number): Promise<number> {
    if (this.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.latencyMs));
    this.total += amount;
    return this.total;
  }

  async balance(): Promise<number> {
    return this.total;
  }

  async reset(): Promise<void> {
    this.total = 0;
  }
}
