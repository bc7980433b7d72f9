// --- Model-based test of multi-round-trip calls under an idempotency key ---
//
// Random programs of opening rounds, continuations (yes, no, an unusable answer, a forged
// `requestState`, or the other key's, which binds its own key alone), repeats, lost answers and two continuations at once, on two keys whose calls
// may differ in their arguments, run against the real guard (McpServer + guard, in process, each
// request its own fetch) and a small model of the project's rules for continuations
// (packages/idempotency/core/guard.ts, `settlementOf`). After every step the answer and the guard's decision are
// the model's, and the ledger holds exactly the refunds the model allowed: at most one completing
// round per key, a repeat of the opening round never asks anew, replays equal the final answer,
// and a refused continuation changes nothing.
//
// SEP3182_LONG=1 runs ten times as many programs.

import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { Client } from '@modelcontextprotocol/client';
import fc from 'fast-check';
import {
  type DecisionEvent,
  IdempotencyErrorType,
  type IdempotencyStore,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { PostgresIdempotencyStore } from 'mcp-request-idempotency/postgres';
import {
  closeRedis,
  connectRedis,
  type RedisClient,
  RedisIdempotencyStore,
} from 'mcp-request-idempotency/redis';
import { SqliteIdempotencyStore } from 'mcp-request-idempotency/sqlite';
import { afterAll, describe, it } from 'vitest';
import { POSTGRES_STATEMENT_TIMEOUT_MS } from '../../demo/processes/bounds.js';
import {
  POSTGRES_SKIP_REASON,
  startPostgres,
  uniqueTablePrefix,
} from '../../demo/processes/postgres-server.js';
import { REDIS_SKIP_REASON, startRedis, uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import { MemoryLedger } from '../../ledger.js';
import { connectInProcess } from '../support/in-process.js';
import { longRunScaled } from '../support/long-runs.js';
import { type Answer, round } from '../support/rounds.js';

const MEMORY_RUNS = longRunScaled(300);
const REDIS_RUNS = longRunScaled(50);
const POSTGRES_RUNS = longRunScaled(50);
const SQLITE_RUNS = longRunScaled(50);
const MAX_COMMANDS = 25;
/** A refund's own time; two continuations sent together are held apart by `HeldLedger` instead. */
const REFUND_LATENCY_MS = 20;

/**
 * A ledger whose refunds wait, while `hold` is set, until it is let go: a continuation sent with
 * another then finds it still running, however slowly the machine serves the second one.
 */
class HeldLedger extends MemoryLedger {
  hold: Promise<void> | undefined;
  override async refund(amount: number): Promise<number> {
    await this.hold;
    return super.refund(amount);
  }
}

const ARGUMENTS: ReadonlyArray<{ orderId: string; amount: number }> = [
  { orderId: 'A-1001', amount: 4200 },
  { orderId: 'A-1001', amount: 1 },
];

function amountOf(args: number): number {
  return ARGUMENTS[args]?.amount ?? Number.NaN;
}
const ANSWERS = {
  yes: { confirm: { action: 'accept', content: { confirm: true } } },
  no: { confirm: { action: 'decline' } },
  unusable: { confirm: { action: 'accept', content: { confirm: 'maybe' } } },
} as const;
type AnswerKind = keyof typeof ANSWERS;
const FORGED_STATE = 'v1.eyJwIjp7fX0.forged';

/** The model of one key: what holds it, and what the test has seen of it. */
interface KeyModel {
  state: 'none' | 'awaiting' | 'completed';
  /** Which arguments the key is held with. */
  args: number;
  /** The stored answer (the question, or the final one), once the test has seen it. */
  stored?: Answer;
  /** The latest `requestState` the test saw for the key. */
  requestState?: string;
  refunds: number;
}

interface Model {
  keys: KeyModel[];
  balance: number;
}

interface Real {
  client: Client;
  decisions: DecisionEvent[];
  ledger: HeldLedger;
  balance(): Promise<number>;
}

/** What the model expects of one round: its decision, and its answer when it can say it. */
interface Expected {
  decision: DecisionEvent['decision'];
  answer?: Answer;
  conflict?: true;
  refused?: true;
}

const KEY_NAMES = [randomUUID(), randomUUID()];

function paramsOf(key: number, args: number, continuation?: { answer: AnswerKind; state: string }) {
  const params = { name: 'refund_order', arguments: { ...ARGUMENTS[args] }, idempotencyKey: KEY_NAMES[key] };
  return continuation
    ? { ...params, inputResponses: ANSWERS[continuation.answer], requestState: continuation.state }
    : params;
}

function resultOf(answer: Answer | undefined): Record<string, unknown> | undefined {
  return answer && 'result' in answer ? answer.result : undefined;
}

function errorOf(answer: Answer | undefined): unknown {
  return answer && 'error' in answer ? answer.error : undefined;
}

/** Checks one answer and its decision against the model's expectation; returns what is wrong. */
function mismatch(expected: Expected, answer: Answer, decision: string | undefined): string | undefined {
  if (decision !== expected.decision) return `decision ${decision}, expected ${expected.decision}`;
  if (expected.conflict && idempotencyErrorOf(errorOf(answer))?.type !== IdempotencyErrorType.conflict) {
    return `expected a conflict, got ${JSON.stringify(answer)}`;
  }
  if (
    expected.refused &&
    Reflect.get(Object(Reflect.get(Object(errorOf(answer)), 'data')), 'reason') !== 'invalid_request_state'
  ) {
    return `expected invalid_request_state, got ${JSON.stringify(answer)}`;
  }
  if (expected.answer && !isDeepStrictEqual(answer, expected.answer)) {
    return `expected ${JSON.stringify(expected.answer)}, got ${JSON.stringify(answer)}`;
  }
  return undefined;
}

/**
 * How a continuation is sent: the answer, and whether its `requestState` is forged, or stolen (the
 * other key's, as a client that changed its key between rounds, or a thief, would send it).
 */
interface ContinuationKind {
  answer: AnswerKind;
  forged: boolean;
  stolen: boolean;
}

/** The model's rules for one round, and what the round does to the key. */
function predict(
  key: KeyModel,
  args: number,
  continuation: ContinuationKind | undefined,
): { expected: Expected; learn(answer: Answer): void } {
  const keep = () => {};
  if (key.state !== 'none' && key.args !== args)
    return { expected: { decision: 'conflict', conflict: true }, learn: keep };
  if (key.state === 'completed')
    return { expected: { decision: 'replayed', answer: key.stored }, learn: learnStored(key) };
  // Refused before the tool runs, the key as it was: a state the SDK cannot verify, one minted under
  // the other key, and any continuation under a key whose opening round never asked.
  if (continuation?.forged || continuation?.stolen || (key.state === 'none' && continuation))
    return { expected: { decision: 'continuationRefused', refused: true }, learn: keep };
  if (key.state === 'awaiting' && !continuation) {
    return { expected: { decision: 'replayed', answer: key.stored }, learn: learnStored(key) };
  }
  // The tool runs: an opening round asks; a continuation refunds, declines or asks again.
  const answered = continuation?.answer;
  if (answered === 'yes' || answered === 'no') {
    return {
      expected: { decision: 'executed' },
      learn: (answer) => {
        key.state = 'completed';
        key.stored = answer;
        if (answered === 'yes') key.refunds += 1;
      },
    };
  }
  return {
    expected: { decision: 'awaitingInput' },
    learn: (answer) => {
      key.state = 'awaiting';
      key.args = args;
      key.stored = answer;
      const state = resultOf(answer)?.requestState;
      if (typeof state === 'string') key.requestState = state;
    },
  };
}

/** A replayed answer the test had not seen (its first answer was lost) is learned from the replay. */
function learnStored(key: KeyModel): (answer: Answer) => void {
  return (answer) => {
    key.stored ??= answer;
    const state = resultOf(answer)?.requestState;
    if (typeof state === 'string') key.requestState ??= state;
  };
}

function refundOf(model: Model, key: KeyModel, args: number, answer: AnswerKind | undefined): void {
  if (key.state === 'completed' && answer === 'yes') model.balance -= amountOf(args);
}

// --- Commands ---

type Command = fc.AsyncCommand<Model, Real>;

class Send implements Command {
  constructor(
    readonly key: number,
    readonly args: number,
    readonly continuation: ContinuationKind | undefined,
    /** The answer is lost on its way back: the test does not look at it. */
    readonly lost: boolean,
  ) {}

  check(model: Readonly<Model>): boolean {
    // A real continuation echoes a requestState the client was given, for this key or the other.
    if (!this.continuation || this.continuation.forged) return true;
    return model.keys[this.stateKey()]?.requestState !== undefined;
  }

  /** Whose requestState the continuation carries: its own key's, or the other's. */
  private stateKey(): number {
    return this.continuation?.stolen ? (this.key + 1) % KEY_NAMES.length : this.key;
  }

  async run(model: Model, real: Real): Promise<void> {
    const key = model.keys[this.key] as KeyModel;
    const before = { ...key };
    const { expected, learn } = predict(key, this.args, this.continuation);
    if (this.lost) delete expected.answer;
    const state = this.continuation?.forged ? FORGED_STATE : model.keys[this.stateKey()]?.requestState;
    const params = paramsOf(
      this.key,
      this.args,
      this.continuation && { answer: this.continuation.answer, state: state ?? FORGED_STATE },
    );
    const seen = real.decisions.length;
    const answer = await round(real.client, params);
    const decisions = real.decisions.slice(seen).map((d) => d.decision);
    const wrong = mismatch(expected, answer, decisions.length === 1 ? decisions[0] : decisions.join('+'));
    if (wrong) throw new Error(`${this.toString()}: ${wrong}`);
    learn(answer);
    if (this.lost && (expected.decision === 'executed' || expected.decision === 'awaitingInput')) {
      // The key moved on, but the client never saw how: it learns the answer from a replay, and
      // holds only the requestState it had before.
      key.stored = undefined;
      key.requestState = before.requestState;
    }
    refundOf(model, key, this.args, expected.decision === 'executed' ? this.continuation?.answer : undefined);
    await agreeOnBalance(model, real);
  }

  toString(): string {
    const what = this.continuation
      ? `continue(${this.continuation.forged ? 'forged' : this.continuation.answer}${this.continuation.stolen ? ', stolen' : ''})`
      : 'open';
    return `${what} key${this.key} args${this.args}${this.lost ? ' (answer lost)' : ''}`;
  }
}

/** Two continuations with a yes, sent at once while the key awaits input: one runs, one is told in progress. */
class SendTogether implements Command {
  constructor(readonly key: number) {}

  check(model: Readonly<Model>): boolean {
    const key = model.keys[this.key];
    return key?.state === 'awaiting' && key.requestState !== undefined;
  }

  async run(model: Model, real: Real): Promise<void> {
    const key = model.keys[this.key] as KeyModel;
    const params = paramsOf(this.key, key.args, { answer: 'yes', state: key.requestState as string });
    const seen = real.decisions.length;
    let letGo = () => {};
    real.ledger.hold = new Promise((resolve) => {
      letGo = resolve;
    });
    const rounds = Promise.all([round(real.client, params), round(real.client, params)]);
    // The refund is held until the other continuation has been decided (or 10 s have passed).
    for (const started = performance.now(); performance.now() - started < 10_000; ) {
      if (real.decisions.length > seen) break;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    real.ledger.hold = undefined;
    letGo();
    const answers = await rounds;
    const decisions = real.decisions
      .slice(seen)
      .map((d) => d.decision)
      .sort();
    if (!isDeepStrictEqual(decisions, ['executed', 'inProgress'])) {
      throw new Error(`${this.toString()}: decisions ${decisions.join(', ')}`);
    }
    const told = answers.filter(
      (answer) => idempotencyErrorOf(errorOf(answer))?.type === IdempotencyErrorType.inProgress,
    );
    if (told.length !== 1) throw new Error(`${this.toString()}: ${JSON.stringify(answers)}`);
    key.state = 'completed';
    key.stored = answers.find((answer) => !told.includes(answer));
    key.refunds += 1;
    model.balance -= amountOf(key.args);
    await agreeOnBalance(model, real);
  }

  toString(): string {
    return `continue(yes) ×2 at once key${this.key}`;
  }
}

async function agreeOnBalance(model: Model, real: Real): Promise<void> {
  const balance = await real.balance();
  if (balance !== model.balance) throw new Error(`balance ${balance}, the model says ${model.balance}`);
  for (const key of model.keys) if (key.refunds > 1) throw new Error('a key refunded twice');
}

function programs(): fc.Arbitrary<Iterable<Command>> {
  const key = fc.nat(KEY_NAMES.length - 1);
  const args = fc.nat(ARGUMENTS.length - 1);
  const sometimes = fc.constantFrom(false, false, false, true);
  const continuation = fc.record({
    answer: fc.constantFrom<AnswerKind>('yes', 'yes', 'no', 'unusable'),
    forged: sometimes,
    stolen: sometimes,
  });
  return fc.commands(
    [
      fc.tuple(key, args, sometimes).map(([k, a, l]) => new Send(k, a, undefined, l)),
      fc.tuple(key, args, continuation, sometimes).map(([k, a, c, l]) => new Send(k, a, c, l)),
      key.map((k) => new SendTogether(k)),
    ],
    { maxCommands: MAX_COMMANDS },
  );
}

/** Counted so the report can say how many programs and steps ran. */
const ran = { programs: 0, steps: 0 };

async function runProgram(store: IdempotencyStore, commands: Iterable<Command>): Promise<void> {
  const ledger = new HeldLedger(REFUND_LATENCY_MS);
  // The client declares form elicitation, as one that can answer must; the rounds are sent by hand.
  const askUser = () => Promise.reject(new Error('the rounds here are sent by hand'));
  const connection = await connectInProcess({ store, ledger, entry: 'http', askUser });
  ran.programs += 1;
  try {
    const model: Model = {
      keys: KEY_NAMES.map(() => ({ state: 'none', args: 0, refunds: 0 })),
      balance: 0,
    };
    const real: Real = {
      client: connection.client,
      decisions: connection.decisions,
      ledger,
      balance: () => ledger.balance(),
    };
    const counted = [...commands];
    ran.steps += counted.length;
    await fc.asyncModelRun(() => ({ model, real }), counted);
  } finally {
    await connection.close();
  }
}

describe('continuations under a key agree with the model of the rules', () => {
  it(`with the memory store, over ${MEMORY_RUNS} random programs of up to ${MAX_COMMANDS} steps`, async () => {
    await fc.assert(
      fc.asyncProperty(programs(), (commands) => runProgram(new MemoryIdempotencyStore(), commands)),
      { numRuns: MEMORY_RUNS },
    );
  }, 300_000);

  let client: RedisClient | undefined;
  afterAll(async () => {
    if (client) await closeRedis(client);
    await redis?.stop();
    process.stdout.write(`continuation model: ${ran.programs} programs, ${ran.steps} steps\n`);
  });
  let redis: Awaited<ReturnType<typeof startRedis>>;

  it(`with the Redis store, over ${REDIS_RUNS} random programs`, async (context) => {
    redis = await startRedis();
    if (!redis) return context.skip(REDIS_SKIP_REASON);
    const connected = await connectRedis(redis.url);
    client = connected;
    await fc.assert(
      fc.asyncProperty(programs(), (commands) =>
        runProgram(
          new RedisIdempotencyStore(connected, { keyPrefix: uniqueKeyPrefix('mrtr-model') }),
          commands,
        ),
      ),
      { numRuns: REDIS_RUNS },
    );
  }, 300_000);
});

/**
 * `runs` random programs on one store (a Postgres table, a SQLite file): each starts from no
 * records, as each Redis one does from its own prefix.
 */
async function runProgramsOnOneStore(store: IdempotencyStore, runs: number): Promise<void> {
  await fc.assert(
    fc.asyncProperty(programs(), async (commands) => {
      await store.clear();
      await runProgram(store, commands);
    }),
    { numRuns: runs },
  );
}

describe('continuations under a key agree with the model of the rules, in Postgres', () => {
  let postgres: Awaited<ReturnType<typeof startPostgres>>;
  let postgresStore: PostgresIdempotencyStore | undefined;
  const postgresPrefix = uniqueTablePrefix('mrtr_model');
  afterAll(async () => {
    await postgresStore?.close();
    await postgres?.drop(postgresPrefix);
    await postgres?.stop();
  });

  it(`with the Postgres store, over ${POSTGRES_RUNS} random programs`, async (context) => {
    postgres = await startPostgres();
    if (!postgres) return context.skip(POSTGRES_SKIP_REASON);
    const store = await PostgresIdempotencyStore.connect(postgres.url, {
      tablePrefix: postgresPrefix,
      statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
    });
    postgresStore = store;
    await runProgramsOnOneStore(store, POSTGRES_RUNS);
  }, 300_000);
});

describe('continuations under a key agree with the model of the rules, in a SQLite file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sep3182-sqlite-mrtr-model-'));
  let sqliteStore: SqliteIdempotencyStore | undefined;
  afterAll(async () => {
    await sqliteStore?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it(`with the SQLite store, over ${SQLITE_RUNS} random programs`, async () => {
    const store = await SqliteIdempotencyStore.open(join(dir, 'records.sqlite'));
    sqliteStore = store;
    await runProgramsOnOneStore(store, SQLITE_RUNS);
  }, 300_000);
});
