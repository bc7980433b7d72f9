// Whether a claim's holder process still runs, on one machine: every process of this boot and pid
// namespace names itself the same way (its pid, its start time, and a host they share), sees the
// others alive while they run, and reads one monotonic clock with them; a holder that has exited
// but is not yet reaped (a zombie) runs nothing and is gone; this process is never gone to itself.
// (A holder killed, a pid reused, one on another host or out of reach of /proc: test/sqlite-store.test.ts.)

import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, waitUntil } from '../../../../demo/processes/bounds.js';
import {
  isGone,
  monotonicMs,
  type ProcessIdentity,
  THIS_PROCESS,
} from '../../../../packages/idempotency/stores/sqlite/liveness.js';

const LIVENESS = pathToFileURL(
  new URL('../../../../packages/idempotency/stores/sqlite/liveness.ts', import.meta.url).pathname,
).href;

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** /proc/<pid>/stat's state (field 3) and start time (field 22), or undefined once there is no such process. */
function statOf(pid: number): { state: string; started: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: String(fields[0]), started: String(fields[19]) };
  } catch {
    return undefined;
  }
}

/** A first line a child prints, as JSON. */
function firstLine(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the process printed nothing')), START_TIMEOUT_MS);
    child.once('exit', () => reject(new Error('the process exited')));
    if (!child.stdout) throw new Error('no stdout');
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line));
    });
  });
}

describe.skipIf(process.platform !== 'linux')('processes on one Linux machine', () => {
  it('name themselves alike and read one monotonic clock: a running holder is never gone', async () => {
    const before = monotonicMs();
    // Another server process: what it would stamp on its claims, and its clock, then it waits.
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `const l = await import(${JSON.stringify(LIVENESS)});
         console.log(JSON.stringify({ me: l.THIS_PROCESS, clock: l.monotonicMs() }));
         process.stdin.resume();`,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    children.push(child);
    const { me, clock } = (await firstLine(child)) as { me: ProcessIdentity; clock: number };
    const after = monotonicMs();

    expect(me).toStrictEqual({
      pid: child.pid,
      started: statOf(Number(child.pid))?.started,
      host: THIS_PROCESS.host,
    });
    expect(clock).toBeGreaterThanOrEqual(Number(before));
    expect(clock).toBeLessThanOrEqual(Number(after));
    expect(isGone(me)).toBe(false);
    expect(isGone(THIS_PROCESS)).toBe(false);
  });

  it('sees a holder that exited but was never reaped (a zombie) as gone', async () => {
    // The shell's background job exits; its parent, now `sleep`, never waits for it.
    const parent = spawn('sh', ['-c', 'sleep 0 & echo $!; exec sleep 60'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(parent);
    const pid = Number(await firstLine(parent));
    await waitUntil(async () => statOf(pid)?.state === 'Z');
    const zombie = statOf(pid);

    expect(isGone({ pid, started: zombie?.started ?? null, host: THIS_PROCESS.host })).toBe(true);
    // Its parent, the live one, is not.
    const living = statOf(Number(parent.pid));
    expect(
      isGone({ pid: Number(parent.pid), started: living?.started ?? null, host: THIS_PROCESS.host }),
    ).toBe(false);
  });

  it('names this process by its own pid and start time, on the host of this boot and pid namespace', () => {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim();
    expect(THIS_PROCESS.pid).toBe(process.pid);
    expect(THIS_PROCESS.started).toBe(statOf(process.pid)?.started);
    expect(THIS_PROCESS.host).toMatch(new RegExp(`^linux:${boot}:pid:\\[\\d+\\]$`));
  });
});

describe('the monotonic clock', () => {
  it('never goes back, and moves with time', async () => {
    const first = monotonicMs();
    if (first === null) return;
    let last = first;
    await waitUntil(async () => {
      const now = Number(monotonicMs());
      expect(now).toBeGreaterThanOrEqual(last);
      last = now;
      return now >= first + 50;
    });
  });
});
