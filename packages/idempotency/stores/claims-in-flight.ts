// --- Stopping without abandoning a claim ---
//
// A keyed call still running when the process is told to stop (SIGTERM, or a stdio client
// that hangs up mid-call) holds an in-progress claim. Exiting then would leave its key in
// progress until the lease ends, and the retry after that would execute again: a charge the
// provider may already have committed would be made twice. So the store the guard uses is
// wrapped to count open claims, and stopping waits for them to be recorded first.

import type { Fingerprint } from '../core/fingerprint.js';
import type { Claim, ClaimTicket, IdempotencyStore, RecordId, StoredResponse } from './contract.js';

/** An `IdempotencyStore` that knows how many of its claims are still open. */
export class ClaimsInFlight implements IdempotencyStore {
  /** Claims asked for and not yet answered by the store. */
  private asking = 0;
  /**
   * Claims granted and not yet settled. A set, not a count: the guard may settle one ticket twice
   * (a transactional record that failed is completed, then released), and only the first closes it.
   */
  private readonly granted = new Set<ClaimTicket>();
  private readonly waiting = new Set<() => void>();

  /** The store's transactions, when it has them: a claim settled in one closes as any other. */
  readonly begin?: (ticket: ClaimTicket) => Promise<unknown>;

  constructor(private readonly store: IdempotencyStore) {
    const { begin } = store;
    if (begin) this.begin = (ticket) => begin.call(store, ticket);
  }

  async claim(
    id: RecordId,
    fingerprint: Fingerprint,
    leaseMs: number,
    continuation?: boolean,
  ): Promise<Claim> {
    // Open from the moment it is asked for: a claim still on its way to Redis counts too.
    this.asking += 1;
    try {
      const claim = await this.store.claim(id, fingerprint, leaseMs, continuation);
      if (claim.state === 'claimed') this.granted.add(claim.ticket);
      return claim;
    } finally {
      this.asking -= 1;
      this.wakeIfSettled();
    }
  }

  // The guard settles every claim it gets, one of these three ways, whatever the dispatch answered.
  complete(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.closing(ticket, this.store.complete(ticket, response, retentionMs));
  }

  awaitInput(ticket: ClaimTicket, response: StoredResponse, retentionMs: number): Promise<boolean> {
    return this.closing(ticket, this.store.awaitInput(ticket, response, retentionMs));
  }

  release(ticket: ClaimTicket): Promise<boolean> {
    return this.closing(ticket, this.store.release(ticket));
  }

  /** Claims asked for or granted and not yet settled. */
  get open(): number {
    return this.asking + this.granted.size;
  }

  renew(ticket: ClaimTicket, leaseMs: number): Promise<boolean> {
    return this.store.renew(ticket, leaseMs);
  }

  clear(): Promise<void> {
    return this.store.clear();
  }

  /**
   * Resolves once every open claim is recorded and answered, or after `ms`. Waiting longer
   * than one lease is pointless: by then the key is free for a retry anyway.
   */
  async settled(ms: number): Promise<void> {
    // Let calls already read get as far as their claim (the guard starts in a microtask).
    await nextTurn();
    if (this.open > 0) {
      let wake = () => {};
      const done = new Promise<void>((resolve) => {
        wake = resolve;
      });
      this.waiting.add(wake);
      const timer = setTimeout(wake, ms);
      await done;
      clearTimeout(timer);
      this.waiting.delete(wake);
    }
    // Let the answers of the calls just recorded be written.
    await nextTurn();
  }

  private async closing(ticket: ClaimTicket, settled: Promise<boolean>): Promise<boolean> {
    try {
      return await settled;
    } finally {
      this.granted.delete(ticket);
      this.wakeIfSettled();
    }
  }

  private wakeIfSettled(): void {
    if (this.open === 0) for (const wake of this.waiting) wake();
  }
}

/** After every microtask queued so far: the SDK's dispatch and answers are chains of them. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
