// --- What the guard costs beside other idempotency libraries: `npm run bench -- peers` ---
//
// In a process of its own, one per store (`memory`, or `redis` at the URL in PEERS_REDIS_URL_ENV):
//   node --import tsx test/bench/peers/measure.ts <0 memory | 1 redis> <rounds> <calls per batch>
// One function, a charge that answers what the demo's charge answers, called bare and through
// each library, interleaved round by round (harness.ts): this project's guard, Powertools for
// AWS Lambda's idempotency utility, and @node-idempotency/core, each configured as its README
// shows, each with a retention of one hour and its arguments checked against the key where it
// can. A first execution takes a fresh key every call; a replay, a key executed before its
// batch. A variant's cost is its median less the bare function's, measured in the same rounds.
// On Redis, each library's commands per decision are counted as Redis receives them (MONITOR).
// The libraries are installed apart (`npm ci --prefix test/bench/peers`): the root install
// never carries them.

import { randomUUID } from 'node:crypto';
import {
  IdempotencyConfig,
  IdempotencyItemAlreadyExistsError,
  makeIdempotent,
} from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { BasePersistenceLayer, type IdempotencyRecord } from '@aws-lambda-powertools/idempotency/persistence';
import { Idempotency } from '@node-idempotency/core';
import { MemoryStorageAdapter } from '@node-idempotency/storage-adapter-memory';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import { createClient, type RedisClientType } from '@redis/client';
import {
  createToolCallGuard,
  DEFAULT_LEASE_MS,
  type IdempotencyStore,
  MemoryIdempotencyStore,
} from 'mcp-request-idempotency';
import { closeRedis, connectRedis, RedisIdempotencyStore } from 'mcp-request-idempotency/redis';
import { commandsDuring } from '../../../demo/processes/redis-commands.js';
import { AMOUNT, chargeResult, TOOL, WrongAnswerError } from '../calls.js';
import {
  answerIfMain,
  interleave,
  type Outcome,
  PEERS_REDIS_URL_ENV,
  type Report,
  table,
  timed,
  us,
  type Variant,
} from '../harness.js';

/** How long every library keeps a record: the same for all, and long enough that none expires in a run. */
const RETENTION_MS = 3_600_000;
/** Room for every record of a run in one caller's quota, so no claim is refused. */
const ROOM = { maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000, maxBytesPerScope: 2 ** 40 };
/** Calls per decision whose commands Redis receives are counted. */
const COUNTED_CALLS = 50;

interface Call {
  idempotencyKey: string;
  arguments: { amount: number };
}

/** The function every library makes idempotent; it counts its executions, as a ledger would. */
let executions = 0;
async function charge(args: Call['arguments']) {
  executions++;
  return chargeResult(executions, args.amount);
}

/** A library in front of `charge`: the call's answer, or what it threw. */
interface Library {
  name: string;
  /** What its keys in Redis contain, for counting its commands. */
  keyText: string;
  call(call: Call): Promise<unknown>;
  close(): Promise<void>;
}

function guardOn(store: IdempotencyStore, keyText: string): Library {
  const guard = createToolCallGuard({
    store,
    retentionMs: RETENTION_MS,
    providerKeyRetentionMs: RETENTION_MS,
  });
  return {
    name: 'this guard',
    keyText,
    call: ({ idempotencyKey, arguments: args }) =>
      guard({ name: TOOL, arguments: args, idempotencyKey }, {}, () => charge(args)),
    close: async () => {
      if (store instanceof RedisIdempotencyStore) await store.close();
    },
  };
}

/** As @node-idempotency's own NestJS and Express adapters drive it: onRequest, the handler, onResponse. */
function nodeIdempotency(storage: ConstructorParameters<typeof Idempotency>[0], keyText: string): Library {
  const idempotency = new Idempotency(storage, { cacheTTLMS: RETENTION_MS, cacheKeyPrefix: keyText });
  return {
    name: '@node-idempotency/core 1.0.11',
    keyText,
    async call({ idempotencyKey, arguments: args }) {
      const request = {
        headers: { 'idempotency-key': idempotencyKey },
        path: `/${TOOL}`,
        method: 'POST',
        body: args,
      };
      const stored = await idempotency.onRequest<unknown, unknown>(request);
      if (stored) {
        if (stored.error) throw stored.error;
        return stored.body;
      }
      try {
        const body = await charge(args);
        await idempotency.onResponse(request, { body });
        return body;
      } catch (error) {
        await idempotency.onResponse(request, { error });
        throw error;
      }
    },
    close: async () => {},
  };
}

