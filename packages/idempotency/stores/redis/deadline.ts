// --- One bound for every command a store sends, kept by one timer ---
//
// Each command the store sends must fail once its bound has passed without a reply (see `bounded`
// in store.ts). `withDeadline` (support.ts) is the plain way: a timer per command, set when it is
// sent and cleared when it is answered. Every command here has the same bound, so deadlines fall
// in the order the commands were sent: the oldest command still waiting is always the next to
// expire. One timer, set for that command's deadline, serves them all; a reply only takes its
// command off the list, and when the timer fires it fails what has expired and is set again for
// the oldest command left. A command still fails at its own deadline, as with a timer of its own.

interface Waiting {
  /** When this command's bound runs out, on `performance.now()`'s clock. */
  expiresAt: number;
  fail: (error: Error) => void;
}

export class SharedDeadline {
  /** Commands still unanswered, in the order they were sent: the order their bounds run out. */
  private readonly waiting = new Set<Waiting>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ms: number,
    private readonly backend: string,
  ) {}

  /** `command`'s outcome, or a rejection once `ms` have passed without one (as `withDeadline`). */
  bound<T>(command: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry: Waiting = { expiresAt: performance.now() + this.ms, fail: reject };
      this.waiting.add(entry);
      this.timer ??= this.wakeIn(this.ms);
      command.then(
        (value) => {
          this.waiting.delete(entry);
          resolve(value);
        },
        (error: unknown) => {
          this.waiting.delete(entry);
          reject(error);
        },
      );
    });
  }

  private wakeIn(ms: number): NodeJS.Timeout {
    const timer = setTimeout(() => this.expire(), ms);
    // Never what keeps a process alive: a command still waiting has its open connection for that.
    timer.unref();
    return timer;
  }

  /** Fails every command whose bound has run out, then waits for the oldest one left. */
  private expire(): void {
    const now = performance.now();
    for (const entry of this.waiting) {
      if (entry.expiresAt > now) {
        // A timer may fire a fraction of a millisecond early by this clock: never sooner than 1 ms.
        this.timer = this.wakeIn(Math.max(1, Math.ceil(entry.expiresAt - now)));
        return;
      }
      this.waiting.delete(entry);
      entry.fail(new Error(`no reply from ${this.backend} within ${this.ms} ms`));
    }
    this.timer = undefined;
  }
}
