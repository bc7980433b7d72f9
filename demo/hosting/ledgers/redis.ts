// --- The provider that takes no keys, shared by every server instance (Redis) ---
//
// When the dedup store is Redis, the demo runs several instances, and a charge must land in
// one balance whichever instance ran it, or a double charge could hide in two ledgers.
// INCRBY is atomic, so concurrent charges from any number of instances all add up, and so is the
// INCR that numbers a decline, which every instance counts in one key beside the balance. Every
// command names one key, so on a Redis Cluster it goes to whichever master holds it.

import type { RedisClient } from 'mcp-request-idempotency/redis';
import { declineOverLimit, type Ledger } from '../../../ledger.js';

/** Where the balance lives unless told otherwise. */
export const DEFAULT_LEDGER_KEY = 'sep3182:ledger:balance';

export class RedisLedger implements Ledger {
  /**
   * @param client a connected client, owned (and closed) by the caller
   * @param latencyMs how long the provider takes before a charge commits
   * @param key where the balance lives; its count of declines lives at `${key}:declines`
   */
  constructor(
    private readonly client: RedisClient,
    private readonly latencyMs = 0,
    readonly key = DEFAULT_LEDGER_KEY,
  ) {}

  private get declinesKey(): string {
    return `${this.key}:declines`;
  }

  async charge(amount: number): Promise<number> {
    await this.wait();
    await declineOverLimit(amount, () => this.client.incr(this.declinesKey));
    return this.client.incrBy(this.key, amount);
  }

  async refund(amount: number): Promise<number> {
    await this.wait();
    return this.client.incrBy(this.key, -amount);
  }

  async balance(): Promise<number> {
    const balance = await this.client.get(this.key);
    return balance === null ? 0 : Number(balance);
  }

  async reset(): Promise<void> {
    // Two commands, not one DEL of both: on a Cluster the two keys may live on two masters.
    await this.client.del(this.key);
    await this.client.del(this.declinesKey);
  }

  private async wait(): Promise<void> {
    if (this.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.latencyMs));
  }
}
