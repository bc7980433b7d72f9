// --- A reference model of SEP-3182, and random programs to run against the real guard ---
//
// The model is the SEP's rules written the plain way, knowing nothing of the guard's code: a
// map from (scope, key) to what holds it, a balance, a clock. Commands are the things a
// network can do to a server: calls with keys drawn from a small pool (so they collide),
// equal, reordered or different arguments, slow charges left running while other calls
// arrive, two sends at once, time passing, resets. After every command the real system
// (McpServer + guard over the SDK's in-memory transport, sharing one provider) must agree
// with the model on every answer, on what the provider is doing and on the balance.

import { AsyncLocalStorage } from 'node:async_hooks';
import { isDeepStrictEqual } from 'node:util';
import { type CallToolResult, SERVER_INFO_META_KEY } from '@modelcontextprotocol/client';
import fc from 'fast-check';
import {
  IdempotencyErrorType,
  type IdempotencyStore,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  idempotencyErrorOf,
} from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import type { Ledger } from '../../ledger.js';
import { SERVER_INFO } from '../../server.js';
import { connectInProcess, type InProcessConnection } from './in-process.js';

// --- The provider, with a gate the test opens ---

/** Which call a charge belongs to: the test runs each call inside its own context. */
const currentCall = new AsyncLocalStorage<number>();

interface HeldCharge {
  call: number;
  amount: number;
  release(): void;
}

/** A ledger whose charges wait at a gate until the test releases them: a slow provider, on demand. */
export class GatedLedger implements Ledger {
  readonly held: HeldCharge[] = [];
  /** Every charge committed, and for which call: what the provider actually did. */
  readonly commits: Array<{ call: number; amount: number }> = [];
  private total = 0;

  async charge(amount: number): Promise<number> {
    const call = currentCall.getStore() ?? -1;
    await new Promise<void>((release) => this.held.push({ call, amount, release }));
    this.total += amount;
    this.commits.push({ call, amount });
    return this.total;
  }

  refund(amount: number): Promise<number> {
    return this.charge(-amount);
  }

  heldCalls(): number[] {
    return this.held.map((h) => h.call).sort((a, b) => a - b);
  }

  release(call: number): void {
    const index = this.held.findIndex((h) => h.call === call);
    const [entry] = index === -1 ? [] : this.held.splice(index, 1);
    if (!entry) throw new Error(`call #${call} is not held at the provider`);
    entry.release();
  }

  async balance(): Promise<number> {
    return this.total;
  }

  async reset(): Promise<void> {
    this.total = 0;
  }
}

// --- Calls ---

export const TOOLS = ['charge_guarded', 'charge_unguarded', 'get_balance', 'no_such_tool'] as const;
export type Tool = (typeof TOOLS)[number];

/** Three callers: two sessions of alice (one authorization boundary), and bob. */
export const CALLERS = [
  { name: 'alice/1', scope: 'alice' },
  { name: 'alice/2', scope: 'alice' },
  { name: 'bob', scope: 'bob' },
] as const;

export interface CallSpec {
  tool: Tool;
  amount: number;
  note?: string;
  /** Writes `note` before `amount`: the same request, its keys in another order. */
  noteFirst: boolean;
  idempotencyKey?: string;
}

function argumentsOf(spec: CallSpec): Record<string, unknown> {
  if (spec.note === undefined) return { amount: spec.amount };
  return spec.noteFirst ? { note: spec.note, amount: spec.amount } : { amount: spec.amount, note: spec.note };
}

export function describeCall(spec: CallSpec): string {
  const key = spec.idempotencyKey === undefined ? 'no key' : `key=${spec.idempotencyKey}`;
  return `${spec.tool}(${JSON.stringify(argumentsOf(spec))}) ${key}`;
}

export const callSpec: fc.Arbitrary<CallSpec> = fc.record(
  {
    tool: fc.oneof(
      { weight: 6, arbitrary: fc.constant<Tool>('charge_guarded') },
      { weight: 2, arbitrary: fc.constant<Tool>('charge_unguarded') },
      { weight: 1, arbitrary: fc.constant<Tool>('get_balance') },
      { weight: 1, arbitrary: fc.constant<Tool>('no_such_tool') },
    ),
    // Mostly valid amounts from a small pool (equal arguments are common), sometimes invalid.
    amount: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(1, 2, 100) }, fc.constantFrom(0, -5)),
    note: fc.constantFrom('a', 'b'),
    noteFirst: fc.boolean(),
    idempotencyKey: fc.constantFrom('k1', 'k2', 'k3'),
  },
  { requiredKeys: ['tool', 'amount', 'noteFirst'] },
);

