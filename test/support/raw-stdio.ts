// A client the project did not build on the SDK: JSON-RPC lines written by hand to a real
// server process's stdin, answers read from its stdout. It sees the bytes on the wire, so it
// catches anything that only works because both ends share the SDK's quirks.

import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { exitedAndRead, START_TIMEOUT_MS, WAIT_MS } from '../../demo/processes/bounds.js';
import { type DecisionLine, decisionsIn, MODERN_ENVELOPE } from '../../demo/processes/launch.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface RawAnswer {
  /** The line exactly as the server wrote it. */
  line: string;
  message: Record<string, unknown>;
}

export class RawStdioPeer {
  /** Every stdout line, in order, parsed or not. */
  readonly stdoutLines: string[] = [];
  readonly stderrLines: string[] = [];
  private readonly waiting = new Map<string, (answer: RawAnswer) => void>();
  private nextId = 1;
  /** Until the first answer the process may still be starting, which takes longest on a busy machine. */
  private started = false;

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    /** 2026-07-28: every request built by `request` carries the per-request envelope. */
    private readonly envelope?: Record<string, unknown>,
  ) {
    createInterface({ input: child.stdout }).on('line', (line) => {
      this.stdoutLines.push(line);
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        return; // kept in stdoutLines, where the protocol-only test finds it
      }
      if (typeof message !== 'object' || message === null) return;
      const id: unknown = Reflect.get(message, 'id');
      const resolve = this.waiting.get(JSON.stringify(id));
      if (resolve && ('result' in message || 'error' in message)) {
        this.waiting.delete(JSON.stringify(id));
        resolve({ line, message: Object.fromEntries(Object.entries(message)) });
      }
    });
    createInterface({ input: child.stderr }).on('line', (line) => this.stderrLines.push(line));
    // A line written as the server exits fails with EPIPE. The request that wrote it goes
    // unanswered and fails the test by its bound; unheard, the error would fail the whole run.
    child.stdin.on('error', () => {});
  }

  /**
   * Spawns server.ts with `args` (Node with `nodeFlags`, after tsx) and completes the 2025-11-25
   * initialize handshake by hand.
   */
  static async start(
    args: string[] = [],
    nodeFlags: string[] = [],
  ): Promise<{ peer: RawStdioPeer; initialize: RawAnswer }> {
    const peer = new RawStdioPeer(RawStdioPeer.spawn(args, nodeFlags));
    const initialize = await peer.request('initialize', {
      protocolVersion: '2025-11-25',
      capabilities: {},
      clientInfo: { name: 'raw-json-rpc', version: '0' },
    });
    peer.writeLine('{"jsonrpc":"2.0","method":"notifications/initialized"}');
    return { peer, initialize };
  }

  /**
   * Spawns server.ts with `args` for 2026-07-28: no handshake; every request `request` builds
   * carries the envelope, and the first one picks the era.
   */
  static startModern(args: string[] = [], nodeFlags: string[] = []): RawStdioPeer {
    return new RawStdioPeer(RawStdioPeer.spawn(args, nodeFlags), MODERN_ENVELOPE);
  }

  private static spawn(args: string[], nodeFlags: string[] = []): ChildProcessWithoutNullStreams {
    // Each decision line written at once, as the launchers do (demo/processes/launch.ts): the tests read them.
    return spawn(
      process.execPath,
      ['--import', 'tsx', ...nodeFlags, join(ROOT, 'server.ts'), '--log-flush-ms', '0', ...args],
      {
        cwd: ROOT,
      },
    );
  }

  writeLine(line: string): void {
    this.child.stdin.write(`${line}\n`);
  }

  /** Sends a request built from `params` (and the envelope, on 2026-07-28) and waits for the answer with its id. */
  request(method: string, params: Record<string, unknown>): Promise<RawAnswer> {
    const id = this.nextId++;
    const withEnvelope = this.envelope ? { ...params, _meta: this.envelope } : params;
    return this.requestLine(id, JSON.stringify({ jsonrpc: '2.0', id, method, params: withEnvelope }));
  }

  /** Sends `line` verbatim (hand-written JSON) and waits for the answer with `id`. */
  requestLine(id: number | string, line: string): Promise<RawAnswer> {
    const bound = this.started ? WAIT_MS : START_TIMEOUT_MS;
    const answer = new Promise<RawAnswer>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to id ${id} within ${bound} ms`)), bound);
      this.waiting.set(JSON.stringify(id), (value) => {
        clearTimeout(timer);
        this.started = true;
        resolve(value);
      });
    });
    this.writeLine(line);
    return answer;
  }

  /** The guard's decision log lines, parsed: every line written before the answers this peer has. */
  decisions(): Promise<DecisionLine[]> {
    return decisionsIn(this.stderrLines);
  }

  /** The server process, for reading its memory from /proc. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /**
   * Hangs up as a client process that dies would: closes the server's stdin and stops reading
   * its stdout, sends no signal. Resolves with the exit code once the server has exited.
   */
  async disconnect(): Promise<number | null> {
    if (this.child.exitCode !== null) return this.child.exitCode;
    const exited = exitedAndRead(this.child);
    this.child.stdin.end();
    this.child.stdout.destroy();
    return exited;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.stdin.end();
    this.child.kill('SIGTERM');
    await exited;
  }
}