/**
 * Powertools ships DynamoDB and cache (Redis, Valkey) layers; a memory one is its four methods on
 * its base layer, kept as its DynamoDB layer keeps records: an update leaves the payload's hash.
 */
class MemoryPersistenceLayer extends BasePersistenceLayer {
  private readonly records = new Map<string, IdempotencyRecord>();

  protected async _getRecord(idempotencyKey: string): Promise<IdempotencyRecord> {
    const record = this.records.get(idempotencyKey);
    if (!record) throw new Error(`no record for ${idempotencyKey}`);
    return record;
  }

  protected async _putRecord(record: IdempotencyRecord): Promise<void> {
    const existing = this.records.get(record.idempotencyKey);
    if (existing && !existing.isExpired()) {
      throw new IdempotencyItemAlreadyExistsError(`a record exists for ${record.idempotencyKey}`, existing);
    }
    this.records.set(record.idempotencyKey, record);
  }

  protected async _updateRecord(record: IdempotencyRecord): Promise<void> {
    const existing = this.records.get(record.idempotencyKey);
    record.payloadHash ??= existing?.payloadHash;
    this.records.set(record.idempotencyKey, record);
  }

  protected async _deleteRecord(record: IdempotencyRecord): Promise<void> {
    this.records.delete(record.idempotencyKey);
  }
}

function powertools(persistenceStore: BasePersistenceLayer, validation: boolean, keyText: string): Library {
  const config = new IdempotencyConfig({
    eventKeyJmesPath: 'idempotencyKey',
    expiresAfterSeconds: RETENTION_MS / 1000,
    // On Redis its cache layer writes the completed record without the payload's hash, so every
    // replay with validation on throws IdempotencyValidationError: measured with it off there.
    ...(validation && { payloadValidationJmesPath: 'arguments' }),
  });
  // Outside a handler Powertools reads the time left from a Lambda context registered on its
  // config, and warns on every call without one: here a lease as long as this guard's default.
  const context = { getRemainingTimeInMillis: () => DEFAULT_LEASE_MS };
  config.registerLambdaContext(context as Parameters<IdempotencyConfig['registerLambdaContext']>[0]);
  const idempotent = makeIdempotent((call: Call) => charge(call.arguments), {
    persistenceStore,
    config,
    keyPrefix: keyText,
  });
  return {
    name: `Powertools idempotency 2.35.0${validation ? '' : ', validation off'}`,
    keyText,
    call: (call) => idempotent(call),
    close: async () => {},
  };
}

async function librariesOn(
  store: 'memory' | 'redis',
): Promise<{ libraries: Library[]; admin?: Awaited<ReturnType<typeof connectRedis>> }> {
  const run = randomUUID().slice(0, 8);
  if (store === 'memory') {
    return {
      libraries: [
        guardOn(new MemoryIdempotencyStore(ROOM), 'guard'),
        nodeIdempotency(new MemoryStorageAdapter(), 'node-idempotency'),
        powertools(new MemoryPersistenceLayer(), true, 'powertools'),
      ],
    };
  }
  const url = process.env[PEERS_REDIS_URL_ENV];
  if (!url) throw new Error(`set ${PEERS_REDIS_URL_ENV} to measure on Redis`);
  const guardStore = await RedisIdempotencyStore.connect(url, { ...ROOM, keyPrefix: `peers-${run}:guard:` });
  const adapter = new RedisStorageAdapter({ url });
  await adapter.connect();
  // Powertools' own example: a node-redis client the application connects and hands over.
  const client: RedisClientType = createClient({ url });
  await client.connect();
  const admin = await connectRedis(url);
  const nodeLibrary = nodeIdempotency(adapter, `peers-${run}:node-idempotency`);
  const powertoolsLibrary = powertools(
    new CachePersistenceLayer({ client }),
    false,
    `peers-${run}:powertools`,
  );
  return {
    admin,
    libraries: [
      guardOn(guardStore, `peers-${run}:guard:`),
      { ...nodeLibrary, close: () => adapter.disconnect() },
      { ...powertoolsLibrary, close: () => client.close() },
    ],
  };
}