// --- What a call is answered ---

export type Outcome =
  | { kind: 'result'; result: CallToolResult }
  | { kind: 'error'; code?: number; type?: string; idempotencyKey?: string; message: string };

type Expectation =
  /** Reached the provider and waits at its gate. */
  | { kind: 'held' }
  /** Answered exactly this (a replay: the original's answer, as its caller received it). */
  | { kind: 'exactly'; outcome: Outcome }
  /** A tool error result (an invalid amount), answered at once. */
  | { kind: 'toolError'; text: RegExp }
  /** A JSON-RPC error from the server's own dispatch (an unknown tool), answered at once. */
  | { kind: 'rpcError'; code: number; message: RegExp }
  | { kind: 'error'; code: number; type: string; idempotencyKey: string };

/** On 2026-07-28 the SDK stamps every result with the server's identity (servers SHOULD). */
const RESULT_META = { [SERVER_INFO_META_KEY]: SERVER_INFO };

function chargeResult(amount: number, balance: number): Outcome {
  return {
    kind: 'result',
    result: {
      _meta: RESULT_META,
      content: [{ type: 'text', text: `Charged ${amount}. New balance: ${balance}` }],
      structuredContent: { charged: amount, balance },
    },
  };
}

function balanceResult(balance: number): Outcome {
  return {
    kind: 'result',
    result: {
      _meta: RESULT_META,
      content: [{ type: 'text', text: `Balance: ${balance}` }],
      structuredContent: { balance },
    },
  };
}

function describeOutcome(outcome: Outcome | undefined): string {
  if (!outcome) return 'no answer yet';
  if (outcome.kind === 'error') return `error ${outcome.code} ${outcome.type ?? outcome.message}`;
  return JSON.stringify(outcome.result);
}

function describeExpectation(expectation: Expectation): string {
  switch (expectation.kind) {
    case 'held':
      return 'to be executing at the provider';
    case 'exactly':
      return describeOutcome(expectation.outcome);
    case 'toolError':
      return `a tool error matching ${expectation.text}`;
    case 'rpcError':
      return `error ${expectation.code} matching ${expectation.message}`;
    case 'error':
      return `error ${expectation.code} ${expectation.type}`;
  }
}

/** Why `outcome` is not what was expected, or undefined if it is. */
function mismatch(expectation: Expectation, outcome: Outcome | undefined, held: boolean): string | undefined {
  const why = `expected ${describeExpectation(expectation)}, got ${held ? 'executing at the provider' : describeOutcome(outcome)}`;
  if (expectation.kind === 'held') return held && !outcome ? undefined : why;
  if (held || !outcome) return why;
  switch (expectation.kind) {
    case 'exactly':
      return isDeepStrictEqual(outcome, expectation.outcome) ? undefined : why;
    case 'toolError': {
      if (outcome.kind !== 'result' || outcome.result.isError !== true) return why;
      const text = outcome.result.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
      return expectation.text.test(text) ? undefined : why;
    }
    case 'rpcError':
      return outcome.kind === 'error' &&
        outcome.code === expectation.code &&
        outcome.type === undefined &&
        expectation.message.test(outcome.message)
        ? undefined
        : why;
    case 'error':
      return outcome.kind === 'error' &&
        outcome.code === expectation.code &&
        outcome.type === expectation.type &&
        outcome.idempotencyKey === expectation.idempotencyKey
        ? undefined
        : why;
  }
}

// --- The model: the SEP's rules, and this server's stated choices ---

/** What the programs exercised, summed over every run (the report quotes it). */
export const tally = {
  programs: 0,
  steps: 0,
  calls: 0,
  executedWithoutKey: 0,
  executedUnderKey: 0,
  replayed: 0,
  conflict: 0,
  inProgress: 0,
  storeFull: 0,
  quotaExceeded: 0,
  concurrentPairs: 0,
  leaseExpiredWhileRunning: 0,
  /** Steps of the wall clock alone while a claim ran (a step the claim must outlive). */
  wallClockStepsWhileRunning: 0,
  retentionExpired: 0,
  resets: 0,
};

