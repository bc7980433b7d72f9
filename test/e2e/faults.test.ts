// Faults: parts of the system dying while keyed calls are under way. Redis killed and
// restarted during a stream of calls; a server instance killed mid-charge; a client that hangs
// up mid-call. In each: no charge without a record, no key executed twice (beyond the
// at-least-once window the README states for a crashed instance), nothing lost, and recovery
// without anyone's help.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  idempotencyErrorOf,
  LOCAL_SCOPE,
} from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import {
  closeRedis,
  connectRedis,
  type RedisClient,
  RedisIdempotencyStore,
  redisKeysOf,
} from 'mcp-request-idempotency/redis';
import { describe, expect, it } from 'vitest';
import { exitedAndRead, START_TIMEOUT_MS, sleep, waitUntil } from '../../demo/processes/bounds.js';
import { uniqueKeyPrefix } from '../../demo/processes/redis-server.js';
import type { Ledger } from '../../ledger.js';
import { redisForFile } from '../support/backends.js';
import { postRaw } from '../support/hostile.js';
import { type HttpInstance, startHttpInstance } from '../support/http.js';
import { connectInProcess, type InProcessConnection } from '../support/in-process.js';
import { streamCharges } from '../support/keyed-stream.js';
import { RawStdioPeer } from '../support/raw-stdio.js';
import { untilAnswered } from '../support/retry.js';
import { neverRenewing } from '../support/store-fixtures.js';

const redis = await redisForFile(
  'Fault tests skipped: they kill Redis, so need a private redis-server, not REDIS_URL',
);
const canKillRedis = redis?.owned === true;

function server() {
  if (!redis) throw new Error('unreachable: skipped without Redis');
  return redis;
}

/** A key prefix of the test's own, and the arguments that start a server on it in this file's Redis. */
function onRedis(name: string): { prefix: string; args: string[] } {
  const prefix = uniqueKeyPrefix(name);
  return { prefix, args: ['--store', 'redis', '--redis-url', server().url, '--redis-prefix', prefix] };
}

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * `printf '%s\n' …lines | tsx server.ts …args`: every line written at once, then the input
 * ends. Resolves with what the server wrote to stdout, its decisions and its exit code (bounded: 15 s).
 */
async function pipeThrough(
  args: string[],
  lines: string[],
): Promise<{ stdout: string[]; decisions: unknown[]; code: number | null }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'server.ts'), ...args], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const stdout: string[] = [];
  const decisions: unknown[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => stdout.push(line));
  createInterface({ input: child.stderr }).on('line', (line) => {
    const entry: unknown = JSON.parse(line);
    if (Reflect.get(Object(entry), 'event') === 'idempotency')
      decisions.push(Reflect.get(Object(entry), 'decision'));
  });
  const exited = exitedAndRead(child);
  const timer = setTimeout(() => child.kill('SIGKILL'), START_TIMEOUT_MS);
  // A server that exits before reading it all fails the write with EPIPE: its exit code and
  // output are what the test reads, and the error, unheard, would fail the whole run.
  child.stdin.on('error', () => {});
  child.stdin.end(lines.map((line) => `${line}\n`).join(''));
  const code = await exited;
  clearTimeout(timer);
  return { stdout, decisions, code };
}

const HANDSHAKE = [
  '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sh","version":"0"}}}',
  '{"jsonrpc":"2.0","method":"notifications/initialized"}',
];

/** The provider, outside Redis: it survives Redis dying, and remembers every charge it made. */
class ProviderLedger implements Ledger {
  readonly commits: number[] = [];
  private total = 0;
  constructor(private readonly latencyMs: number) {}
  async charge(amount: number): Promise<number> {
    await sleep(this.latencyMs);
    this.commits.push(amount);
    this.total += amount;
    return this.total;
  }
  refund(amount: number): Promise<number> {
    return this.charge(-amount);
  }
  async balance(): Promise<number> {
    return this.total;
  }
  async reset(): Promise<void> {
    this.total = 0;
  }
}

