// --- How long the demo, the bench and the tests wait for what is not what they are about, and how ---
//
// A process starting, a server answering, npm installing: none of these is what a test is
// about, and each takes several times longer when the machine is busy (CI machines are shared,
// and a second test run beside this one triples a start-up). Each bound is set here, once,
// wide enough that only something broken reaches it.

import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';

/** `npm install` or `npm pack`, from npm's cache or the registry, and a TypeScript compile. */
export const INSTALL_TIMEOUT_MS = 300_000;

/** A process (a server, Redis, Postgres) from spawn to answering its first request. */
export const START_TIMEOUT_MS = 30_000;

/**
 * An agent framework's loop in a process of its own, from spawn to its answer: a start (the
 * framework's modules are many), then a few calls with the framework's own backoff between them
 * (the AI SDK waits 2 s before its first retry).
 */
export const AGENT_RUN_TIMEOUT_MS = 60_000;

/** Something that should hold in milliseconds (a reply, a log line, a process gone). */
export const WAIT_MS = 15_000;

/**
 * The Postgres store's own bound on each reply, in tests. The default (1 s) is a production
 * setting: a store that cannot answer within it fails the call closed. A test of another
 * behaviour, run while the machine is busy, must not fail on it; the tests of that bound set
 * their own.
 */
export const POSTGRES_STATEMENT_TIMEOUT_MS = 10_000;

/** A pause: between polls, or where a test lets time pass on purpose. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** Polls `probe` until it returns true; fails after `timeoutMs` rather than hang a test. */
export async function waitUntil(
  probe: () => Promise<boolean>,
  timeoutMs = WAIT_MS,
  everyMs = 25,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await probe())) {
    if (performance.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

/**
 * A process's exit code (null when a signal ended it), once its output has been read to the end.
 * Node's 'exit' may come before the last bytes of the process's pipes are read, so output read at
 * 'exit' may lack its last lines. A pipe that a process the child left running still holds open
 * is waited for at most WAIT_MS after the exit.
 */
export async function exitedAndRead(child: ChildProcess): Promise<number | null> {
  const code =
    child.exitCode !== null || child.signalCode !== null
      ? child.exitCode
      : ((await once(child, 'exit'))[0] as number | null);
  const pipes = [child.stdout, child.stderr].flatMap((pipe) => (pipe && !pipe.closed ? [pipe] : []));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all(pipes.map((pipe) => once(pipe, 'close'))),
    new Promise((resolve) => {
      timer = setTimeout(resolve, WAIT_MS);
    }),
  ]);
  clearTimeout(timer);
  return code;
}