/** Counts how each of these calls was decided, once the real system agreed with the model. */
function countCalls(model: GuardModel, ids: number[]): void {
  for (const id of ids) {
    const call = model.calls.get(id);
    if (!call) continue;
    tally.calls += 1;
    const { expectation } = call;
    if (call.executed) {
      if (call.slot) tally.executedUnderKey += 1;
      else tally.executedWithoutKey += 1;
    } else if (expectation.kind === 'exactly') tally.replayed += 1;
    else if (expectation.kind === 'error') {
      if (expectation.type === IdempotencyErrorType.conflict) tally.conflict += 1;
      if (expectation.type === IdempotencyErrorType.inProgress) tally.inProgress += 1;
      if (expectation.type === IdempotencyErrorType.storeFull) tally.storeFull += 1;
      if (expectation.type === IdempotencyErrorType.quotaExceeded) tally.quotaExceeded += 1;
    }
  }
}

export interface ModelSettings {
  retentionMs: number;
  leaseMs: number;
  /** The memory store's cap; a Redis store has none (its cap is Redis' maxmemory). */
  maxRecords?: number;
  /** Each caller's quota of live records (SEP: servers SHOULD apply quotas to the records). */
  maxRecordsPerScope?: number;
  /**
   * When an expired record disappears. `eager` (Redis): the moment it expires. `lazy` (the
   * memory store): at the next claim of any key, so a claim whose lease ran out while nobody
   * else claimed can still complete and be recorded, which only errs on the safe side.
   */
  expiry: 'eager' | 'lazy';
  /**
   * The clock a claim's lease is on. `shared` (memory, Redis): the one clock retention is on too.
   * `monotonic` (SQLite): the machine's monotonic clock, which a step of the wall clock does not
   * move, while completed records keep their retention on the wall clock.
   */
  leaseClock?: 'shared' | 'monotonic';
}

interface ModelRecord {
  scope: string;
  fingerprint: string;
  state: 'inProgress' | 'completed';
  owner: number;
  /** When it expires, on the clock `clock` names: the lease's, or the wall clock. */
  expiresAt: number;
  clock: 'lease' | 'wall';
  response?: Outcome;
}

interface ModelCall {
  id: number;
  caller: number;
  spec: CallSpec;
  expectation: Expectation;
  /** The slot whose record this call's execution completes, if it claimed one. */
  slot?: string;
  /** Executions the SEP allowed: each call executes at most once. */
  executed: boolean;
}

export class GuardModel {
  /** The wall clock. */
  now = 0;
  /** The clock leases are on: the wall clock unless `settings.leaseClock` is `monotonic`. */
  leaseNow = 0;
  balance = 0;
  records = new Map<string, ModelRecord>();
  calls = new Map<number, ModelCall>();
  /** Calls executing at the provider, waiting at its gate. */
  held: number[] = [];
  expired = { leaseWhileRunning: 0, retention: 0 };

  constructor(readonly settings: ModelSettings) {}

  clone(): GuardModel {
    const copy = new GuardModel(this.settings);
    copy.adopt(this);
    return copy;
  }

  adopt(other: GuardModel): void {
    this.now = other.now;
    this.leaseNow = other.leaseNow;
    this.balance = other.balance;
    this.records = new Map([...other.records].map(([slot, record]) => [slot, { ...record }]));
    this.calls = new Map([...other.calls].map(([id, call]) => [id, { ...call }]));
    this.held = [...other.held];
    this.expired = { ...other.expired };
  }

  /** A call arrives. Returns what it must be answered. */
  send(id: number, caller: number, spec: CallSpec): Expectation {
    const call: ModelCall = { id, caller, spec, expectation: { kind: 'held' }, executed: false };
    this.calls.set(id, call);
    call.expectation = this.decide(call);
    return call.expectation;
  }

