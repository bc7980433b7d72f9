// --- SEP-3182's rules, stated once: every rule a client can observe, in the order the SEP gives them ---
//
// The checker (`check.ts`) runs them against any server, and the project's own tests run them
// against the demo server (`test/support/sep-cases.ts`): one statement of each rule, two users.
// Each rule quotes the SEP sentence it tests and takes its severity from that sentence's keyword
// (MUST → failure, SHOULD → warning), unless it says why not.
//
// A check never asks the server whether it deduplicated, and never takes an answer's word for it:
// whether something executed is read from the tool's effect (`effect.ts`), through the calls of a
// scenario (`scenarios.ts`) made by a run (`run.ts`). This file is the table: each rule's id, its
// sentence, its severity, and the judgement that reads its scenario.

import {
  carries,
  describe,
  difference,
  errorData,
  ms,
  notStored,
  refused,
  SEP_ERROR,
  same,
} from './answers.js';
import {
  afterwards,
  counterOf,
  describeCounter,
  executionCount,
  executionsBetween,
  reading,
  unexpected,
} from './effect.js';
import type { Exploration } from './explore.js';
import { type Broken, type Call, type CheckInputs, messageOf, type Run } from './run.js';
import {
  absentArguments,
  baseline,
  type Conflicted,
  conflict,
  conflictArguments,
  conflictTool,
  counted,
  equivalent,
  errorReplay,
  escapedStrings,
  forbiddenReplay,
  freshKeys,
  keySpellings,
  noCounter,
  notExecuted,
  otherCaller,
  renormalised,
  reorderedKeys,
  replay,
  replays,
  respelledNumbers,
  retriedAfterAnotherKey,
  unreadable,
  whileInProgress,
} from './scenarios.js';
import { otherArguments, renormalise, some, write } from './spellings.js';
import { fail, na, nc, pass, type Verdict } from './verdict.js';
import { isObject } from './wire.js';

export { type CheckInputs, Run } from './run.js';
export { counterMistake } from './scenarios.js';

export type Severity = 'failure' | 'warning' | 'note';
export type Status = 'passed' | 'failed' | 'warned' | 'not applicable' | 'not checkable';

export interface CheckResult {
  id: string;
  section: string;
  severity: Severity;
  sentence: string;
  status: Status;
  observed: string;
}

// --- The rules, grouped and ordered as the SEP is ---

/** The inputs a rule cannot do without, and what a run without them is told. */
type Need = 'slowArguments' | 'errorArguments' | 'otherTool' | 'other' | 'forbidden';
const NEEDS: Record<Need, (transport: CheckInputs['transport']) => string> = {
  slowArguments: () => 'needs --slow-arguments (a call still running when its duplicate arrives)',
  errorArguments: () => 'needs --error-arguments (arguments that make the call fail)',
  otherTool: () => 'needs --other-tool (a second tool that is safe to call with these arguments)',
  other: (transport) =>
    transport === 'stdio'
      ? 'over stdio the boundary is the local user: no second caller'
      : "needs --other-header (a second caller's credentials)",
  forbidden: (transport) =>
    transport === 'stdio'
      ? 'over stdio there are no credentials to vary'
      : 'needs --forbidden-header (the same caller’s credentials that may not call the tool)',
};

type Judged =
  | {
      judge: (run: Run) => Promise<Verdict>;
      needs?: Need;
      /**
       * The rule rests on deduplication and every run can observe it: a run in which it could not
       * be observed (calls failed, no counter, the server died) checked nothing that matters.
       */
      essential?: true;
    }
  /** Why no client can observe it: such a rule is listed, never judged. */
  | { notCheckable: string };

/** A rule as written below: the SEP's words (quoted exactly; `[…]` marks an elision) and its judge. */
type RuleSpec = { id: string; sentence: string; severity?: Severity } & Judged;

export type Rule = RuleSpec & { section: string; severity: Severity };

/** Severity from the sentence's keyword, unless the rule says otherwise (and why). */
function section(name: string, rules: RuleSpec[]): Rule[] {
  const keyword = (s: string): Severity =>
    /\bMUST\b/.test(s) ? 'failure' : /\bSHOULD\b/.test(s) ? 'warning' : 'note';
  return rules.map((rule) => ({ severity: keyword(rule.sentence), ...rule, section: name }));
}