/** What a keyed call over HTTP was answered, from the raw JSON-RPC body. */
interface WireAnswer {
  at: number;
  status: number;
  text: string;
  body: Record<string, unknown>;
  type?: unknown;
}

function field(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}

async function postToolCall(url: URL, params: Record<string, unknown>): Promise<WireAnswer> {
  const { status, text } = await postRaw(
    url,
    JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
  );
  const body: unknown = JSON.parse(text);
  return {
    at: performance.now(),
    status,
    text,
    body: Object.fromEntries(Object.entries(body ?? {})),
    type: field(field(field(body, 'error'), 'data'), 'type'),
  };
}

/**
 * Retries the call every `everyMs` while it is answered in progress, for `withinMs` at the most:
 * every answer, the last the one that was not in progress.
 */
async function retryWhileInProgress(
  url: URL,
  params: Record<string, unknown>,
  withinMs: number,
  everyMs: number,
): Promise<WireAnswer[]> {
  const answers: WireAnswer[] = [];
  await waitUntil(
    async () => {
      const answer = await postToolCall(url, params);
      answers.push(answer);
      return answer.type !== IdempotencyErrorType.inProgress;
    },
    withinMs,
    everyMs,
  );
  return answers;
}

/** The answer "the store is unavailable: nothing happened, retry later with the same key". */
const storeUnavailable = (answer: WireAnswer) => answer.type === IdempotencyErrorType.storeUnavailable;

const textOf = (answer: WireAnswer) => JSON.stringify(field(answer.body.result, 'content'));

/**
 * The decisions `instance` logged for `key`, once they include `last`: the log travels on
 * stderr, which can arrive a moment after the HTTP answer.
 */
async function decisionsFor(instance: HttpInstance, key: string, last: string): Promise<unknown[]> {
  const mine = async () =>
    (await instance.decisions()).filter((d) => d.idempotencyKey === key).map((d) => d.decision);
  await waitUntil(async () => (await mine()).includes(last), 2_000).catch(() => {});
  return mine();
}

// --- Redis dies under a stream of keyed calls ---