  private decide(call: ModelCall): Expectation {
    const { spec } = call;
    const key = spec.idempotencyKey;
    // SEP: no key, exactly today's behaviour.
    if (key === undefined) return this.execute(call);

    const scope = CALLERS[call.caller]?.scope ?? 'unknown';
    const slot = JSON.stringify([scope, key]);
    if (this.settings.expiry === 'lazy') this.expire();
    const holder = this.records.get(slot);
    if (holder) {
      // SEP: a different request under the key is a conflict, even while the original runs.
      if (holder.fingerprint !== fingerprintOf(spec)) {
        return {
          kind: 'error',
          code: INVALID_PARAMS,
          type: IdempotencyErrorType.conflict,
          idempotencyKey: key,
        };
      }
      if (holder.state === 'inProgress' || !holder.response) {
        return {
          kind: 'error',
          code: INVALID_PARAMS,
          type: IdempotencyErrorType.inProgress,
          idempotencyKey: key,
        };
      }
      // SEP: the stored response, exactly as the original's caller got it.
      return { kind: 'exactly', outcome: holder.response };
    }
    if (this.settings.maxRecords !== undefined && this.records.size >= this.settings.maxRecords) {
      return {
        kind: 'error',
        code: INTERNAL_ERROR,
        type: IdempotencyErrorType.storeFull,
        idempotencyKey: key,
      };
    }
    // The caller's own quota, after the global cap: one caller's records never refuse another's.
    const quota = this.settings.maxRecordsPerScope;
    if (quota !== undefined && [...this.records.values()].filter((r) => r.scope === scope).length >= quota) {
      return {
        kind: 'error',
        code: INTERNAL_ERROR,
        type: IdempotencyErrorType.quotaExceeded,
        idempotencyKey: key,
      };
    }
    this.records.set(slot, {
      scope,
      fingerprint: fingerprintOf(spec),
      state: 'inProgress',
      owner: call.id,
      expiresAt: this.leaseNow + this.settings.leaseMs,
      clock: 'lease',
    });
    call.slot = slot;
    return this.execute(call);
  }

  /** The tool runs: a valid charge goes to the provider; anything else is answered at once. */
  private execute(call: ModelCall): Expectation {
    call.executed = true;
    const { tool, amount } = call.spec;
    if (tool === 'charge_guarded' || tool === 'charge_unguarded') {
      if (Number.isSafeInteger(amount) && amount > 0) {
        this.held.push(call.id);
        return { kind: 'held' };
      }
      return { kind: 'toolError', text: /amount/ };
    }
    if (tool === 'get_balance') return { kind: 'exactly', outcome: balanceResult(this.balance) };
    return { kind: 'rpcError', code: INVALID_PARAMS, message: /Tool no_such_tool not found/ };
  }

  /** The provider commits a held charge; its answer is the new balance. */
  release(id: number): Expectation {
    const call = this.calls.get(id);
    if (!call) throw new Error(`model: no call #${id}`);
    this.held = this.held.filter((h) => h !== id);
    this.balance += call.spec.amount;
    call.expectation = { kind: 'exactly', outcome: chargeResult(call.spec.amount, this.balance) };
    return call.expectation;
  }

  /**
   * The call's answer arrived (checked against its expectation): if its claim is still the
   * live record, the guard recorded that answer for `retentionMs`.
   */
  answered(id: number, outcome: Outcome): void {
    const call = this.calls.get(id);
    if (!call?.slot) return;
    const record = this.records.get(call.slot);
    if (record?.owner !== id || record.state !== 'inProgress') return;
    record.state = 'completed';
    record.response = outcome;
    record.expiresAt = this.now + this.settings.retentionMs;
    record.clock = 'wall';
  }

  /** Time passes: every clock moves. */
  advance(ms: number): void {
    this.now += ms;
    this.leaseNow += ms;
    if (this.settings.expiry === 'eager') this.expire();
  }

  /** The wall clock steps (NTP, a VM resumed) and time does not pass: a monotonic clock stays. */
  stepWallClock(ms: number): void {
    this.now += ms;
    if (this.settings.leaseClock !== 'monotonic') this.leaseNow += ms;
    if (this.settings.expiry === 'eager') this.expire();
  }

  /** reset_ledger: the balance and every record, in progress or not, are gone. */
  reset(): void {
    this.balance = 0;
    this.records.clear();
  }

