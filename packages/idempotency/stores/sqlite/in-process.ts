// --- What the SQLite stores on one file share within a process: the turn to write, and replays ---
//
// Every store a process opens on a file (one per server instance, or several in a test) shares
// two things with the others there, keyed by the file's real path:
//   - a write lock of the process's own: SQLite's lock orders writers across processes; this one
//     orders them within the process, so a claim behind a tool's open transaction in the same
//     process waits its turn (first come, first served) instead of polling for a lock its own
//     process holds;
//   - the completed records it has written or read. A completed record never changes until it
//     expires or the file is cleared, so a replay (or a conflict) of one it knows is answered
//     from memory, with no read of the file. Why keep it: a read of the file (two lock system calls
//     and the row) costs several times a read from memory, on the answer a retry storm is made of
//     (docs/cost.md has the figures against the replay's target). Its price is one window: a
//     `clear` in this process empties it at once; one in another process bumps the file's clear
//     count, which every store checks every CLEAR_SEEN_WITHIN_MS (100 ms) while it remembers
//     anything, so for that long a process may replay a record another's clear removed. A clear
//     is an operator's reset, never part of a call, so no call's outcome depends on that window.
// Internal to the package: the SQLite store's own.

import type { Fingerprint } from '../../core/fingerprint.js';
import type { StoredResponse } from '../contract.js';

/**
 * How soon a store sees that another process cleared the file, and forgets the replays it knew:
 * until then it may still answer one (a clear is an operator's reset, never part of a call). A
 * check is one read of the file, done only while the store remembers a record.
 */
export const CLEAR_SEEN_WITHIN_MS = 100;

/** The replays a process remembers, at most: by count, and by characters of their responses. */
const MAX_REPLAYS = 10_000;
const MAX_REPLAY_CHARACTERS = 16 * 1024 * 1024;

/** Waited past the bound for the file's write lock. */
export class BusyError extends Error {
  constructor() {
    super('SQLITE_BUSY');
    this.name = 'BusyError';
  }
}

/** The write lock of one file within this process (see the file header). */
export class ProcessWriteLock {
  private held = false;
  private readonly waiting: Array<() => void> = [];

  /** Takes the lock if it is free, at once. */
  tryTake(): boolean {
    if (this.held) return false;
    this.held = true;
    return true;
  }

  /** Waits for the lock, in turn, until `deadline` (performance.now()); rejects past it. */
  take(deadline: number): Promise<void> {
    if (this.tryTake()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout>;
      const granted = () => {
        clearTimeout(timer);
        resolve();
      };
      // A timer counts whole milliseconds of the event loop's clock, so it may fire a millisecond
      // before the deadline by performance.now(): a waiter gives up only once the deadline is past.
      const giveUpAtDeadline = () => {
        const left = deadline - performance.now();
        if (left > 0) {
          timer = setTimeout(giveUpAtDeadline, left);
          return;
        }
        const at = this.waiting.indexOf(granted);
        if (at >= 0) this.waiting.splice(at, 1);
        reject(new BusyError());
      };
      timer = setTimeout(giveUpAtDeadline, Math.max(0, deadline - performance.now()));
      this.waiting.push(granted);
    });
  }

  /** Hands the lock to the next in line, or frees it. */
  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.held = false;
  }
}

/** A completed record as the process remembers it. */
export interface KnownReplay {
  fingerprint: Fingerprint;
  response: StoredResponse;
  expiresAt: number;
  /** Characters of the response's JSON, against MAX_REPLAY_CHARACTERS. */
  characters: number;
}

/** The completed records of one file this process knows (see the file header), oldest first. */
export class KnownReplays {
  private readonly records = new Map<string, KnownReplay>();
  private characters = 0;
  /** The file's clear count when these were known; undefined until first read. */
  clears: number | undefined;

  get size(): number {
    return this.records.size;
  }

  /** The record of `slot`, if known and not expired at `now`. */
  get(slot: string, now: number): KnownReplay | undefined {
    const known = this.records.get(slot);
    if (known && known.expiresAt <= now) this.forget(slot, known);
    return known && known.expiresAt > now ? known : undefined;
  }

  /** Remembers a record the file holds, forgetting the oldest past the bounds. */
  remember(slot: string, replay: KnownReplay): void {
    const before = this.records.get(slot);
    if (before) this.forget(slot, before);
    if (replay.characters > MAX_REPLAY_CHARACTERS) return;
    this.records.set(slot, replay);
    this.characters += replay.characters;
    for (const [oldest, record] of this.records) {
      if (this.records.size <= MAX_REPLAYS && this.characters <= MAX_REPLAY_CHARACTERS) break;
      this.forget(oldest, record);
    }
  }

  /** Forgets every record: the file was cleared (`clears`: its clear count now, if known). */
  forgetAll(clears: number | undefined): void {
    this.records.clear();
    this.characters = 0;
    this.clears = clears;
  }

  private forget(slot: string, replay: KnownReplay): void {
    this.records.delete(slot);
    this.characters -= replay.characters;
  }
}

/** What this process's stores on one file share, while any of them is open. */
export interface SharedInProcess {
  lock: ProcessWriteLock;
  replays: KnownReplays;
  /** Its stores still open: the last to close forgets it, replays and all. */
  stores: number;
}

const files = new Map<string, SharedInProcess>();

/** What this process's stores on the file at `realPath` share, made by the first to open. */
export function sharedInProcess(realPath: string): SharedInProcess {
  let shared = files.get(realPath);
  if (!shared) {
    shared = { lock: new ProcessWriteLock(), replays: new KnownReplays(), stores: 0 };
    files.set(realPath, shared);
  }
  shared.stores += 1;
  return shared;
}

/** A store on the file at `realPath` closed; the last one takes what they shared with it. */
export function leftInProcess(realPath: string): void {
  const shared = files.get(realPath);
  if (!shared) return;
  shared.stores -= 1;
  if (shared.stores <= 0) files.delete(realPath);
}

// The scope's length up front keeps (scope, key) pairs distinct whatever characters either
// contains, as the memory store's slots do.
export function slotOf(scope: string, idempotencyKey: string): string {
  return `${scope.length}:${scope}${idempotencyKey}`;
}