export const RULES: readonly Rule[] = [
  ...section('Capability declaration', [
    {
      id: 'capability.advertised',
      sentence:
        'This SEP introduces the `tools.idempotency` capability, discoverable via `server/discover` (SEP-2575), rather than treating `idempotencyKey` as a bare optional field with no negotiation',
      // No keyword, but the SEP's server rules all begin "When a server that declares this
      // capability…": without it a client has no guarantee to rely on.
      severity: 'failure',
      judge: async ({ peer }) => {
        const tools = isObject(peer.capabilities) ? peer.capabilities.tools : undefined;
        const found = isObject(tools) ? tools.idempotency : undefined;
        const where = `in the ${peer.discoveredBy} result`;
        if (!isObject(found))
          return fail(`no tools.idempotency object ${where}: tools = ${JSON.stringify(tools)}`);
        return pass(`tools.idempotency = ${JSON.stringify(found)} ${where}`);
      },
    },
  ]),
  ...section('Request format', [
    {
      id: 'new-key.executes',
      sentence:
        'it does not mandate that the key be globally unique — only that a server treat repetition of the same key, within its retention window, as a signal to deduplicate rather than re-execute.',
      // No keyword, but a key never seen is no repetition: deduplicating it (by arguments, say)
      // drops a call the client meant as new, which no rule of the SEP allows.
      severity: 'failure',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const { second: before } = await baseline(run);
          const { first, second } = await freshKeys(run);
          let prior = before;
          for (const call of [first, second]) {
            if (call.kind === 'error')
              return fail(
                `a call with a fresh key was refused: ${describe(call)}, where the same call without a key executes`,
              );
            const n = executionsBetween(counter, prior, call);
            if (n === undefined)
              return unreadable(counter, prior, call, `${describe(prior)}, then ${describe(call)}`);
            if (n === 0)
              return fail(
                `a call with a fresh key got ${describe(call)}, and the counter stayed at ${reading(counter, call)}: an earlier result was replayed, nothing executed`,
              );
            if (n !== 1)
              return fail(
                `one call with a fresh key moved the counter by ${executionCount(n)} executions: ${reading(counter, prior)} → ${reading(counter, call)}`,
              );
            prior = call;
          }
          const counts = [before, first, second].map((call) => reading(counter, call)).join(' → ');
          return pass(`two fresh keys executed once each: counter ${counts}`);
        }),
    },
    {
      id: 'key.opaque',
      sentence: '`idempotencyKey` is an opaque string, client-generated.',
      // No keyword, but an opaque string is compared as it is: a key spelled another way is another
      // operation, and matching it to a stored one drops a call the client meant as new.
      severity: 'failure',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const { before, calls, refusedBases } = await keySpellings(run);
          const [first] = calls;
          if (first?.call.kind === 'error')
            return nc(
              `the keyed call failed: ${describe(first.call)}${refusedBases.length > 1 ? ` (keys tried: ${refusedBases.map((b) => JSON.stringify(b.key)).join(', ')})` : ''}`,
            );
          // Keys the server would not take, under limits of its own: the spellings are of one it takes.
          const limits = refusedBases.length
            ? `; the server refused ${refusedBases.map((b) => `${JSON.stringify(b.key)} (${describe(b.call)})`).join(' and ')}, so the spellings are of one it takes`
            : '';
          let prior = before;
          const readings = [reading(counter, before)];
          const refused: string[] = [];
          for (const { key, how, call } of calls) {
            const { type } = errorData(call);
            if (type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress)
              return fail(
                `the key ${how}, ${JSON.stringify(key)}, was matched against another: ${describe(call)}`,
              );
            if (call.kind === 'error') {
              // A server may publish its own limits on keys (no spaces, say): a refusal matches nothing.
              refused.push(`${how} refused (${describe(call)})`);
              continue;
            }
            const n = executionsBetween(counter, prior, call);
            if (n === undefined)
              return unreadable(counter, prior, call, `${describe(prior)}, then ${describe(call)}`);
            if (n <= 0)
              return fail(
                `the key ${how}, ${JSON.stringify(key)}, got ${describe(call)}, nothing executed (counter ${reading(counter, prior)} → ${reading(counter, call)}): taken for ${JSON.stringify(first?.key)}, whose result it replayed`,
              );
            if (n !== 1)
              return fail(
                `the key ${how}, ${JSON.stringify(key)}, moved the counter by ${executionCount(n)} executions: ${reading(counter, prior)} → ${reading(counter, call)}`,
              );
            prior = call;
            readings.push(reading(counter, call));
          }
          const executed = calls.length - refused.length;
          const hows = calls.slice(1).map((c) => c.how);
          return pass(
            `${executed} spellings of one key executed once each (${JSON.stringify(first?.key)}, ${hows.join(', ')}): counter ${readings.join(' → ')}${refused.length ? `; ${refused.join('; ')}` : ''}${limits}`,
          );
        }),
    },
  ]),
  ...section('Server behavior on a repeated key', [
    {
      id: 'in-progress.not-executed',
      sentence:
        'If a request bearing the same key is still executing […] the server MUST NOT begin a second execution of the tool for the duplicate request',
      needs: 'slowArguments',
      essential: true,
      judge: whileInProgress(({ original, duplicate, extra, moved, account, retry, replayed }) => {
        if (extra !== 0)
          return fail(`the duplicate got ${describe(duplicate)}, yet ${unexpected(extra)}: ${account}`);
        if (!replayed)
          return fail(
            `once the original finished, the key got ${describe(retry)}, ${notStored(original, retry)}`,
          );
        return pass(
          `one execution: the duplicate got ${describe(duplicate)}; ${moved}; the key then replays`,
        );
      }),
    },
    {
      id: 'in-progress.not-blocked',
      sentence: 'and MUST NOT block the duplicate request indefinitely waiting for the original to finish.',
      needs: 'slowArguments',
      judge: whileInProgress(({ original, duplicate, latency, remaining, held, serial, extra }) => {
        const took = `answered after ${ms(latency)}`;
        if (serial) return nc(serial);
        if (!held) return pass(`${took}, while the original ran ${ms(remaining)} more`);
        // A duplicate that executed took its own run's time; in-progress.not-executed reports it.
        if (extra > 0 && duplicate.kind !== 'error' && !same(original, duplicate))
          return pass(`${took}: it executed on its own (in-progress.not-executed), nothing held it`);
        return fail(
          `${took}, of the ${ms(remaining)} the original still ran: held for it, where an answer at once was due`,
        );
      }),
    },
    {
      id: 'in-progress.data',
      sentence:
        'the server SHOULD reject the duplicate immediately with an error indicating a request with this key is already in progress […] servers SHOULD populate `error.data` with a structured value identifying this specific failure mode (for example `{"type": "idempotency_key_in_progress", "idempotencyKey": "<the key>"}`)',
      needs: 'slowArguments',
      judge: whileInProgress(({ key, duplicate, latency, remaining, held, serial }) => {
        if (serial) return nc(serial);
        const { type, idempotencyKey } = errorData(duplicate);
        const when = held ? `, after ${ms(latency)} of the original's ${ms(remaining)}` : '';
        const observed = `the duplicate got ${describe(duplicate)}${when}`;
        return !held && type === SEP_ERROR.inProgress && idempotencyKey === key
          ? pass(observed)
          : fail(observed);
      }),
    },
    {
      id: 'replay.not-executed',
      sentence:
        "If the new request's arguments are equivalent to the arguments of a completed original call […], the server MUST NOT execute the tool again.",
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const { original, retries, probe, before } = await replay(run);
          const [retry] = retries;
          if (!probe || !retry) return nc(`the keyed call failed: ${describe(original)}`);
          const stale = notExecuted(counter, before, original);
          if (stale) return stale;
          const { extra, moved, account } = afterwards(counter, original, probe);
          if (extra === undefined) return unreadable(counter, original, probe, account);
          const stored = same(original, retry) ? ', the stored answer' : '';
          if (extra !== 0)
            return fail(`the retry got ${describe(retry)}${stored}, yet ${unexpected(extra)}: ${account}`);
          return pass(`the retry got ${describe(retry)}; ${moved}`);
        }),
    },
    {
      id: 'replay.identical',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response',
      essential: true,
      judge: async (run) => {
        const { original, retries } = await replay(run);
        const [retry] = retries;
        if (!retry) return nc(`the keyed call failed: ${describe(original)}`);
        if (!same(original, retry))
          return fail(`the retry's answer differs from the original's at ${difference(original, retry)}`);
        const bytes = (call: Call) => call.answer.text.replace(/"id":\d+/, '');
        return pass(
          `${describe(retry)}, ${bytes(original) === bytes(retry) ? 'byte for byte but the id' : 'the same value'}`,
        );
      },
    },
    {
      id: 'replay.own-result',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const seen = await retriedAfterAnotherKey(run, counter);
          if ('outcome' in seen) return seen;
          const { original, other, retry, extra } = seen;
          if (extra > 0)
            return na(
              `the first key's retry executed again (retention.per-key): no replay to compare, it got ${describe(retry)}`,
            );
          if (same(other, retry) && !same(original, other))
            return fail(
              `the first key's retry, after a second key with the same arguments, got the second key's ${describe(other)}, not its own ${describe(original)}`,
            );
          if (!replays(counter, original, retry))
            return fail(
              `the first key's retry, after a second key, got ${describe(retry)}, ${notStored(original, retry)}`,
            );
          return pass(
            `the first key's retry, after a second key with the same arguments, got its own ${describe(retry)}, not the second key's ${describe(other)}`,
          );
        }),
    },
    {
      id: 'errors.replayed',
      sentence:
        'It MUST return the previously produced result — whether that result was a successful response or an error response — unless that result has since expired',
      needs: 'errorArguments',
      judge: async (run) => {
        const { first, second, unkeyed } = await errorReplay(run);
        if (!second || !unkeyed) return nc(`--error-arguments did not fail: ${describe(first)}`);
        // Failures count their own executions (a decline number), or none can be told apart.
        const [a, b] = unkeyed;
        const counter = counterOf(a, b);
        if (!counter)
          return nc(`failures without a key are alike (${describe(a)}): replay looks like re-execution`);
        const { extra, account } = afterwards(counter, first, a, 'the keyed failure');
        if (extra === undefined) return unreadable(counter, first, a, account);
        const ran = extra === 0 ? '' : `; ${unexpected(extra)}: ${account}`;
        if (!same(first, second))
          return fail(
            extra > 0
              ? `ran again: ${describe(first)}, then ${describe(second)}${ran}`
              : `the retry got another answer, at ${difference(first, second)}`,
          );
        if (extra !== 0) return fail(`the stored failure came back, yet ${unexpected(extra)}: ${account}`);
        return pass(`the stored failure was replayed: ${describe(second)}`);
      },
    },
    {
      id: 'conflict.other-arguments',
      sentence:
        "If the new request's arguments differ from the arguments of the original call, the server MUST reject the request […]. The server MUST NOT execute the tool with the new arguments, and MUST NOT silently return the cached result from the original, differently-parameterized call.",
      essential: true,
      judge: async (run) =>
        otherArguments(run.inputs.arguments)
          ? conflict(conflictArguments)(run)
          : na('the arguments have no number, string or boolean to change'),
    },
    {
      id: 'conflict.other-tool',
      sentence:
        'Two requests bearing the same `idempotencyKey` are equivalent if they specify the same tool name and equivalent arguments as parsed JSON values.',
      // The consequence is the conflict rule's MUST: another tool is another request.
      severity: 'failure',
      needs: 'otherTool',
      judge: conflict(conflictTool),
    },
    {
      id: 'conflict.data',
      sentence:
        'servers SHOULD populate the standard JSON-RPC `error.data` field […] with a structured value identifying the failure as an idempotency key conflict, for example `{"type": "idempotency_key_conflict", "idempotencyKey": "<the key>"}`.',
      judge: async (run) => {
        const observed: Conflicted[] = [];
        if (otherArguments(run.inputs.arguments)) observed.push(await conflictArguments(run));
        if (run.inputs.otherTool) observed.push(await conflictTool(run));
        const rejections = observed.flatMap(({ key, rejected }) =>
          rejected?.kind === 'error' ? [{ key, rejected }] : [],
        );
        if (rejections.length === 0)
          return observed.length ? nc('there was no rejection to inspect') : na('no conflict to provoke');
        const wrong = rejections.filter(({ key, rejected }) => {
          const { type, idempotencyKey } = errorData(rejected);
          return type !== SEP_ERROR.conflict || idempotencyKey !== key;
        });
        const shown = [...new Set((wrong.length ? wrong : rejections).map((r) => describe(r.rejected)))];
        return wrong.length
          ? fail(`${wrong.length} of ${rejections.length} rejections: ${shown.join('; ')}`)
          : pass(shown.join('; '));
      },
    },
  ]),
  ...section('Request equivalence', [
    {
      id: 'equivalence.key-order',
      sentence:
        '`{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` MUST be treated as equivalent despite differing key order',
      essential: true,
      judge: async (run) =>
        some(run.inputs.arguments, (v) => isObject(v) && Object.keys(v).length > 1)
          ? reorderedKeys(run)
          : na('the arguments have no object with two members to reorder'),
    },
    {
      id: 'equivalence.whitespace',
      sentence:
        'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
      essential: true,
      judge: equivalent((args) => [write(args, { spaced: true })]),
    },
    {
      id: 'equivalence.number-spelling',
      sentence:
        'numeric values representing the same mathematical value MUST compare equal — `1` and `1.0` MUST be treated as the same value.',
      essential: true,
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'number')
          ? respelledNumbers(run)
          : na('the arguments have no number to spell another way'),
    },
    {
      id: 'equivalence.string-escapes',
      sentence:
        'two differently-escaped encodings of the same string (for example, a literal character versus its `\\uXXXX` escape) MUST be treated as equivalent, since both parse to the same value.',
      essential: true,
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'string')
          ? escapedStrings(run)
          : na('the arguments have no string or member name to escape'),
    },
    {
      id: 'equivalence.absent-arguments',
      sentence:
        'servers MUST NOT treat two requests as different solely because of differences in whitespace, key ordering, or other serialization detail that does not change the parsed value.',
      // The SEP does not say whether a missing `arguments` and `{}` are one parsed value; the tool
      // receives the same input either way, so a difference is worth a warning, not a failure.
      severity: 'warning',
      judge: async (run) =>
        Object.keys(run.inputs.arguments).length === 0
          ? absentArguments(run)
          : na('only for a call whose arguments are {} (absent vs {})'),
    },
    {
      id: 'equivalence.no-unicode-normalization',
      sentence:
        'This SEP does not require Unicode normalization (e.g., NFC/NFD) beyond what parsing already resolves; two strings that are distinct after parsing remain distinct for this comparison.',
      // Distinct arguments make a conflict, so the conflict rule's MUST applies.
      severity: 'failure',
      judge: async (run) =>
        some(run.inputs.arguments, (v) => typeof v === 'string' && renormalise(v) !== v)
          ? conflict(renormalised)(run)
          : na('the arguments have no string whose NFC and NFD forms differ (such as "café")'),
    },
    {
      id: 'equivalence.tool-implementation',
      sentence:
        "A server that replaces a tool's implementation while a previously-recorded call remains within its retention window will still replay that call's original recorded result",
      notCheckable: 'a client cannot replace the tool between a call and its retry',
    },
  ]),
  ...section('Retention', [
    {
      id: 'retention.per-key',
      sentence: 'A server MUST retain enough state to answer a repeated key within a bounded window',
      essential: true,
      judge: (run) =>
        counted(run, async (counter) => {
          const seen = await retriedAfterAnotherKey(run, counter);
          if ('outcome' in seen) return seen;
          const { retry, extra, moved, account } = seen;
          if (extra !== 0)
            return fail(
              `the first key, retried after a second key, got ${describe(retry)}, yet ${unexpected(extra)}: ${account}; its record was gone`,
            );
          return pass(`the first key, retried after a second key, got ${describe(retry)}; ${moved}`);
        }),
    },
    {
      id: 'retention.bounded',
      sentence: 'A server MUST retain enough state to answer a repeated key within a bounded window',
      notCheckable:
        'the window is the server’s choice and not advertised; replay.* cover seconds, expiry means waiting it out',
    },
    {
      id: 'retention.documented',
      sentence: 'Servers SHOULD document their retention window through server-level documentation',
      notCheckable: 'documentation is not on the wire',
    },
  ]),
  ...section('Implementation ordering is intentionally unspecified', [
    {
      id: 'ordering.crash',
      sentence:
        'A server that executes a side effect and crashes before persisting the corresponding idempotency record will, if retried, execute that side effect again',
      notCheckable: 'it would take crashing the server between the side effect and its record',
    },
  ]),
  ...section('Relationship to the 2026-07-28 stateless core and MRTR', [
    {
      id: 'stateless.shared-store',
      sentence:
        "A server implementing this SEP in a horizontally-scaled, stateless deployment MUST therefore make its idempotency record store visible to every instance handling that server's traffic",
      notCheckable:
        'a client cannot tell instances apart behind one URL; replay.* pass by luck on an unshared store',
    },
  ]),
  ...section('Backward Compatibility', [
    {
      id: 'no-key.executes-every-time',
      sentence:
        'A client MAY omit `idempotencyKey` entirely and receive the same behavior as before this proposal.',
      // A MAY for the client is a promise by the server: calls without a key all execute.
      severity: 'failure',
      judge: async (run) => {
        const { first, second, counter } = await baseline(run);
        if (first.kind === 'error') return nc(`the call failed: ${describe(first)}`);
        if (counter) return pass(`${describe(first)}, then ${describe(second)}`);
        return nc(
          `${noCounter(first, second, run.inputs.counter)}: pick a --tool whose result shows each execution (a balance, a counter)`,
        );
      },
    },
  ]),
  ...section('Security Implications', [
    {
      id: 'scope.per-caller',
      sentence:
        'Servers MUST scope their idempotency records to whatever authorization boundary already governs access to the underlying tool call […] so that a key is only ever matched against a prior request from the same authorized caller.',
      needs: 'other',
      judge: (run) =>
        counted(run, async (counter) => {
          const { first, fresh, second } = await otherCaller(run);
          if (!fresh || !second) return nc(`the first caller's call failed: ${describe(first)}`);
          if (fresh.kind === 'error')
            return nc(
              `the other caller's call with a fresh key failed (may it call the tool?): ${describe(fresh)}`,
            );
          const { type } = errorData(second);
          if (type === SEP_ERROR.conflict || type === SEP_ERROR.inProgress)
            return fail(`matched against the first caller's record: ${describe(second)}`);
          if (second.kind === 'error')
            return fail(
              `the other caller's first use of the key was refused: ${describe(second)}, though its call with a fresh key executed`,
            );
          if (same(first, second))
            return fail(`the other caller got the first caller's result: ${describe(second)}`);
          const n = executionsBetween(counter, fresh, second);
          if (n === undefined)
            return unreadable(counter, fresh, second, `${describe(fresh)}, then ${describe(second)}`);
          if (n !== 1)
            return fail(
              `the other caller's call with the key moved its counter by ${executionCount(n)} executions: ${reading(counter, fresh)} → ${reading(counter, second)}`,
            );
          return pass(`the other caller's call executed: ${describe(second)}`);
        }),
    },
    {
      id: 'authorization.at-replay',
      sentence:
        'A replayed response MUST still be subject to whatever authorization check would ordinarily govern access to it',
      needs: 'forbidden',
      judge: (run) =>
        counted(run, async () => {
          const { fresh, original, replayed, retry } = await forbiddenReplay(run);
          if (!original)
            return nc(
              `the --forbidden-header credentials may call the tool: a first call got ${describe(fresh)}`,
            );
          if (!replayed || !retry) return nc(`the keyed call failed: ${describe(original)}`);
          const firstCall = `a first call with them got ${describe(fresh)}`;
          if (!refused(replayed)) {
            if (same(original, replayed))
              return fail(
                `the stored result went to credentials that may not call it: ${describe(replayed)} (${firstCall})`,
              );
            return fail(`not refused: ${describe(replayed)} (${firstCall}; original ${describe(original)})`);
          }
          if (carries(replayed, original))
            return fail(
              `refused with ${describe(replayed)}, but the refusal carries the stored ${describe(original)}`,
            );
          if (!same(original, retry)) {
            // A server that never replays fails replay.not-executed already; whether the forbidden
            // call touched the record cannot be told from there being no record to touch.
            const plain = await replay(run);
            const [again] = plain.retries;
            if (again && again.kind !== 'error' && !same(plain.original, again))
              return na(
                `no replay to authorize: the server executes a keyed retry again (replay.not-executed); the caller's retry got ${describe(retry)} after the original ${describe(original)}`,
              );
            return fail(
              `refused with ${describe(replayed)}, but the caller's retry then got ${describe(retry)}, not the original ${describe(original)}`,
            );
          }
          return pass(
            `refused: ${describe(replayed)}, like a first call; the caller's retry replayed ${describe(retry)}`,
          );
        }),
    },
    {
      id: 'security.resource-limits',
      sentence:
        'Servers SHOULD apply the same rate-limiting and resource-quota mechanisms they already apply to other server-side state (e.g., Tasks) to their idempotency records',
      notCheckable:
        'seeing a quota means flooding the server with keys; the checker makes only the calls it needs',
    },
  ]),
];