  private expire(): void {
    for (const [slot, record] of this.records) {
      if (record.expiresAt > (record.clock === 'lease' ? this.leaseNow : this.now)) continue;
      this.records.delete(slot);
      if (record.state === 'inProgress') this.expired.leaseWhileRunning += 1;
      else this.expired.retention += 1;
    }
  }
}

/** The SEP's equivalence, written independently of the guard: tool name, arguments with sorted keys. */
function fingerprintOf(spec: CallSpec): string {
  const args = argumentsOf(spec);
  const sorted = Object.fromEntries(
    Object.keys(args)
      .sort()
      .map((k) => [k, args[k]]),
  );
  return JSON.stringify([spec.tool, sorted]);
}

// --- The real system ---

export interface RealCall {
  id: number;
  caller: number;
  spec: CallSpec;
  outcome?: Outcome;
  answered: Promise<void>;
}

export interface RealSystem {
  ledger: GatedLedger;
  calls: Map<number, RealCall>;
  send(caller: number, spec: CallSpec): RealCall;
  /** reset_ledger, called without a key through `caller`. */
  reset(caller: number): Promise<void>;
  advance(ms: number): Promise<void>;
  /** Steps the wall clock alone, where the store reads one besides the clock its leases are on. */
  stepWallClock?(ms: number): Promise<void>;
  /** How long quiet must last before the system counts as settled (a Redis round trip is not instant). */
  settleMs: number;
  /** How long to wait for the system to show what the model expects before calling it a mismatch. */
  deadlineMs: number;
  close(): Promise<void>;
}

export interface RealSystemOptions {
  /** The store each caller's server uses: one shared store, or one Redis connection each. */
  storeFor(caller: number): IdempotencyStore;
  retentionMs: number;
  leaseMs: number;
  advance(ms: number): Promise<void>;
  stepWallClock?(ms: number): Promise<void>;
  settleMs: number;
  deadlineMs: number;
  close(): Promise<void>;
}

/** `storeFor` where each caller's server has a store of its own (its own connection or file handle). */
export function storeOfEach(stores: readonly IdempotencyStore[]): (caller: number) => IdempotencyStore {
  return (caller) => {
    const store = stores[caller];
    if (!store) throw new Error(`no store for caller ${caller}`);
    return store;
  };
}

/** The timing of a store across a connection: each answer takes a real round trip or two. */
export const CONNECTED_STORE_TIMING = { settleMs: 2, deadlineMs: 2_000 } as const;

export async function startRealSystem(options: RealSystemOptions): Promise<RealSystem> {
  const ledger = new GatedLedger();
  const connections: InProcessConnection[] = [];
  for (const [index, caller] of CALLERS.entries()) {
    connections.push(
      await connectInProcess({
        store: options.storeFor(index),
        ledger,
        scope: caller.scope,
        retentionMs: options.retentionMs,
        leaseMs: options.leaseMs,
        // A request per fetch call: each charge reaches the ledger in its own call's context.
        entry: 'http',
      }),
    );
  }
  const calls = new Map<number, RealCall>();
  let nextId = 1;
  const clientOf = (caller: number) => {
    const connection = connections[caller];
    if (!connection) throw new Error(`no caller ${caller}`);
    return connection.client;
  };
  return {
    ledger,
    calls,
    send(caller, spec) {
      const id = nextId++;
      const call: RealCall = { id, caller, spec, answered: Promise.resolve() };
      const wire =
        spec.idempotencyKey === undefined
          ? { name: spec.tool, arguments: argumentsOf(spec) }
          : { name: spec.tool, arguments: argumentsOf(spec), idempotencyKey: spec.idempotencyKey };
      call.answered = currentCall
        .run(id, () => callTool(clientOf(caller), wire))
        .then(
          (result) => {
            call.outcome = { kind: 'result', result };
          },
          (error: unknown) => {
            const sep = idempotencyErrorOf(error);
            const code: unknown =
              typeof error === 'object' && error !== null ? Reflect.get(error, 'code') : undefined;
            call.outcome = {
              kind: 'error',
              code: typeof code === 'number' ? code : undefined,
              type: sep?.type,
              idempotencyKey: sep?.idempotencyKey,
              message: error instanceof Error ? error.message : String(error),
            };
          },
        );
      calls.set(id, call);
      return call;
    },
    async reset(caller) {
      await callTool(clientOf(caller), { name: 'reset_ledger', arguments: {} });
    },
    advance: options.advance,
    ...(options.stepWallClock && { stepWallClock: options.stepWallClock }),
    settleMs: options.settleMs,
    deadlineMs: options.deadlineMs,
    async close() {
      // Whatever is still held is let through, so no promise is left dangling.
      for (const held of ledger.held.splice(0)) held.release();
      await Promise.all([...calls.values()].map((c) => c.answered));
      await Promise.all(connections.map((c) => c.close()));
      await options.close();
    },
  };
}

