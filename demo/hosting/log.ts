// --- The operator's log: one JSON line per event on stderr (stdout belongs to the protocol) ---
//
// Decision lines go out in batches, at most `--log-flush-ms` (default 25) after the first of them,
// and each is formatted only as its batch is written: a keyed call only notes its event and the
// time (formatting the line in the call cost 4.5 to 6.6 µs of it in a loaded server).
// Over stdio every write to stderr wakes the client, which reads it on the thread that reads its
// answers (one profile put that at about 30 µs a keyed call; side-by-side runs since could not
// tell it from noise: README, Cost). Batched, a burst of calls costs one write. Every other line (listening,
// errors) is written at once, after whatever is pending, so the log keeps its order; what is
// pending is written when the process exits, on SIGTERM or an uncaught error too. Only a SIGKILL
// loses it: at most one flush interval of lines.

import type { DecisionEvent } from 'mcp-request-idempotency';

/**
 * Entries written to `write` together as lines, at most `flushMs` after the first (0: each at
 * once), each formatted by `format` only then.
 */
export class BatchedLines<Entry = string> {
  private pending: Entry[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly flushMs: number,
    private readonly write: (text: string) => void = (text) => void process.stderr.write(text),
    /** A flood is written as soon as this many entries are pending, so the buffer stays small. */
    private readonly maxPending = 256,
    private readonly format: (entry: Entry) => string = String,
  ) {}

  add(entry: Entry): void {
    this.pending.push(entry);
    if (this.flushMs === 0 || this.pending.length >= this.maxPending) this.flush();
    // Unref'd: a pending line must not keep the process alive; exiting writes it.
    else this.timer ??= setTimeout(() => this.flush(), this.flushMs).unref();
  }

  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0) return;
    const entries = this.pending;
    this.pending = [];
    let text = '';
    for (const entry of entries) text += `${this.format(entry)}\n`;
    this.write(text);
  }
}

/** How long a decision line may wait to be written with others. */
export const DEFAULT_LOG_FLUSH_MS = 25;

/** A decision as the call leaves it: its event (a fresh object per call) and when, in epoch ms. */
interface Decided {
  at: number;
  event: DecisionEvent;
}

const decisionLineOf = ({ at, event }: Decided): string =>
  JSON.stringify({ time: new Date(at).toISOString(), event: 'idempotency', ...event });

const decisionBatch = (flushMs: number) => new BatchedLines(flushMs, undefined, undefined, decisionLineOf);

let decisionLines = decisionBatch(DEFAULT_LOG_FLUSH_MS);
process.on('exit', () => decisionLines.flush());

/** Sets how long decision lines may wait (the server's `--log-flush-ms`); what is pending goes out first. */
export function batchDecisionLines(flushMs: number): void {
  decisionLines.flush();
  decisionLines = decisionBatch(flushMs);
}

/** One JSON line per keyed decision on stderr, batched and formatted as its batch is written (see above). */
export function logDecision(event: DecisionEvent): void {
  decisionLines.add({ at: Date.now(), event });
}

/** What the SDK reports without answering it (a dropped message, a failed write). */
export function reportSdkError(error: Error): void {
  log({ time: new Date().toISOString(), event: 'sdk', error: error.message });
}

/** Any other line: written at once, after the decision lines pending. */
export function log(entry: Record<string, unknown>): void {
  decisionLines.flush();
  process.stderr.write(`${JSON.stringify(entry)}\n`);
}