describe.skipIf(!canKillRedis)('Redis killed and restarted during a stream of keyed calls', () => {
  /** The instances' lease: Redis comes back empty, and new keys wait one lease (see the Redis store). */
  const RESTART_LEASE_MS = 1_000;

  it('fails every keyed call closed while Redis is down, recovers by itself, and charges each key exactly once', async () => {
    const prefix = uniqueKeyPrefix('faults-stream');
    const ledger = new ProviderLedger(100);
    const clients: RedisClient[] = [];
    const instances: InProcessConnection[] = [];
    for (let i = 0; i < 3; i++) {
      const client = await connectRedis(server().url);
      clients.push(client);
      instances.push(
        await connectInProcess({
          store: new RedisIdempotencyStore(client, { keyPrefix: prefix }),
          ledger,
          // Redis restarts without its data: new keys then fail closed for one lease (the calls
          // running when it died may still record), so one short enough for the stream to go on.
          leaseMs: RESTART_LEASE_MS,
        }),
      );
    }
    const OPERATIONS = 60;
    const WORKERS = 4;

    try {
      const callers = instances.map((i) => i.client);
      const { operations, attempts, charged, finished } = streamCharges(OPERATIONS, callers, WORKERS);
      await waitUntil(async () => charged() >= OPERATIONS / 4, 20_000);
      await server().kill();
      const killedAt = performance.now();
      const chargesAtKill = ledger.commits.length;
      await sleep(1_500);
      const restartedAt = performance.now();
      const chargesWhileDown = ledger.commits.length - chargesAtKill;
      await server().restart();
      await finished(30_000);

      // Fail closed, at once: every call sent while Redis was down was refused, within the 1 s
      // command bound, with a code and a type that say "nothing happened, retry later".
      const sentWhileDown = attempts.filter((a) => a.sentAt > killedAt && a.sentAt < restartedAt);
      expect(sentWhileDown.length).toBeGreaterThan(0);
      expect(sentWhileDown.filter((a) => a.outcome !== 'storeUnavailable')).toStrictEqual([]);
      for (const refusal of attempts.filter((a) => a.outcome === 'storeUnavailable')) {
        expect(refusal.code).toBe(INTERNAL_ERROR);
        expect(refusal.waitedMs).toBeLessThan(2_000);
      }
      // Only calls already running when Redis died could charge while it was down.
      expect(chargesWhileDown).toBeLessThanOrEqual(WORKERS);
      // Nothing lost, nothing twice: each operation charged once and answered with its own charge.
      expect([...ledger.commits].sort((a, b) => a - b)).toStrictEqual(operations.map((op) => op.amount));
      for (const op of operations)
        expect(JSON.parse(op.answer ?? '{}')).toMatchObject({ charged: op.amount });
      const decisions = instances.flatMap((i) => i.decisions);
      for (const op of operations) {
        const ran = decisions.filter(
          (d) =>
            d.idempotencyKey === op.idempotencyKey &&
            (d.decision === 'executed' || d.decision === 'unrecorded'),
        );
        expect(ran, `executions of operation ${op.amount}`).toHaveLength(1);
      }
      const refused = attempts.filter((a) => a.outcome === 'storeUnavailable').length;
      console.log(
        `Redis stream: ${OPERATIONS} operations in ${attempts.length} calls; ${refused} failed closed ` +
          `(${sentWhileDown.length} sent while Redis was down); ${chargesWhileDown} charges already running finished while it was down`,
      );
    } finally {
      await server()
        .restart()
        .catch(() => {});
      await Promise.all(instances.map((i) => i.close()));
      await Promise.all(clients.map((c) => closeRedis(c)));
      await server().flush(prefix);
    }
  }, 60_000);

  it('answers a keyed call over HTTP with idempotency_store_unavailable and charges nothing, then serves the same key once Redis is back', async () => {
    const { prefix, args: onIt } = onRedis('faults-http');
    const args = [...onIt, '--in-progress-lease-ms', String(RESTART_LEASE_MS)];
    const [a, b] = await Promise.all([startHttpInstance(args), startHttpInstance(args)]);
    const key = randomUUID();
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
    try {
      await server().kill();
      let refused: WireAnswer;
      try {
        const sent = performance.now();
        refused = await postToolCall(a.url, params);
        expect(refused.at - sent).toBeLessThan(2_000);
      } finally {
        await server().restart();
      }
      expect(refused.status).toBe(200);
      expect(refused.body.error).toStrictEqual({
        code: INTERNAL_ERROR,
        message: 'The idempotency store is unavailable; nothing was executed, retry later with the same key',
        data: { type: IdempotencyErrorType.storeUnavailable, idempotencyKey: key },
      });

      // Back: the retry on the other instance executes, once; the one after it is a replay.
      const first = await untilAnswered(() => postToolCall(b.url, params), storeUnavailable, 10_000);
      expect(field(first.body.result, 'structuredContent')).toStrictEqual({ charged: 100, balance: 100 });
      // A reconnects on its own schedule; until then it too fails closed. Then it replays.
      const replay = await untilAnswered(() => postToolCall(a.url, params), storeUnavailable, 10_000);
      expect(replay.text).toBe(first.text);
      const balance = await postToolCall(b.url, { name: 'get_balance', arguments: {} });
      expect(field(balance.body.result, 'structuredContent')).toStrictEqual({ balance: 100 });
      const decided = [
        ...(await decisionsFor(a, key, 'replayed')),
        ...(await decisionsFor(b, key, 'executed')),
      ];
      expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
      expect(decided).toContain('storeUnavailable');
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      await server().flush(prefix);
    }
  }, 60_000);
});

// --- A server instance dies mid-charge ---