// --- Checking the real system against the model ---

/** Waits until the real system shows what `model` expects (or the deadline passes), then stays quiet. */
async function settle(real: RealSystem, agrees: () => boolean): Promise<void> {
  const deadline = performance.now() + real.deadlineMs;
  while (!agrees() && performance.now() < deadline) await tick(real.settleMs);
  // Stay a little longer: a stray second execution would show up now.
  await tick(real.settleMs);
  await tick(real.settleMs);
}

function tick(ms: number): Promise<void> {
  return new Promise((resolve) => (ms === 0 ? setImmediate(resolve) : setTimeout(resolve, ms)));
}

/** Every difference between the model and the real system, in words; empty when they agree. */
function differences(model: GuardModel, real: RealSystem, ids: number[]): string[] {
  const found: string[] = [];
  const held = real.ledger.heldCalls();
  for (const id of ids) {
    const expected = model.calls.get(id);
    const call = real.calls.get(id);
    if (!expected || !call) continue;
    const why = mismatch(expected.expectation, call.outcome, held.includes(id));
    if (why) found.push(`call #${id} ${describeCall(call.spec)} from ${CALLERS[call.caller]?.name}: ${why}`);
  }
  const modelHeld = [...model.held].sort((a, b) => a - b);
  if (JSON.stringify(held) !== JSON.stringify(modelHeld)) {
    found.push(`executing at the provider: calls [${held}], the model allows [${modelHeld}]`);
  }
  return found;
}

function assertAgreement(model: GuardModel, real: RealSystem, ids: number[]): void {
  const found = differences(model, real, ids);
  if (found.length > 0) throw new Error(found.join('\n'));
}

/** After every command: answers as the model says, and the provider's balance is the model's. */
async function checkInvariants(model: GuardModel, real: RealSystem): Promise<void> {
  const balance = await real.ledger.balance();
  if (balance !== model.balance) {
    throw new Error(
      `the provider's balance is ${balance}, the executions the model allowed add up to ${model.balance}`,
    );
  }
  for (const commit of real.ledger.commits) {
    if (!model.calls.get(commit.call)?.executed) {
      throw new Error(`call #${commit.call} was charged, and the model never let it execute`);
    }
  }
  const charged = real.ledger.commits.map((c) => c.call);
  if (new Set(charged).size !== charged.length) throw new Error(`a call was charged twice: ${charged}`);
}

/** Records each answered call's real answer in the model (what a replay must repeat). */
function learnAnswers(model: GuardModel, real: RealSystem, ids: number[]): void {
  for (const id of ids) {
    const outcome = real.calls.get(id)?.outcome;
    if (outcome) model.answered(id, outcome);
  }
}

// --- Commands ---

type Command = fc.AsyncCommand<GuardModel, RealSystem>;

/** One call; fast ones are let through the provider at once, slow ones stay there. */
class Send implements Command {
  constructor(
    readonly caller: number,
    readonly spec: CallSpec,
    readonly slow: boolean,
  ) {}

  check(): boolean {
    return true;
  }

  async run(model: GuardModel, real: RealSystem): Promise<void> {
    tally.steps += 1;
    const call = real.send(this.caller, this.spec);
    const expectation = model.send(call.id, this.caller, this.spec);
    await settle(real, () => differences(model, real, [call.id]).length === 0);
    assertAgreement(model, real, [call.id]);
    countCalls(model, [call.id]);
    if (expectation.kind === 'held' && !this.slow) {
      model.release(call.id);
      real.ledger.release(call.id);
      await settle(real, () => differences(model, real, [call.id]).length === 0);
      assertAgreement(model, real, [call.id]);
    }
    learnAnswers(model, real, [call.id]);
    await checkInvariants(model, real);
  }

