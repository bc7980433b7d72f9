// --- The payment provider: the external system a charge mutates ---
//
// Five of them, behind one interface. `MemoryLedger`, here, and `RedisLedger` for several
// instances are the provider that takes no keys: they commit every call they are given, like a
// provider called by a tool that forgot to pass a key along. `PostgresLedger` and `SqliteLedger`
// keep the balance beside the idempotency records, so a charge commits with its record.
// `ProviderLedger` is a payment API over HTTP (`demo/payment-provider/`, or any provider that follows
// docs/provider-wire.md) that takes an `Idempotency-Key`, and the client a payment SDK would
// give a tool: it sends the key it is handed on every one of its own retries. The four that
// reach outside this process live in demo/hosting/ledgers/, one file each.
// Latency is configurable so the demo can hold a charge open long enough for a duplicate to
// arrive, or for the client to give up waiting.
//
// Every one of them declines a charge over CHARGE_LIMIT, as a card's issuer declines one over the
// card's limit, and numbers each decline by its own count of them: the count lives where the
// balance does, so a fleet shares it. That number is what tells a stored decline, replayed to a
// keyed retry, from a fresh one (SEP-3182 replays errors as it replays successes).

/** What a tool passes along with a charge: the provider's own key, if the provider takes one. */
export interface ChargeOptions {
  idempotencyKey?: string;
}

export interface RefundOptions extends ChargeOptions {
  /** The order the refund pays back (a provider may require it). */
  orderId?: string;
}

/**
 * The largest charge a provider here accepts, in minor units: Stripe's largest charge in a
 * two-decimal currency (999 999.99). High enough that no charge the demo, the tests or the
 * benchmarks mean to commit is declined, and one past it is an ordinary JSON number.
 */
export const CHARGE_LIMIT = 99_999_999;

/**
 * A charge the provider declined: nothing was committed. `decline` is the provider's count of
 * declines, this one included, so no two declines read alike (a real provider's decline id).
 */
export class ChargeDeclined extends Error {
  constructor(
    readonly amount: number,
    readonly limit: number,
    readonly decline: number,
  ) {
    super(declineMessage(amount, limit, decline));
    this.name = 'ChargeDeclined';
  }
}

/** What a decline says, the tool's answer and the provider's alike: its number last, where a reader finds it. */
export function declineMessage(amount: number, limit: number, decline: number): string {
  return `Declined: amount ${amount} over the limit of ${limit} (decline ${decline})`;
}

/** Whether a provider here declines a charge of `amount`. */
export const declines = (amount: number): boolean => amount > CHARGE_LIMIT;

/**
 * What every ledger here does before it commits a charge: an amount over CHARGE_LIMIT is declined,
 * counted by `countDecline` (the ledger's own count, kept where its balance is) and thrown,
 * numbered. Nothing is committed.
 */
export async function declineOverLimit(amount: number, countDecline: () => Promise<number>): Promise<void> {
  if (declines(amount)) throw new ChargeDeclined(amount, CHARGE_LIMIT, await countDecline());
}

export interface Ledger {
  /**
   * Commits `amount` (minor units) and returns the new balance; an amount over CHARGE_LIMIT
   * commits nothing, counts a decline and rejects with `ChargeDeclined`.
   */
  charge(amount: number, options?: ChargeOptions): Promise<number>;
  /** Pays `amount` back (the balance goes down by it) and returns the new balance. */
  refund(amount: number, options?: RefundOptions): Promise<number>;
  balance(): Promise<number>;
  /** Zeroes the balance and the count of declines. */
  reset(): Promise<void>;
  /**
   * How long the provider behind the ledger keeps an idempotency key and replays its answer;
   * absent for a ledger that takes no key. The guard keeps its records at least this long.
   */
  readonly providerKeyRetentionMs?: number;
}

export class MemoryLedger implements Ledger {
  private total = 0;
  private declined = 0;

  /** @param latencyMs how long the provider takes before a charge commits (or is declined) */
  constructor(private readonly latencyMs = 0) {}

  async charge(amount: number): Promise<number> {
    await this.wait();
    await declineOverLimit(amount, async () => ++this.declined);
    this.total += amount;
    return this.total;
  }

  async refund(amount: number): Promise<number> {
    await this.wait();
    this.total -= amount;
    return this.total;
  }

  async balance(): Promise<number> {
    return this.total;
  }

  async reset(): Promise<void> {
    this.total = 0;
    this.declined = 0;
  }

  private async wait(): Promise<void> {
    if (this.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.latencyMs));
  }
}
