// --- Is the process that holds a claim still running? (one machine) ---
//
// A store whose instances are processes on one machine (the SQLite store: one file, any number
// of server processes) can tell a holder that died from one that is slow: the kernel knows. A
// claim names its holder process, and a claim that finds an in-progress record whose holder is
// gone takes the key at once instead of waiting out the lease, which stays the backstop.
//
// A pid alone is not an identity: the kernel reuses pids, and a later process under a dead
// holder's pid would keep its key held for the whole lease (or, read the other way, a live holder
// mistaken for a new process). So a holder is its pid AND its start time: on Linux field 22 of
// /proc/<pid>/stat, in clock ticks since boot, which no later process under that pid can share.
// The boot and the pid namespace are part of it too: after a reboot every pid and start time
// begins again, and a process in another container sees other processes under the same numbers.
// What this can and cannot tell:
//   - Linux, one pid namespace: a holder gone (crashed, SIGKILLed, OOM-killed; a zombie, which
//     runs nothing and holds no file) is seen at the next claim. A pid reused is seen as gone.
//   - A holder on another boot, or in another pid namespace (another container on the file):
//     not judged, so taken as alive: its claim holds its key until its lease ends.
//   - A holder the kernel will not show (this process out of file descriptors, a /proc mounted
//     `hidepid`): taken as alive. Only "no such process" frees a key early, never a failed read.
//   - Elsewhere (macOS, Windows): no start time to read; a pid that answers `kill(pid, 0)` is
//     taken as alive, so a reused pid errs on the safe side (the lease), never the other.

import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';

/** Who holds a claim: what a record keeps of its holder process. */
export interface ProcessIdentity {
  pid: number;
  /** When the process started (Linux: clock ticks since boot, as text); null where unknown. */
  started: string | null;
  /** The machine, boot and pid namespace the pid and start time mean something in. */
  host: string;
}

/**
 * Field 22 of /proc/<pid>/stat, and field 3 (the state); `gone` if there is no such process;
 * `unknown` if the kernel would not say. Only the kernel's "no such process" means gone: a read
 * that fails otherwise (EMFILE in a process out of descriptors, EACCES) might hide a live holder,
 * and so might a missing entry under a /proc mounted `hidepid`, which `kill(pid, 0)` sees through.
 */
function statOf(pid: number): { state: string; started: string } | 'gone' | 'unknown' {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch (error) {
    return Reflect.get(Object(error), 'code') === 'ENOENT' && !answersSignals(pid) ? 'gone' : 'unknown';
  }
  // Field 2 is the command in parentheses, which may itself hold spaces and parentheses: the
  // fields after the last ')' are split plainly, field 3 first.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  const started = fields[22 - 3];
  return state && started ? { state, started } : 'unknown';
}

function linuxHost(): string | undefined {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim();
    return `linux:${boot}:${readlinkSync('/proc/self/ns/pid')}`;
  } catch {
    return undefined;
  }
}

const LINUX_HOST = process.platform === 'linux' ? linuxHost() : undefined;

const ownStat = LINUX_HOST ? statOf(process.pid) : 'unknown';

/** This process, as a claim names its holder. */
export const THIS_PROCESS: ProcessIdentity = LINUX_HOST
  ? { pid: process.pid, started: typeof ownStat === 'object' ? ownStat.started : null, host: LINUX_HOST }
  : { pid: process.pid, started: null, host: `${process.platform}:${hostname()}` };

/**
 * True only when `holder` is surely not running: its pid is gone, is a zombie, or is now another
 * process. A holder this machine cannot judge (another boot, another pid namespace) is running.
 */
export function isGone(holder: ProcessIdentity): boolean {
  if (holder.host !== THIS_PROCESS.host) return false;
  if (holder.pid === THIS_PROCESS.pid && holder.started === THIS_PROCESS.started) return false;
  if (LINUX_HOST) {
    const stat = statOf(holder.pid);
    if (stat === 'gone') return true;
    if (stat === 'unknown') return false;
    // Z: exited, not yet reaped; X: dead. Neither runs the call, nor holds its transaction.
    return stat.state === 'Z' || stat.state === 'X' || stat.started !== holder.started;
  }
  return !answersSignals(holder.pid);
}

/** Whether a process of this pid exists (`kill(pid, 0)`): only ESRCH says it does not. */
function answersSignals(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists, under another user.
    return Reflect.get(Object(error), 'code') !== 'ESRCH';
  }
}

/**
 * The machine's monotonic clock in ms (CLOCK_MONOTONIC, one clock for every process of a boot on
 * Linux, which no wall-clock step moves), or null where a claim's host does not name the boot it
 * means something in: a lease on it is judged only by processes of the same `host`.
 */
export function monotonicMs(): number | null {
  return LINUX_HOST ? Number(process.hrtime.bigint() / 1_000_000n) : null;
}