  toString(): string {
    return `${CALLERS[this.caller]?.name} sends ${describeCall(this.spec)}${this.slow ? ', slow' : ''}`;
  }
}

/**
 * Two calls in the same tick, through two callers: a retry racing its original. Whichever
 * claims first executes; the model accepts either order, and learns which one happened. A call
 * answered at once (a tool error, an unknown tool) may also be recorded before the other claims,
 * on a busy machine or through another instance's connection: the other then replays it.
 */
class SendTogether implements Command {
  constructor(
    readonly callers: [number, number],
    readonly specs: [CallSpec, CallSpec],
  ) {}

  check(): boolean {
    return true;
  }

  async run(model: GuardModel, real: RealSystem): Promise<void> {
    tally.steps += 1;
    const first = real.send(this.callers[0], this.specs[0]);
    const second = real.send(this.callers[1], this.specs[1]);
    const ids = [first.id, second.id];
    /** What the model allows when `earlier` is answered at once and recorded before `later` claims. */
    const recordedFirst = (earlier: RealCall, later: RealCall): GuardModel | undefined => {
      if (!earlier.outcome) return undefined;
      const candidate = model.clone();
      if (candidate.send(earlier.id, earlier.caller, earlier.spec).kind === 'held') return undefined;
      candidate.answered(earlier.id, earlier.outcome);
      candidate.send(later.id, later.caller, later.spec);
      return candidate;
    };
    const inOrder = model.clone();
    inOrder.send(first.id, first.caller, first.spec);
    inOrder.send(second.id, second.caller, second.spec);
    const reversed = model.clone();
    reversed.send(second.id, second.caller, second.spec);
    reversed.send(first.id, first.caller, first.spec);
    // Either order of claiming, then either call recorded first once it has its answer; in
    // order first, so that where several agree the model learns the plainest.
    const candidates = () =>
      [inOrder, reversed, recordedFirst(first, second), recordedFirst(second, first)].filter(
        (candidate) => candidate !== undefined,
      );
    const agrees = (candidate: GuardModel) => differences(candidate, real, ids).length === 0;
    await settle(real, () => candidates().some(agrees));
    model.adopt(candidates().find(agrees) ?? inOrder);
    assertAgreement(model, real, ids);
    countCalls(model, ids);
    tally.concurrentPairs += 1;
    learnAnswers(model, real, ids);
    await checkInvariants(model, real);
  }

  toString(): string {
    const [a, b] = this.callers.map((c) => CALLERS[c]?.name);
    return `${a} and ${b} send at once: ${describeCall(this.specs[0])} | ${describeCall(this.specs[1])}`;
  }
}

/** The provider finishes one slow charge. */
class Release implements Command {
  constructor(readonly pick: number) {}

  check(model: Readonly<GuardModel>): boolean {
    return model.held.length > 0;
  }

  async run(model: GuardModel, real: RealSystem): Promise<void> {
    tally.steps += 1;
    const id = model.held[this.pick % model.held.length];
    if (id === undefined) throw new Error('unreachable: check() requires a held call');
    model.release(id);
    real.ledger.release(id);
    await settle(real, () => differences(model, real, [id]).length === 0);
    assertAgreement(model, real, [id]);
    learnAnswers(model, real, [id]);
    await checkInvariants(model, real);
  }

  toString(): string {
    return `the provider finishes slow charge number ${this.pick} (of those still running)`;
  }
}

/** A command possible in any state: time passing, the wall clock stepping, a reset. */
abstract class AnyTime implements Command {
  check(): boolean {
    return true;
  }

  abstract run(model: GuardModel, real: RealSystem): Promise<void>;
}

class Advance extends AnyTime {
  constructor(readonly ms: number) {
    super();
  }

  async run(model: GuardModel, real: RealSystem): Promise<void> {
    tally.steps += 1;
    model.advance(this.ms);
    await real.advance(this.ms);
    await checkInvariants(model, real);
  }

  override toString(): string {
    return `${this.ms} ms pass`;
  }
}

class StepWallClock extends AnyTime {
  constructor(readonly ms: number) {
    super();
  }