/** One rule against `run`: its scenarios run now unless an earlier rule of the run made them. */
export async function checkRule(run: Run, rule: Rule): Promise<CheckResult> {
  const { id, section, severity, sentence } = rule;
  run.current = id;
  const verdict = await judge(run, rule).catch((error: unknown) =>
    nc(`the exchange broke: ${run.broken?.reason ?? messageOf(error)}`),
  );
  const { outcome, observed } = verdict;
  const broken = severity === 'failure' ? 'failed' : 'warned';
  const status = outcome === 'holds' ? 'passed' : outcome === 'broken' ? broken : outcome;
  return { id, section, severity, sentence, status, observed };
}

function judge(run: Run, rule: Rule): Promise<Verdict> {
  if ('notCheckable' in rule) return Promise.resolve(nc(rule.notCheckable));
  if (rule.needs && run.inputs[rule.needs] === undefined)
    return Promise.resolve(na(NEEDS[rule.needs](run.inputs.transport)));
  return rule.judge(run);
}

/**
 * The report with the explorer's finding in it: the rule it breaks fails (or warns) with what the
 * explorer saw, unless a scripted check of the rule already failed it.
 */
export function withExploration(report: Report, exploration: Exploration): Report {
  const failure = exploration.failure;
  const results = report.results.map((result) => {
    if (!failure || failure.rule !== result.id || result.status === 'failed' || result.status === 'warned')
      return result;
    const status: Status = result.severity === 'failure' ? 'failed' : 'warned';
    return { ...result, status, observed: `explored: ${failure.observed} (the shrunk history below)` };
  });
  // A rule the explorer broke was observed after all, whatever its scripted check could not see.
  const unobserved = report.unobserved.filter((id) => id !== failure?.rule);
  return { ...report, results, unobserved, exploration };
}

