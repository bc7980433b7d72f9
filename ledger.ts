// --- The payment provider: the external system a charge mutates ---
//
// Five of them, behind one interface. `MemoryLedger`, here, and `RedisLedger` for several
// instances are the provider that takes no keys: they commit every call they are given, like a
// provider called by a tool that forgot to pass a key along. `PostgresLedger` and `SqliteLedger`
// keep the balance beside the idempotency records, so a charge commits with its record.
// `ProviderLedger` is a payment API over HTTP (`payment-provider/`, or any provider that follows
// docs/provider-wire.md) that takes an `Idempotency-Key`, and the client a payment SDK would
// give a tool: it sends the key it is handed on every one of its own retries. The four that
// reach outside this process live in hosting/ledgers/, one file each.
// Latency is configurable so the demo can hold a charge open long enough for a duplicate to
// arrive, or for the client to give up waiting.

/** What a tool passes along with a charge: the provider's own key, if the provider takes one. */
export interface ChargeOptions {
  idempotencyKey?: string;
}

export interface RefundOptions extends ChargeOptions {
  /** The order the refund pays back (a provider may require it). */
  orderId?: string;
}

export interface Ledger {
  /** Commits `amount` (minor units) and returns the new balance. */
  charge(amount: number, options?: ChargeOptions): Promise<number>;
  /** Pays `amount` back (the balance goes down by it) and returns the new balance. */
  refund(amount: number, options?: RefundOptions): Promise<number>;
  balance(): Promise<number>;
  reset(): Promise<void>;
  /**
   * How long the provider behind the ledger keeps an idempotency key and replays its answer;
   * absent for a ledger that takes no key. The guard keeps its records at least this long.
   */
  readonly providerKeyRetentionMs?: number;
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

  refund(amount: number): Promise<number> {
    return this.charge(-amount);
  }

  async balance(): Promise<number> {
    return this.total;
  }

  async reset(): Promise<void> {
    this.total = 0;
  }
}
