// --- A report's first line: what kind of server this is, in the words a person would use ---
//
// Read from the verdicts, the scripted ones and the explorer's: a server with no support at all,
// one that deduplicates but forgets in one way or another, one that deduplicates as far as the run
// shows. For a server with no support, where to start.

import type { Report } from './rules.js';

/** The explorer's finding, by rule and by what it saw, as the kind of server it shows. */
function exploredKind(rule: string, observed: string): string {
  const executed = /the counter went/.test(observed);
  // A call over another connection of the same caller that executed: that connection saw no record.
  if (executed && observed.includes('on a fresh HTTP session'))
    return 'deduplicates, but a new session forgets its records';
  if (executed && observed.includes('--same-caller-header'))
    return "deduplicates, but a second credential of the same caller (a refreshed token) finds none of the caller's records";
  if (executed && observed.includes('other protocol era'))
    return 'deduplicates, but a connection in the other protocol era (a session of its own) finds none of its records';
  if (rule === 'replay.not-executed') return 'deduplicates, but a keyed retry sometimes executes again';
  if (rule === 'retention.per-key')
    return observed.includes('other keys')
      ? 'deduplicates, but forgets a record once a few other keys are used'
      : 'deduplicates, but forgets a record before a late retry comes (seconds, and some keys, later)';
  if (rule.startsWith('conflict.') || rule === 'equivalence.no-unicode-normalization')
    return /while it ran/.test(observed) && executed
      ? 'deduplicates, but executes a different request sent under a key while its original runs'
      : executed
        ? 'deduplicates, but executes a different request under a used key'
        : 'deduplicates, but answers a different request under a used key as if it were the same (its fingerprint misses part of the arguments)';
  if (rule === 'in-progress.not-executed')
    return 'deduplicates, but executes a duplicate that arrives while its original runs (two at once both run)';
  if (rule === 'key.opaque') return 'deduplicates, but takes one key for another (keys compared loosely)';
  if (rule.startsWith('equivalence.'))
    return 'deduplicates, but takes the same request written another way for a new one';
  if (rule === 'new-key.executes') return 'does not execute every new key once';
  if (rule === 'replay.identical') return 'deduplicates, but a replay is not the stored answer';
  return `deduplicates, but breaks ${rule}`;
}

export function headline(report: Report): string {
  const status = (id: string) => report.results.find((r) => r.id === id);
  const failed = report.results.filter((r) => r.status === 'failed');
  const replay = status('replay.not-executed');
  const declared = status('capability.advertised')?.status === 'passed';
  if (replay?.status === 'failed' && !replay.observed.startsWith('explored:')) {
    const retriesRan = ['replay.identical', 'retention.per-key'].every(
      (id) => status(id)?.status === 'failed',
    );
    if (retriesRan && !declared)
      return 'No support: ignores `idempotencyKey`, every keyed retry executed again, and declares no tools.idempotency. Start with a record per key: store a keyed call’s answer, return it to the retry without executing, then declare the capability';
    if (retriesRan)
      return 'Declares tools.idempotency, but ignores `idempotencyKey`: every keyed retry executed again';
  }
  // A broken rule is certain whatever else could not be read: it leads, as it sets the exit status.
  const finding = report.exploration?.failure;
  if (finding) return `A server that ${exploredKind(finding.rule, finding.observed)} (${finding.rule})`;
  if (failed.length > 0)
    return `A server that deduplicates, but breaks ${failed.map((r) => r.id).join(', ')}`;
  if (report.unobserved.length > 0)
    return 'Not judged: nothing certain about deduplication (the call, its counter or the exchange could not be read)';
  const histories = report.exploration ? ` and ${generatedHistories(report.exploration.histories)}` : '';
  return `A server that deduplicates as SEP-3182 asks, as far as its rules${histories} show`;
}

/** "1 generated history", "30 generated histories". */
export function generatedHistories(count: number): string {
  return `${count} generated ${count === 1 ? 'history' : 'histories'}`;
}