describe.skipIf(!redis)('a server instance that dies, or is stopped, mid-charge', () => {
  const LEASE_MS = 1_500;
  const CHARGE_MS = 1_000;

  /**
   * Sends the keyed charge to `url` and resolves once its record stands in Redis, the charge under
   * way: the answer to come (undefined where the instance dies first) and the record's Redis key.
   */
  async function chargeUnderWay(url: URL, prefix: string, params: { idempotencyKey: string }) {
    const lost = postToolCall(url, params).catch(() => undefined);
    const [recordKey = ''] = redisKeysOf(`${prefix}idem:`, {
      scope: LOCAL_SCOPE,
      idempotencyKey: params.idempotencyKey,
    });
    await waitUntil(async () => (await server().admin.exists(recordKey)) === 1, 5_000, 5);
    return { lost, recordKey };
  }

  it('leaves the retry on another instance in progress until the lease expires, then executes it once', async () => {
    const { prefix, args } = onRedis('faults-kill');
    const a = await startHttpInstance([
      ...args,
      '--charge-latency-ms',
      String(CHARGE_MS),
      '--in-progress-lease-ms',
      String(LEASE_MS),
    ]);
    const b = await startHttpInstance([...args, '--in-progress-lease-ms', String(LEASE_MS)]);
    const key = randomUUID();
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
    try {
      const { lost, recordKey } = await chargeUnderWay(a.url, prefix, params);
      const claimedAt = performance.now();
      const ttl = await server().admin.pTTL(recordKey);
      await a.kill();
      expect(await lost).toBeUndefined();

      const answers = await retryWhileInProgress(b.url, params, LEASE_MS + 5_000, 100);
      const last = answers.at(-1);
      if (!last) throw new Error('unreachable');
      const heldFor = last.at - claimedAt;
      console.log(
        `killed instance: lease ${LEASE_MS} ms (PTTL at claim ${ttl} ms); retry executed ${heldFor.toFixed(0)} ms after the claim, after ${answers.length - 1} in-progress answers`,
      );

      // In progress until the lease ran out; then the retry executed, once, and A's charge never was.
      expect(answers.length).toBeGreaterThan(1);
      for (const answer of answers.slice(0, -1)) {
        expect(answer.body.error).toMatchObject({
          code: INVALID_PARAMS,
          data: { type: IdempotencyErrorType.inProgress, idempotencyKey: key },
        });
      }
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(LEASE_MS);
      expect(heldFor).toBeGreaterThanOrEqual(ttl - 50);
      expect(heldFor).toBeLessThan(LEASE_MS + 2_000);
      expect(field(last.body.result, 'structuredContent')).toStrictEqual({ charged: 100, balance: 100 });
      expect((await decisionsFor(b, key, 'executed')).filter((d) => d === 'executed')).toHaveLength(1);
    } finally {
      await a.kill();
      await b.stop();
      await server().flush(prefix);
    }
  }, 60_000);

  it('executes a charge again after the lease when its instance died between committing it and recording it: the at-least-once window the README states', async () => {
    // In process, so the instance can die at exactly that point: its provider commits the
    // charge, then the instance never gets to record it (as if killed on the next line).
    const prefix = uniqueKeyPrefix('faults-window');
    const LEASE = 300;
    const commits: string[] = [];
    let die = () => {};
    const dying: Ledger = {
      charge: async (amount) => {
        commits.push('A');
        await new Promise<void>((resolve) => {
          die = resolve;
        });
        return amount;
      },
      refund: () => Promise.reject(new Error('this test makes no refunds')),
      balance: async () => commits.length * 100,
      reset: async () => {},
    };
    const surviving: Ledger = {
      charge: async (amount) => {
        commits.push('B');
        return commits.length * amount;
      },
      refund: () => Promise.reject(new Error('this test makes no refunds')),
      balance: async () => commits.length * 100,
      reset: async () => {},
    };
    const [clientA, clientB] = await Promise.all([connectRedis(server().url), connectRedis(server().url)]);
    // A dead instance renews nothing: its store here never renews (the renewal timer of a process
    // that died never fires), while its late completion still reaches Redis, as a process that
    // stalled and came back would send it.
    const storeA = new RedisIdempotencyStore(clientA, { keyPrefix: prefix });
    const a = await connectInProcess({
      store: neverRenewing(storeA, false),
      ledger: dying,
      leaseMs: LEASE,
    });
    const b = await connectInProcess({
      store: new RedisIdempotencyStore(clientB, { keyPrefix: prefix }),
      ledger: surviving,
      leaseMs: LEASE,
    });
    const call = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    try {
      const original = callTool(a.client, call);
      await waitUntil(async () => commits.length === 1, 5_000, 5);
      const retry = async () =>
        callTool(b.client, call).catch((error: unknown) => idempotencyErrorOf(error)?.type);
      expect(await retry()).toBe(IdempotencyErrorType.inProgress);
      await sleep(LEASE + 50);
      const again = await retry();
      expect(again).toMatchObject({ structuredContent: { charged: 100 } });
      expect(commits).toStrictEqual(['A', 'B']);

      // The dead instance's late completion must not overwrite the record the retry made.
      die();
      await original;
      expect(await retry()).toStrictEqual(again);
    } finally {
      die();
      await Promise.all([a.close(), b.close()]);
      await Promise.all([closeRedis(clientA), closeRedis(clientB)]);
      await server().flush(prefix);
    }
  });

  it('stopped with SIGTERM mid-charge, finishes and records the charge first: the retry elsewhere is a replay, not a wait for the lease', async () => {
    const { prefix, args } = onRedis('faults-term');
    const a = await startHttpInstance([...args, '--charge-latency-ms', String(CHARGE_MS)]);
    const b = await startHttpInstance(args);
    const key = randomUUID();
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
    try {
      const { lost } = await chargeUnderWay(a.url, prefix, params);
      const stopped = performance.now();
      await a.stop();
      await lost;
      // The default lease is two minutes: a replay now means A recorded the charge before exiting.
      const retry = await postToolCall(b.url, params);
      expect(field(retry.body.result, 'structuredContent')).toStrictEqual({ charged: 100, balance: 100 });
      expect(performance.now() - stopped).toBeLessThan(CHARGE_MS + 5_000);
      expect(await decisionsFor(b, key, 'replayed')).toStrictEqual(['replayed']);
    } finally {
      await a.kill();
      await b.stop();
      await server().flush(prefix);
    }
  }, 60_000);
});