  async run(model: GuardModel, real: RealSystem): Promise<void> {
    if (!real.stepWallClock) throw new Error('this system has no wall clock to step apart');
    tally.steps += 1;
    if ([...model.records.values()].some((r) => r.state === 'inProgress'))
      tally.wallClockStepsWhileRunning += 1;
    model.stepWallClock(this.ms);
    await real.stepWallClock(this.ms);
    await checkInvariants(model, real);
  }

  override toString(): string {
    return `the wall clock steps ${this.ms} ms forward, and no time passes`;
  }
}

class Reset extends AnyTime {
  constructor(readonly caller: number) {
    super();
  }

  async run(model: GuardModel, real: RealSystem): Promise<void> {
    tally.steps += 1;
    tally.resets += 1;
    model.reset();
    await real.reset(this.caller);
    await checkInvariants(model, real);
  }

  override toString(): string {
    return `${CALLERS[this.caller]?.name} calls reset_ledger`;
  }
}

const caller = fc.nat(CALLERS.length - 1);

/**
 * A call drawn from the program's few usual requests: often the same one again (a retry),
 * sometimes the same with its argument keys reordered, sometimes a different amount or tool.
 */
function variantOf(pool: CallSpec[]): fc.Arbitrary<CallSpec> {
  return fc
    .constantFrom(...pool)
    .chain((spec) =>
      fc.oneof(
        { weight: 4, arbitrary: fc.constant(spec) },
        { weight: 1, arbitrary: fc.constant({ ...spec, noteFirst: !spec.noteFirst }) },
        { weight: 1, arbitrary: fc.constantFrom(1, 2, 100).map((amount) => ({ ...spec, amount })) },
        { weight: 1, arbitrary: callSpec.map((other) => ({ ...spec, tool: other.tool })) },
        { weight: 1, arbitrary: callSpec },
      ),
    );
}

/**
 * Random programs. `advances` are the clock steps worth trying (the lease and retention edges);
 * `wallClockSteps`, where the system has a wall clock apart from its leases' clock, the steps of
 * that clock alone.
 */
export function programs(
  advances: number[],
  maxCommands: number,
  wallClockSteps: number[] = [],
): fc.Arbitrary<Iterable<Command>> {
  return fc.array(callSpec, { minLength: 1, maxLength: 4 }).chain((pool) => {
    const send = fc
      .tuple(caller, variantOf(pool), fc.boolean())
      .map(([c, spec, slow]) => new Send(c, spec, slow));
    const together = fc
      .tuple(caller, caller, variantOf(pool), variantOf(pool))
      .map(([a, b, first, second]) => new SendTogether([a, b], [first, second]));
    const release = fc.nat(5).map((pick) => new Release(pick));
    // Listed more than once to be picked more often: calls most, resets least.
    return fc.commands(
      [
        send,
        send,
        send,
        send,
        together,
        release,
        release,
        fc.constantFrom(...advances).map((ms) => new Advance(ms)),
        ...(wallClockSteps.length > 0
          ? [fc.constantFrom(...wallClockSteps).map((ms) => new StepWallClock(ms))]
          : []),
        caller.map((c) => new Reset(c)),
      ],
      { maxCommands, size: 'max' },
    );
  });
}

/**
 * Runs one program, then lets every held charge finish: no call may be left unanswered,
 * and the balance must be the model's to the end.
 */
export async function runProgram(
  settings: ModelSettings,
  start: () => Promise<RealSystem>,
  commands: Iterable<Command>,
): Promise<void> {
  const real = await start();
  const model = new GuardModel(settings);
  tally.programs += 1;
  try {
    await fc.asyncModelRun(() => ({ model, real }), commands);
    while (model.held.length > 0) await new Release(0).run(model, real);
    await Promise.race([Promise.all([...real.calls.values()].map((c) => c.answered)), tick(real.deadlineMs)]);
    const unanswered = [...real.calls.values()].filter((c) => !c.outcome).map((c) => `#${c.id}`);
    if (unanswered.length > 0) throw new Error(`calls never answered: ${unanswered.join(', ')}`);
    assertAgreement(model, real, [...real.calls.keys()]);
    await checkInvariants(model, real);
  } finally {
    tally.leaseExpiredWhileRunning += model.expired.leaseWhileRunning;
    tally.retentionExpired += model.expired.retention;
    await real.close();
  }
}
