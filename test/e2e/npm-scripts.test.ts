// `npm start` and `npm run demo` as a terminal runs them, stopped as a terminal or a supervisor
// stops them: a signal to npm's own PID. npm passes the signal to its one child; whatever that
// child started must go with it, or a server serves on, orphaned, on the port the next start wants.

import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, WAIT_MS } from '../../demo/processes/bounds.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Every live process below `pid`, from /proc: a parent's children, then theirs. */
function descendantsOf(pid: number): Array<{ pid: number; command: string }> {
  const parents = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    const stat = statOf(entry);
    if (!stat) continue;
    parents.set(stat.ppid, [...(parents.get(stat.ppid) ?? []), Number(entry)]);
  }
  const found: Array<{ pid: number; command: string }> = [];
  const visit = (parent: number) => {
    for (const child of parents.get(parent) ?? []) {
      found.push({ pid: child, command: commandOf(child) });
      visit(child);
    }
  };
  visit(pid);
  return found;
}

/** A process's parent, unless it is gone or a zombie (exited, awaiting its parent's wait). */
function statOf(entry: string): { ppid: number } | undefined {
  if (!/^\d+$/.test(entry)) return undefined;
  try {
    // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
    const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return state === 'Z' ? undefined : { ppid: Number(ppid) };
  } catch {
    return undefined; // exited while being read
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

const alive = (pid: number) => statOf(String(pid)) !== undefined;

/** Resolves once `ready()` holds, checking every 100 ms; `bound` is one only something broken reaches. */
async function until(ready: () => boolean, what: string, bound = WAIT_MS): Promise<void> {
  const deadline = performance.now() + bound;
  while (!ready()) {
    if (performance.now() > deadline) throw new Error(`still waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function npm(args: string[]): { child: ChildProcess; output: () => string } {
  const child = spawn('npm', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  for (const stream of [child.stdout, child.stderr])
    createInterface({ input: stream }).on('line', (line) => {
      output += `${line}\n`;
    });
  return { child, output: () => output };
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

/** Signals npm's own PID and waits for it to exit; answers what was running below it just before. */
async function stopNpm(child: ChildProcess, signal: NodeJS.Signals) {
  const pid = child.pid ?? 0;
  const below = descendantsOf(pid);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  await exited;
  return below;
}

describe.each(['SIGTERM', 'SIGINT'] as const)('npm, its own PID sent %s', (signal) => {
  it(
    'npm start -- --http: stops the server, frees its port, and leaves no process behind',
    async () => {
      const { child, output } = npm(['start', '--', '--http', '--port', '0']);
      await until(() => /"event":"listening"/.test(output()), 'the server to listen', START_TIMEOUT_MS);
      const port = Number(/"url":"http:\/\/127\.0\.0\.1:(\d+)\/mcp"/.exec(output())?.[1]);
      expect(await portIsFree(port)).toBe(false);

      const below = await stopNpm(child, signal);
      expect(below.map((p) => p.command)).toContainEqual(expect.stringContaining('server.ts --http'));
      await until(() => below.every((p) => !alive(p.pid)), 'every process npm started to exit');
      expect(await portIsFree(port)).toBe(true);
    },
    START_TIMEOUT_MS + 2 * WAIT_MS,
  );

  // The default demo starts its servers; the full tour, a payment provider and Redis besides. The
  // tour reaches its payment provider half a minute in, and the demo stops on either signal by one
  // handler: the tour is stopped by Ctrl-C's alone, the signal npm relays being what the rest show.
  it.each([
    ['demo', 'server.ts'],
    ...(signal === 'SIGINT' ? [['demo:all', 'demo/payment-provider/api.ts']] : []),
  ])(
    'npm run %s: stops what it started (%s among them)',
    async (script, marker) => {
      const { child } = npm(['run', script]);
      const started = () => descendantsOf(child.pid ?? 0).map((p) => p.command);
      await until(
        () => started().some((command) => command.includes(marker)),
        `the demo to start ${marker}`,
        4 * START_TIMEOUT_MS,
      );

      const below = await stopNpm(child, signal);
      expect(below.map((p) => p.command)).toContainEqual(expect.stringContaining(marker));
      await until(() => below.every((p) => !alive(p.pid)), 'every process the demo started to exit');
      expect(below.filter((p) => alive(p.pid))).toStrictEqual([]);
    },
    6 * START_TIMEOUT_MS,
  );
});