// --- A client hangs up mid-call ---

describe('a client that disconnects mid-call', () => {
  const CHARGE_MS = 600;

  it('over HTTP: the charge completes once and its response is replayed to the retry', async () => {
    // A slower charge than below, so the request has surely been claimed when the client hangs up.
    const CHARGE_MS = 1_000;
    const instance: HttpInstance = await startHttpInstance(['--charge-latency-ms', String(CHARGE_MS)]);
    const key = randomUUID();
    const params = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key };
    try {
      const hangUp = new AbortController();
      const lost = fetch(instance.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
        signal: hangUp.signal,
      }).catch((error: unknown) => error);
      await sleep(CHARGE_MS / 3);
      hangUp.abort();
      expect(await lost).toMatchObject({ name: 'AbortError' });

      const answers = await retryWhileInProgress(instance.url, params, CHARGE_MS + 5_000, 50);
      expect(answers.slice(0, -1).every((a) => a.type === IdempotencyErrorType.inProgress)).toBe(true);
      const last = answers.at(-1);
      if (!last) throw new Error('unreachable: waitUntil saw an answer');
      expect(textOf(last)).toBe(JSON.stringify([{ type: 'text', text: 'Charged 100. New balance: 100' }]));
      const decided = await decisionsFor(instance, key, 'replayed');
      expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
      expect(decided.at(-1)).toBe('replayed');
      const balance = await postToolCall(instance.url, { name: 'get_balance', arguments: {} });
      expect(field(balance.body.result, 'structuredContent')).toStrictEqual({ balance: 100 });
    } finally {
      await instance.stop();
    }
  }, 30_000);

  // The stdio tests each start a server process or two, which a busy machine takes its time over:
  // their bounds allow START_TIMEOUT_MS a process, which is not what they are about.
  it('over stdio: the server finishes and records the charge before it exits', async () => {
    const { peer } = await RawStdioPeer.start(['--charge-latency-ms', String(CHARGE_MS)]);
    const key = randomUUID();
    try {
      peer.writeLine(
        JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key },
        }),
      );
      await sleep(CHARGE_MS / 4);
      const hungUp = performance.now();
      const code = await peer.disconnect();
      expect(code).toBe(0);
      expect(performance.now() - hungUp).toBeGreaterThan(CHARGE_MS / 2);
      expect((await peer.decisions()).map((d) => [d.decision, d.idempotencyKey])).toStrictEqual([
        ['executed', key],
      ]);
    } finally {
      await peer.stop();
    }
  }, 60_000);

  it.skipIf(!redis)(
    'over stdio with a shared Redis store: the charge completes once and the retry, from a new process, gets its response',
    async () => {
      const { prefix, args } = onRedis('faults-stdio');
      const key = randomUUID();
      const line = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: key },
      });
      const { peer: first } = await RawStdioPeer.start([...args, '--charge-latency-ms', String(CHARGE_MS)]);
      try {
        first.writeLine(line);
        await sleep(CHARGE_MS / 4);
        expect(await first.disconnect()).toBe(0);
      } finally {
        await first.stop();
      }
      const { peer: retry } = await RawStdioPeer.start(args);
      try {
        // The default lease is two minutes: an answer now means the first process recorded it.
        const answer = await retry.requestLine(1, line);
        expect(answer.line).toBe(
          '{"result":{"content":[{"type":"text","text":"Charged 100. New balance: 100"}],"structuredContent":{"charged":100,"balance":100}},"jsonrpc":"2.0","id":1}',
        );
        await waitUntil(async () => (await retry.decisions()).length > 0);
        expect((await retry.decisions()).map((d: Record<string, unknown>) => d.decision)).toStrictEqual([
          'replayed',
        ]);
        expect(await server().admin.get(`${prefix}ledger:balance`)).toBe('100');
      } finally {
        await retry.stop();
        await server().flush(prefix);
      }
    },
    90_000,
  );

  // When the input ends the SDK aborts the calls in flight and answers none of them (the MCP stdio
  // binding: a server exits promptly once its input is closed). A keyed one is recorded all the same.
  const answerTo = (id: number, stdout: string[]) =>
    stdout.find((line) => Reflect.get(Object(JSON.parse(line)), 'id') === id);

  it('records a keyed call piped in just before the input ends (printf … | server), though nothing is left to answer it', async () => {
    const call = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() },
    });
    const { stdout, decisions, code } = await pipeThrough(
      ['--charge-latency-ms', '300'],
      [...HANDSHAKE, call],
    );
    expect(code).toBe(0);
    expect(answerTo(1, stdout)).toBeUndefined();
    expect(decisions).toStrictEqual(['executed']);
  }, 60_000);

  it.skipIf(!redis)(
    'records a keyed call piped in just before the input ends, Redis store: the next process replays it',
    async () => {
      // Regression test: the input ended while the claim was on its way to Redis; the process
      // exited without executing, and the key stayed in progress for the two-minute lease.
      const { prefix, args } = onRedis('faults-pipe');
      const call = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() },
      });
      try {
        const first = await pipeThrough(args, [...HANDSHAKE, call]);
        expect(first.code).toBe(0);
        expect(first.decisions).toStrictEqual(['executed']);
        const { peer: retry } = await RawStdioPeer.start(args);
        try {
          const answer = await retry.requestLine(1, call);
          expect(answer.line).toBe(
            '{"result":{"content":[{"type":"text","text":"Charged 100. New balance: 100"}],"structuredContent":{"charged":100,"balance":100}},"jsonrpc":"2.0","id":1}',
          );
        } finally {
          await retry.stop();
        }
        expect(await server().admin.get(`${prefix}ledger:balance`)).toBe('100');
      } finally {
        await server().flush(prefix);
      }
    },
    90_000,
  );
});
