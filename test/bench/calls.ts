// --- What the benchmark calls: the demo server on each transport and store, in each era ---
//
// A `Server` is what clients connect to: the real McpServer and guard in this process, a stdio
// server (one process per connection, as a stdio client spawns it), or one stateless HTTP server
// process answering clients of both eras. Each comes in two speeds: a fast one (an instant
// provider), and a slow one whose charge takes SLOW_CHARGE_MS, so an original can be held in
// flight while its duplicates are answered "in progress". Same code; only the provider differs.

import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { Client } from '@modelcontextprotocol/client';
import {
  DEFAULT_MAX_BYTES,
  DEFAULT_MAX_RECORDS,
  IdempotencyErrorType,
  idempotencyErrorOf,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import {
  callTool,
  type KeyedToolCall,
  MODERN_PROTOCOL_VERSION,
  type ToolCall,
} from 'mcp-request-idempotency/client';
import { z } from 'zod';
import { DEFAULT_LOG_FLUSH_MS } from '../../demo/hosting/log.js';
import {
  connectHttpClient,
  connectToServer,
  type Era,
  startHttpInstance,
} from '../../demo/processes/launch.js';
import { MemoryLedger } from '../../ledger.js';
import { connectInProcess } from '../support/in-process.js';
import { checkedCall, type Outcome, timed, type Variant } from './harness.js';

export type TransportName = 'in-process' | 'stdio' | 'http';
export type StoreName = 'memory' | 'sqlite' | 'redis' | 'postgres';

/** The benchmark's tool and its small arguments: the demo's charge, one field. */
export const TOOL = 'charge_guarded';
export const AMOUNT = 1;

/** What the charge tool answers, each with its own text: what a store holds per record. */
export const chargeResult = (balance: number, charged = AMOUNT) => ({
  content: [{ type: 'text', text: `Charged ${charged}. New balance: ${balance}` }],
  structuredContent: { charged, balance },
});

/** One caller stands for all: its quota is the whole store's cap, counted on every claim, never refusing one. */
export const ONE_CALLER_QUOTA = {
  maxRecordsPerScope: DEFAULT_MAX_RECORDS,
  maxBytesPerScope: DEFAULT_MAX_BYTES,
};

/** Outlasts a batch of in-progress calls (checked after each batch); every original ends before the run does. */
export const SLOW_CHARGE_MS = 2_000;

/** Far longer than a loopback request needs to reach the server; short next to SLOW_CHARGE_MS. */
const ORIGINAL_HEAD_START_MS = 25;
/** Doubled from the above while a duplicate overtakes its original (a busy machine); then a wrong answer. */
const MAX_ORIGINAL_HEAD_START_MS = 800;

export interface Endpoint {
  client: Client;
  /** Between rounds: drop the server's collected log lines; over HTTP, take a fresh client. */
  refresh(): Promise<void>;
  close(): Promise<void>;
}

export interface Server {
  connect(era: Era): Promise<Endpoint>;
  close(): Promise<void>;
}

/** A transport and store's two servers: the same code, an instant or a slow provider. */
export interface ServerPair {
  transport: TransportName;
  store: StoreName;
  fast: Server;
  slow: Server;
}

/** Where Redis stores keep their keys: a prefix of this run's own, then one per server. */
export interface RedisTarget {
  url: string;
  prefix: string;
}

export const serverPrefix = (redis: RedisTarget, transport: TransportName, speed: 'fast' | 'slow') =>
  `${redis.prefix}${transport}:${speed}:`;

/** Where Postgres servers keep their tables: a table prefix of this run's own, then one per server. */
export interface PostgresTarget {
  url: string;
  prefix: string;
}

/** A server's `--postgres-prefix`: its store's tables start `<this>idem_`, its ledger's `<this>ledger_`. */
export const postgresPrefix = (postgres: PostgresTarget, transport: TransportName, speed: 'fast' | 'slow') =>
  `${postgres.prefix}${transport.replace(/\W/g, '_')}_${speed}_`;

/** Where SQLite servers keep their files (one each), with which durability, and where the balance lives. */
export interface SqliteTarget {
  dir: string;
  synchronous: 'normal' | 'full';
  /** `sqlite`: each keyed charge commits in its record's transaction; `memory`: the store alone. */
  ledger: 'memory' | 'sqlite';
}

/** The shared stores this run has; a store without one is not measured. */
export interface StoreTargets {
  redis?: RedisTarget;
  postgres?: PostgresTarget;
  sqlite?: SqliteTarget;
}

export async function openServer(
  transport: TransportName,
  store: StoreName,
  speed: 'fast' | 'slow',
  { redis, postgres, sqlite }: StoreTargets = {},
): Promise<Server> {
  const latencyMs = speed === 'slow' ? SLOW_CHARGE_MS : 0;
  // ONE_CALLER_QUOTA, as the server's options.
  const args = [`--charge-latency-ms=${latencyMs}`, `--max-records-per-caller=${DEFAULT_MAX_RECORDS}`];
  args.push(`--max-bytes-per-caller=${DEFAULT_MAX_BYTES}`);
  // The decision log as users run it, batched: the launchers write each line at once for the tests.
  args.push(`--log-flush-ms=${DEFAULT_LOG_FLUSH_MS}`);
  if (store === 'redis' && redis) {
    args.push('--store=redis', `--redis-url=${redis.url}`);
    args.push(`--redis-prefix=${serverPrefix(redis, transport, speed)}`);
  }
  if (store === 'postgres' && postgres) {
    args.push('--store=postgres', `--postgres-url=${postgres.url}`);
    args.push(`--postgres-prefix=${postgresPrefix(postgres, transport, speed)}`);
    // The Postgres ledger holds its balance row locked from a charge's write to its commit, the
    // whole SLOW_CHARGE_MS here, and the slow server's originals overlap (both eras' groups call
    // it): a second original would wait on the first past the store's statement timeout, and
    // fail. An in-progress answer never reaches the ledger, so the slow one charges in process.
    if (speed === 'slow') args.push('--ledger=memory');
  }
  if (store === 'sqlite' && sqlite) {
    const { dir, synchronous, ledger } = sqlite;
    args.push('--store=sqlite', `--sqlite-synchronous=${synchronous}`);
    args.push(`--sqlite-path=${dir}/${transport}-${speed}-${synchronous}-${ledger}.sqlite`);
    // As for Postgres: a slow charge in the record's transaction would hold the file's write lock
    // for the whole SLOW_CHARGE_MS; the in-progress answers never reach the ledger anyway.
    args.push(`--ledger=${speed === 'slow' ? 'memory' : ledger}`);
  }
  const opened: Endpoint[] = [];
  const server = (connect: (era: Era) => Promise<Endpoint>, stop = async () => {}): Server => ({
    connect: async (era) => {
      const endpoint = await connect(era);
      opened.push(endpoint);
      return endpoint;
    },
    close: async () => {
      await Promise.allSettled(opened.map((endpoint) => endpoint.close()));
      await stop();
    },
  });
  if (transport === 'in-process') {
    // Every connection its own McpServer sharing one store and ledger, as over HTTP; room for
    // every keyed call a full run makes in process, throughput phases included.
    const room = { ...ONE_CALLER_QUOTA, maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000 };
    const shared = { store: new MemoryIdempotencyStore(room), ledger: new MemoryLedger(latencyMs) };
    return server(async (era) => {
      const { client, decisions, close } = await connectInProcess({ ...shared, era });
      return { client, refresh: async () => void decisions.splice(0), close };
    });
  }
  if (transport === 'stdio') {
    return server(async (era) => {
      const { client, stderrLines, close } = await connectToServer(args, { era });
      return { client, refresh: async () => void stderrLines.splice(0), close };
    });
  }
  const instance = await startHttpInstance(args);
  return server(async (era) => {
    // The SDK's HTTP client passes one AbortSignal to every fetch, and undici leaves a listener
    // on it per request until the request is collected: over thousands of calls every call gets
    // slower. A fresh client each round keeps that cost as low as a real client's. The old one
    // stays open: a slow original may still be waiting on it.
    const retired: Client[] = [];
    const endpoint: Endpoint = {
      client: await connectHttpClient(instance.url, { era }),
      refresh: async () => {
        instance.stderrLines.splice(0);
        retired.push(endpoint.client);
        endpoint.client = await connectHttpClient(instance.url, { era });
      },
      close: async () => void (await Promise.allSettled([endpoint.client, ...retired].map((c) => c.close()))),
    };
    return endpoint;
  }, instance.stop);
}

// --- The five kinds of tools/call, each answer checked to be what it says ---
//
// A figure must never come from the wrong path, so every timed call's answer is checked
// (untimed) and a wrong one aborts the run: a "replay" that executed, a "conflict" that
// replayed, an "in progress" whose original had already finished.

export type VariantName = 'baseline' | 'first' | 'replay' | 'conflict' | 'slowBaseline' | 'inProgress';

export const VARIANT_LABEL: Record<string, string> = {
  baseline: 'unkeyed (baseline)',
  first: 'keyed first execution',
  replay: 'keyed replay',
  conflict: 'conflict answer',
  slowBaseline: 'unkeyed, slow server (baseline)',
  inProgress: 'in-progress answer',
};

/** A wrong answer: the run stops, because the figure would belong to another path. */
export class WrongAnswerError extends Error {
  override name = 'WrongAnswerError';
}

const Charge = z.object({ structuredContent: z.object({ charged: z.number(), balance: z.number() }) });
const Balance = z.object({ structuredContent: z.object({ balance: z.number() }) });

/** What a call charged, if it answered the charge tool's result. */
export const chargeOf = (outcome: Outcome) =>
  outcome.ok ? Charge.safeParse(outcome.result).data?.structuredContent : undefined;

/** Arguments the charge tool accepts: its `amount`, and whatever else (its schema strips the rest). */
export type ChargeArguments = { amount: number } & Record<string, unknown>;

/** @param args the arguments of every call; a conflict sends them with another amount */
export function makeVariants(
  fast: Endpoint,
  slow: Endpoint,
  where: string,
  args: ChargeArguments = { amount: AMOUNT },
): Record<VariantName, Variant> {
  // The fast server's ledger only grows (other groups may charge it too): every execution must
  // answer a higher balance than the one before, and a replay exactly the stored answer.
  let balance = Number.NEGATIVE_INFINITY;
  const fail = (name: VariantName, what: string, outcome: Outcome): never => {
    const got = outcome.ok ? JSON.stringify(outcome.result) : String(outcome.error);
    throw new WrongAnswerError(`${where}, ${VARIANT_LABEL[name]}: expected ${what}, got ${got}`);
  };
  const executed = (name: VariantName) => (outcome: Outcome) => {
    const charge = chargeOf(outcome);
    if (charge?.charged !== args.amount || !(charge.balance > balance)) {
      return fail(name, `a new charge of ${args.amount} (balance above ${balance})`, outcome);
    }
    balance = charge.balance;
  };
  const refused =
    (name: VariantName, type: IdempotencyErrorType, key: () => string) => (outcome: Outcome) => {
      const sep = outcome.ok ? undefined : idempotencyErrorOf(outcome.error);
      if (sep?.type !== type || sep.idempotencyKey !== key()) fail(name, `the ${type} error`, outcome);
    };
  const charge = (endpoint: Endpoint, call: ToolCall | KeyedToolCall) => callTool(endpoint.client, call);
  const keyed = (idempotencyKey: string, other = args) => ({ name: TOOL, arguments: other, idempotencyKey });

  // First execution: a key never seen before, every call (made before the batch).
  let fresh: string[] = [];
  // Replay and conflict: a key executed once before each batch.
  let stored: { key: string; result?: unknown } = { key: '' };
  const storeOne = async () => {
    const key = randomUUID();
    const outcome = await timed(() => charge(fast, keyed(key)));
    executed('first')(outcome);
    stored = { key, result: outcome.ok ? outcome.result : undefined };
  };
  // In progress: an original on the slow server, still charging while its duplicates arrive.
  // Its answer is awaited only when needed, so it is kept as an outcome: a rejection no one
  // awaits yet would end the process.
  type Original = { key: string; answer: Promise<Outcome>; done: boolean; replayed?: Outcome };
  const originals: Array<Promise<Outcome>> = [];
  let held: Original = { key: '', answer: Promise.resolve({ ok: true, result: undefined }), done: true };
  const holdOriginal = async (headStartMs = ORIGINAL_HEAD_START_MS) => {
    const key = randomUUID();
    const current: Original = { key, answer: timed(() => charge(slow, keyed(key))), done: false };
    held = current;
    originals.push(current.answer.finally(() => Object.assign(current, { done: true })));
    // Over HTTP the original and its duplicate travel on different connections: give the
    // original a head start, or the duplicate could claim the key and become the original.
    await new Promise((resolve) => setTimeout(resolve, headStartMs));
  };
  const inProgressAnswer = refused('inProgress', IdempotencyErrorType.inProgress, () => held.key);
  /**
   * An original that holds its key, proven by a duplicate answered in progress. On a busy
   * machine the original can still reach the guard after its duplicate, which then executes
   * (and the original is the one answered in progress): both right answers, so the pair is left
   * to end and another tried with a longer head start.
   */
  const holdProvenOriginal = async () => {
    for (let headStartMs = ORIGINAL_HEAD_START_MS; ; headStartMs *= 2) {
      await holdOriginal(headStartMs);
      const duplicate = await timed(() => charge(slow, keyed(held.key)));
      const overtaken = chargeOf(duplicate) !== undefined;
      if (!overtaken || headStartMs >= MAX_ORIGINAL_HEAD_START_MS) return inProgressAnswer(duplicate);
    }
  };
  const inProgress: Variant = {
    name: 'inProgress',
    prepare: holdProvenOriginal,
    // An original outlasts a batch on an idle machine (SLOW_CHARGE_MS); on a busy one it can end
    // first. A duplicate then gets its stored answer: right, but not the in-progress path, so
    // the call is made again beside a new original, once that answer proves to be the original's.
    beforeCall: async () => {
      if (!held.replayed) return;
      const original = await held.answer;
      if (!original.ok || !isDeepStrictEqual(held.replayed, original))
        fail(
          'inProgress',
          "the in-progress error, or once its original ended, the original's answer",
          held.replayed,
        );
      await holdProvenOriginal();
    },
    call: () => charge(slow, keyed(held.key)),
    elsewhere: (outcome) => {
      if (chargeOf(outcome) === undefined) return false;
      held.replayed = outcome;
      return true;
    },
    check: inProgressAnswer,
    settle: async () => void (await Promise.all(originals)),
  };
  // The in-progress answer's baseline: an unkeyed call on the slow server itself, while an original
  // runs there too. Both matter on this kind of machine: a server process answers each call more
  // slowly the fewer calls it answers (one that answered one batch in five took 1.2 to 1.5 × as
  // long for the same call), and a stdio server with a call in flight answers every other call
  // more slowly (`get_balance` 350 against 430 µs, the same CPU, more of it waiting in the stdout
  // write), whatever the answer. A charge there takes SLOW_CHARGE_MS, so the call is the ledger's
  // read, `get_balance`: the same dispatch, a tool as trivial as the fast server's charge.
  const slowBaseline: Variant = {
    name: 'slowBaseline',
    prepare: () => holdOriginal(),
    beforeCall: async () => {
      if (held.done) await holdOriginal();
    },
    call: () => charge(slow, { name: 'get_balance', arguments: {} }),
    check: (outcome) => {
      if (!outcome.ok || !Balance.safeParse(outcome.result).success)
        fail('slowBaseline', 'a balance', outcome);
    },
  };
  return {
    // No key: the guard steps aside, the tool runs every time.
    baseline: {
      name: 'baseline',
      call: () => charge(fast, { name: TOOL, arguments: args }),
      check: executed('baseline'),
    },
    first: {
      name: 'first',
      prepare: async (calls) => {
        fresh = Array.from({ length: calls }, () => randomUUID());
      },
      call: (i) => charge(fast, keyed(fresh[i] ?? '')),
      check: executed('first'),
    },
    replay: {
      name: 'replay',
      prepare: storeOne,
      call: () => charge(fast, keyed(stored.key)),
      check: (outcome) => {
        if (!outcome.ok || !isDeepStrictEqual(outcome.result, stored.result))
          fail('replay', 'the stored response', outcome);
      },
    },
    conflict: {
      name: 'conflict',
      prepare: storeOne,
      call: () => charge(fast, keyed(stored.key, { ...args, amount: args.amount + 1 })),
      check: refused('conflict', IdempotencyErrorType.conflict, () => stored.key),
    },
    slowBaseline,
    inProgress,
  };
}

// --- Arguments of a given size, shaped like a real call's ---
//
// The fingerprint's cost depends on the arguments' shape as much as their size (keys to sort,
// strings to escape, numbers to print): large ones are what a tool taking an order would get.

/** Deterministic order-shaped arguments whose JSON is about `bytes` long (never shorter). */
export function orderArgumentsOfSize(bytes: number): ChargeArguments {
  const items: Array<Record<string, unknown>> = [];
  const customer = { id: 'cus_4f9a2c', email: 'ada@example.com', name: 'Ada Lovelace' };
  const order = { amount: 0, currency: 'EUR', customer, items };
  for (let n = 1; JSON.stringify(order).length < bytes; n++) {
    const [quantity, unitPrice] = [(n % 7) + 1, 100 + ((n * 7919) % 10_000)];
    const description = `Line item ${n}: analytical engine parts, “Übergröße” ${'★'.repeat(n % 3)}`;
    const tags = ['hardware', n % 2 === 0 ? 'gift' : 'express'];
    const sku = `SKU-${String(n).padStart(5, '0')}`;
    items.push({ sku, description, quantity, unitPrice, taxRate: 0.2, tags });
    order.amount += quantity * unitPrice;
  }
  return order;
}

export const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value));