/** What a run found: each rule judged, and what keeps the run from meaning anything, if so. */
export interface Report {
  results: CheckResult[];
  /** The rules left unjudged because the exchange broke. */
  notRun: string[];
  broken?: Broken;
  /** The essential rules that could not be observed (not checkable, or not run). */
  unobserved: string[];
  /** Which numbers of the tool's result were read as its counter, in words; absent if none. */
  counter?: string;
  /** What the generated histories found, when the explorer ran. */
  exploration?: Exploration;
}

const ESSENTIAL = new Set(RULES.flatMap((rule) => ('essential' in rule && rule.essential ? [rule.id] : [])));

/** Every rule in the SEP's order; each scenario runs once, for whichever rule needs it first. */
export async function runChecks(run: Run): Promise<Report> {
  // First: every judgement of "executed" reads the counter these calls prove.
  const { counter } = await baseline(run).catch(() => ({ counter: undefined }));
  const results: CheckResult[] = [];
  const notRun: string[] = [];
  for (const rule of RULES) {
    if (run.broken) notRun.push(rule.id);
    else results.push(await checkRule(run, rule));
  }
  const unobserved = [
    ...results.filter((r) => ESSENTIAL.has(r.id) && r.status === 'not checkable').map((r) => r.id),
    ...notRun.filter((id) => ESSENTIAL.has(id)),
  ];
  return {
    results,
    notRun,
    unobserved,
    ...(run.broken && { broken: run.broken }),
    ...(counter && { counter: describeCounter(counter) }),
  };
}
