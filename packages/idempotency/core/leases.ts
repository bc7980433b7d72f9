// --- Lease renewal: a live call never loses its claim ---

import type { ClaimTicket, IdempotencyStore } from '../stores/contract.js';

/**
 * Renews the lease of every claim whose call is still running, every third of the lease, so only
 * the claim of a process that died (or froze) expires and frees its key for a retry. A third: two
 * renewals in a row can fail (a store blip) before a live claim would expire. A failed renewal is
 * not the caller's problem: the next one may succeed, and at worst the lease runs out, as it would
 * with no renewal at all.
 * One timer for all of a guard's calls, not one per call: a claim joins a set and leaves it, with
 * no Timeout of its own. Its first renewal comes within a third of the lease; a call shorter than
 * that is renewed only if a tick falls inside it.
 */
export class LeaseRenewals {
  private readonly running = new Set<ClaimTicket>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly leaseMs: number,
  ) {}

  private add(ticket: ClaimTicket): void {
    this.running.add(ticket);
    if (this.timer) return;
    this.timer = setInterval(() => this.renewAll(), this.leaseMs / 3);
    // A running call keeps the process alive by itself; its renewal timer must not.
    this.timer.unref();
  }

  /** Runs `run` with `ticket`'s lease renewed until it ends. */
  async whileRunning<T>(ticket: ClaimTicket, run: () => Promise<T>): Promise<T> {
    this.add(ticket);
    try {
      return await run();
    } finally {
      this.running.delete(ticket);
    }
  }

  private renewAll(): void {
    // Stopped at a tick with nothing to renew, not when the last call ends: calls one after
    // another would otherwise start and stop it each time.
    if (this.running.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    for (const ticket of this.running) this.store.renew(ticket, this.leaseMs).catch(() => {});
  }
}