// --- What each decision sends to the store, counted on the store's side ---

/** Round trips to the store a decision may take: the SEP's first execution claims, then records; any other answer is its claim alone. */
export const ROUND_TRIP_TARGETS: Record<VariantName, number> = {
  baseline: 0,
  first: 2,
  replay: 1,
  conflict: 1,
  slowBaseline: 0,
  inProgress: 1,
};
const DECISIONS: readonly VariantName[] = ['baseline', 'first', 'replay', 'conflict', 'inProgress'];

/**
 * `calls` calls of each decision through `pair` (2026-07-28), each decision's batch run inside
 * `count`, which answers what the store received meanwhile; every answer is still checked.
 */
export async function countPerDecision<T>(
  pair: ServerPair,
  calls: number,
  count: (decision: VariantName, run: () => Promise<void>) => Promise<T[]>,
): Promise<Array<{ variant: VariantName; calls: number; counted: T[] }>> {
  const era = MODERN_PROTOCOL_VERSION;
  const [fast, slow] = await Promise.all([pair.fast.connect(era), pair.slow.connect(era)]);
  const variants = makeVariants(fast, slow, `${pair.store} round trips over ${pair.transport}`);
  const rows = [];
  try {
    for (const name of DECISIONS) {
      const variant = variants[name];
      await variant.prepare?.(calls);
      const counted = await count(name, async () => {
        for (let i = 0; i < calls; i++) await checkedCall(variant, i);
      });
      await variant.finish?.();
      rows.push({ variant: name, calls, counted });
    }
  } finally {
    await Promise.allSettled(Object.values(variants).map((variant) => variant.settle?.()));
  }
  return rows;
}

/** How often each name occurs per call, as `claim 1.00, UPDATE 1.00`. */
export function perCall(names: readonly string[], calls: number): string {
  const sent = new Map<string, number>();
  for (const name of names) sent.set(name, (sent.get(name) ?? 0) + 1 / calls);
  return [...sent].map(([name, n]) => `${name} ${n.toFixed(2)}`).join(', ');
}