const call = (): Call => ({ idempotencyKey: randomUUID(), arguments: { amount: AMOUNT } });

/** Checks an answer: a charge's result, from a fresh execution or from the record of `executed`. */
function expectCharge(outcome: Outcome, name: string): void {
  const text = JSON.stringify(outcome.ok ? outcome.result : String(outcome.error));
  if (!outcome.ok || !text.includes(`Charged ${AMOUNT}.`)) throw new WrongAnswerError(`${name}: ${text}`);
}

const BARE = 'the function alone';

/** A first execution a call: a fresh key, and the function must run. */
function firstExecution(name: string, run: (call: Call) => Promise<unknown>): Variant {
  let before = 0;
  return {
    name,
    call: () => {
      before = executions;
      return run(call());
    },
    check(outcome) {
      expectCharge(outcome, name);
      if (executions !== before + 1) throw new WrongAnswerError(`${name}: the function did not run once`);
    },
  };
}

/** A replay a call: a key executed before the batch, and the function must not run. */
function replay(name: string, run: (call: Call) => Promise<unknown>): Variant {
  let executed = call();
  let before = 0;
  return {
    name,
    async prepare() {
      executed = call();
      await run(executed);
    },
    call: () => {
      before = executions;
      return run(executed);
    },
    check(outcome) {
      expectCharge(outcome, name);
      if (name !== BARE && executions !== before) throw new WrongAnswerError(`${name}: a replay executed`);
    },
  };
}

async function main([storeIndex = 0, rounds = 20, batchCalls = 300]: number[]): Promise<Report> {
  const store = storeIndex === 1 ? 'redis' : 'memory';
  const { libraries, admin } = await librariesOn(store);
  const bare = (c: Call) => charge(c.arguments);
  try {
    const groups = [firstExecution, replay].map((decision) => ({
      meta: { store, decision: decision === firstExecution ? 'first execution' : 'replay' },
      batchCalls,
      variants: [decision(BARE, bare), ...libraries.map((l) => decision(l.name, l.call))],
    }));
    const rows = await interleave(groups, { rounds, warmupRounds: 2 }, (line) =>
      process.stderr.write(`  ${line}\n`),
    );
    const roundTrips = new Map<string, number>();
    if (admin) {
      for (const library of libraries) {
        for (const decision of [firstExecution, replay]) {
          const variant = decision(library.name, library.call);
          await variant.prepare?.(COUNTED_CALLS);
          const seen = await commandsDuring([admin], library.keyText, async () => {
            for (let i = 0; i < COUNTED_CALLS; i++) variant.check(await timed(() => variant.call(i)));
          });
          roundTrips.set(
            `${library.name}|${decision === firstExecution}`,
            seen.commands.length / COUNTED_CALLS,
          );
        }
      }
    }
    const baseline = new Map(
      rows.filter((row) => row.variant === BARE).map((row) => [row.decision, row.medianUs]),
    );
    const figures = rows.map((row) => {
      const costUs = row.medianUs - (baseline.get(row.decision) ?? Number.NaN);
      const trips = roundTrips.get(`${row.variant}|${row.decision === 'first execution'}`);
      return { ...row, costUs, ...(trips !== undefined && { roundTrips: trips }) };
    });
    return {
      title: `Beside other idempotency libraries: ${store === 'redis' ? 'Redis' : 'memory'}`,
      how:
        `${rounds} rounds of ${batchCalls} calls a variant, interleaved; cost = median less the function alone's, ` +
        `in the same rounds${admin ? `; commands per decision counted on the Redis side (MONITOR, ${COUNTED_CALLS} calls)` : ''}.`,
      table: table(
        'decision | library | median µs | cost over the function µs | p99 µs | round trips',
        figures.map((f) => [
          f.decision,
          f.variant,
          us(f.medianUs),
          f.variant === BARE ? '' : `+${us(f.costUs)}`,
          us(f.p99Us),
          f.roundTrips === undefined ? '' : f.roundTrips.toFixed(2),
        ]),
      ),
      checks: [],
      figures,
    };
  } finally {
    for (const library of libraries) await library.close();
    if (admin) await closeRedis(admin);
  }
}

await answerIfMain(import.meta.url, main);
