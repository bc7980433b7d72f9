// The Postgres deployment end to end: real server processes (`--store postgres`, over stdio and
// stateless HTTP) on a private Postgres that the tests kill and restart. The shared SEP cases,
// two instances on one database, Postgres dying under a stream of keyed charges, the server
// killed at each phase of a charge that commits in its record's transaction, a dead holder's key
// taken over at once, records kept across restarts, and a tool that takes no transaction.
// Every count of charges is read from the ledger's own table: `${prefix}ledger_entries` holds
// each committed charge once, whatever the server logged or the client was told.

import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  IdempotencyErrorType,
  INTERNAL_ERROR,
  INVALID_PARAMS,
  idempotencyErrorOf,
  Messages,
} from 'mcp-request-idempotency';
import { callTool, MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { DEFAULT_POSTGRES_APPLICATION_NAME } from 'mcp-request-idempotency/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { START_TIMEOUT_MS, sleep, waitUntil } from '../../demo/processes/bounds.js';
import {
  balanceOf,
  connectToServer,
  type DecisionLine,
  ERAS,
  type ServerConnection,
} from '../../demo/processes/launch.js';
import { type TestPostgres, uniqueTablePrefix } from '../../demo/processes/postgres-server.js';
import { CHARGE_LIMIT, declineMessage } from '../../ledger.js';
import { connect, type Era, type Peer } from '../../packages/checker/wire.js';
import { postgresForFile } from '../support/backends.js';
import { postRaw } from '../support/hostile.js';
import { connectHttp, connectHttpClient, type HttpInstance, startHttpInstance } from '../support/http.js';
import { streamCharges } from '../support/keyed-stream.js';
import { untilAnswered } from '../support/retry.js';
import { describeSepCases, errorFrom, PEER_TIMEOUT_MS, textOf } from '../support/sep-cases.js';
import { connectStdio } from '../support/stdio.js';
import { describeTwoInstancesOn } from '../support/two-instances.js';

const postgres = await postgresForFile(
  'Tests that kill or restart Postgres skipped: they need a private cluster, not DATABASE_URL',
);
const canRestart = postgres?.owned === true;

/** Every prefix handed out, so a shared `DATABASE_URL` is left as it was found. */
const prefixes: string[] = [];

afterAll(async () => {
  for (const prefix of prefixes) await postgres?.drop(prefix).catch(() => {});
});

function database(): TestPostgres {
  if (!postgres) throw new Error('unreachable: these tests are skipped without Postgres');
  return postgres;
}

/**
 * A table prefix of its own for one describe (or one server): the store adds `idem_`, the ledger
 * `ledger_`, and both must stay within Postgres' identifier rules, so labels stay short.
 */
function newPrefix(label: string): string {
  const prefix = uniqueTablePrefix(label);
  prefixes.push(prefix);
  return prefix;
}

/** The server options for the Postgres store (and, unless told otherwise, its ledger) under `prefix`. */
function postgresArgs(prefix: string): string[] {
  return ['--store', 'postgres', '--postgres-url', database().url, '--postgres-prefix', prefix];
}

const ROOT = join(import.meta.dirname, '..', '..');

// --- What the database says, behind the servers' backs ---

/** The ledger as its tables hold it: the balance, and every committed charge in order. */
async function ledgerOf(prefix: string): Promise<{ balance: number; entries: number[] }> {
  const admin = database().admin;
  const balance = await admin.query<{ balance: string }>(`SELECT balance FROM ${prefix}ledger_balance`);
  const entries = await admin.query<{ amount: string }>(
    `SELECT amount FROM ${prefix}ledger_entries ORDER BY seq`,
  );
  return {
    balance: Number(balance.rows[0]?.balance ?? Number.NaN),
    entries: entries.rows.map((row) => Number(row.amount)),
  };
}

/** The declines the ledger has counted (none is an entry: a decline commits no charge). */
async function declinesOf(prefix: string): Promise<number> {
  const { rows } = await database().admin.query<{ declines: string }>(
    `SELECT declines FROM ${prefix}ledger_declines`,
  );
  return Number(rows[0]?.declines);
}

async function entryCount(prefix: string): Promise<number> {
  const { rows } = await database().admin.query<{ count: string }>(
    `SELECT count(*) FROM ${prefix}ledger_entries`,
  );
  return Number(rows[0]?.count);
}

/** The key's live record: its state, and what is left of its lease or retention. */
async function recordOf(prefix: string, key: string) {
  const { rows } = await database().admin.query<{ state: string; left_ms: number }>(
    `SELECT state, (extract(epoch FROM expires_at - now()) * 1000)::float8 AS left_ms
       FROM ${prefix}idem_records WHERE idempotency_key = $1 AND expires_at > now()`,
    [key],
  );
  return rows[0];
}

/**
 * Store sessions inside a transaction that has written (it has an xid) and not committed: a
 * keyed charge whose ledger write is made and held open by `--charge-latency-ms`.
 */
async function uncommittedWrites(): Promise<number> {
  const { rows } = await database().admin.query<{ count: string }>(
    `SELECT count(*) FROM pg_stat_activity
      WHERE application_name = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL`,
    [DEFAULT_POSTGRES_APPLICATION_NAME],
  );
  return Number(rows[0]?.count);
}

// --- Raw calls, for the answers as the wire carries them ---

/** A keyed call's answer as it arrived: the JSON-RPC text, and what it says. */
interface WireAnswer {
  at: number;
  text: string;
  result?: Record<string, unknown>;
  error?: { code: unknown; message: unknown; data?: unknown };
  type?: unknown;
}

function field(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null ? Reflect.get(value, name) : undefined;
}

function answerOf(text: string): WireAnswer {
  const message: unknown = JSON.parse(text);
  const result = field(message, 'result');
  const error = field(message, 'error');
  return {
    at: performance.now(),
    text,
    ...(typeof result === 'object' &&
      result !== null && { result: Object.fromEntries(Object.entries(result)) }),
    ...(typeof error === 'object' &&
      error !== null && {
        error: { code: field(error, 'code'), message: field(error, 'message'), data: field(error, 'data') },
      }),
    type: field(field(error, 'data'), 'type'),
  };
}

/** One `tools/call` over stateless HTTP as raw JSON-RPC (id 1, no initialize), bounded at 10 s. */
async function postToolCall(url: URL, params: Record<string, unknown>): Promise<WireAnswer> {
  const { text } = await postRaw(
    url,
    JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
  );
  return answerOf(text);
}

/** Sends `send` again until it is answered with something other than in progress, bounded. */
async function untilNotInProgress(
  send: () => Promise<WireAnswer>,
  timeoutMs: number,
): Promise<{ last: WireAnswer; inProgress: number }> {
  let last: WireAnswer | undefined;
  let inProgress = 0;
  await waitUntil(
    async () => {
      last = await send();
      if (last.type === IdempotencyErrorType.inProgress) inProgress += 1;
      return last.type !== IdempotencyErrorType.inProgress;
    },
    timeoutMs,
    10,
  );
  if (!last) throw new Error('unreachable: waitUntil probed at least once');
  return { last, inProgress };
}

/** The decisions logged for `key` by these servers, once one of them is `last` (stderr may lag). */
async function decisionsFor(
  servers: ReadonlyArray<{ decisions(): Promise<DecisionLine[]> }>,
  key: string,
  last: string,
): Promise<unknown[]> {
  const mine = async () =>
    (await Promise.all(servers.map((s) => s.decisions())))
      .flat()
      .filter((d) => d.idempotencyKey === key)
      .map((d) => d.decision);
  await waitUntil(async () => (await mine()).includes(last), 2_000).catch(() => {});
  return mine();
}

/** A raw JSON-RPC peer of a fresh `server.ts` process over stdio: every byte it writes, as written. */
function stdioPeer(args: string[], era: Era): Promise<Peer> {
  const command = process.execPath;
  const script = ['--import', 'tsx', join(ROOT, 'server.ts'), ...args];
  return connect({ kind: 'stdio', command, args: script }, { era, timeoutMs: PEER_TIMEOUT_MS });
}

const chargeParams = (amount: number, idempotencyKey: string) => ({
  name: 'charge_guarded',
  arguments: { amount },
  idempotencyKey,
});

/** One operation of a stream whose server is killed under it, and the text it was answered. */
interface StreamedCharge {
  call: ReturnType<typeof chargeParams>;
  answer?: string;
}

// --- 1. The shared SEP cases, with the Postgres store and its transactional ledger ---

describe.skipIf(!postgres)('SEP cases with the Postgres store', () => {
  // Every connection gets a prefix of its own: its own records and its own ledger. (Over stdio
  // the SDK's process and the raw peer's share one, as two instances would; they take turns.)
  // The Postgres store has no count cap to test: its cap is the operator's disk.
  for (const era of ERAS) {
    describeSepCases(
      `stateless HTTP, ${era}, with the Postgres store`,
      (args) => connectHttp([...args, ...postgresArgs(newPrefix('sep'))], era),
      { transport: 'http', recordCap: false },
    );
    describeSepCases(
      `stdio, ${era}, with the Postgres store`,
      (args) => connectStdio([...args, ...postgresArgs(newPrefix('sep'))], { era }),
      { transport: 'stdio', recordCap: false },
    );
  }
});

// --- 2. Two instances on one Postgres: the cross-instance cases two instances on one Redis pass ---

describeTwoInstancesOn(
  'one Postgres',
  postgres && {
    prefix: newPrefix('scale'),
    args: postgresArgs,
    // Only a private cluster logs every statement for the test to read. Its log names sessions,
    // not tables: the store's sessions (the ledger's writes share its pool) are these two
    // instances' alone, as every other describe's servers are stopped by then.
    roundTrips: postgres.owned
      ? async (_prefix, action) => {
          const seen = await postgres.statementsDuring(DEFAULT_POSTGRES_APPLICATION_NAME, action);
          const verbs = seen.statements.map((statement) => statement.split(/\s/, 1)[0]?.toUpperCase() ?? '');
          return { perNode: [verbs], value: seen.value };
        }
      : undefined,
    // The claim; then, because the charge asks for its record's transaction, BEGIN, the ledger's
    // write (a WITH … INSERT … UPDATE), the record (SELECT settle(…)) and COMMIT, those two sent
    // together. The replay: one claim that finds it.
    cost: { firstExecution: ['SELECT', 'BEGIN', 'WITH', 'SELECT', 'COMMIT'], replay: ['SELECT'] },
  },
);

// --- 3. Postgres killed and restarted under a stream of keyed charges ---
//
// Two HTTP instances on the Postgres ledger, so every charge commits in its record's transaction
// and the entries table is the proof: a refused call left nothing, a call under way when
// Postgres died left nothing either (its transaction died with it), and each operation is in
// the ledger exactly once. Then one instance on the in-process ledger (`--ledger memory`), which
// Postgres' death cannot roll back, so its balance shows the refusal executed nothing.

describe.skipIf(!canRestart)('Postgres killed and restarted during a stream of keyed charges', () => {
  it('fails every keyed call closed while Postgres is down, recovers by itself, and commits each operation exactly once', async () => {
    const prefix = newPrefix('stream');
    const args = [...postgresArgs(prefix), '--charge-latency-ms', '50'];
    const instances = await Promise.all([startHttpInstance(args), startHttpInstance(args)]);
    const clients = await Promise.all(instances.map((instance) => connectHttpClient(instance.url)));
    const OPERATIONS = 40;
    const WORKERS = 3;
    try {
      const { operations, attempts, charged, finished } = streamCharges(OPERATIONS, clients, WORKERS);
      await waitUntil(async () => charged() >= OPERATIONS / 4, 20_000);
      await database().kill();
      const killedAt = performance.now();
      await sleep(1_500);
      const restartedAt = performance.now();
      await database().restart();
      await finished(30_000);

      // Fail closed, at once: every call sent while Postgres was down was refused, with the code
      // and type that say "nothing happened, retry later with the same key".
      const sentWhileDown = attempts.filter((a) => a.sentAt > killedAt && a.sentAt < restartedAt);
      const refusals = attempts.filter((a) => a.outcome === 'storeUnavailable');
      expect(sentWhileDown.length).toBeGreaterThan(0);
      expect(sentWhileDown.filter((a) => a.outcome !== 'storeUnavailable')).toStrictEqual([]);
      for (const refusal of refusals) {
        expect(refusal.code).toBe(INTERNAL_ERROR);
        expect(refusal.waitedMs).toBeLessThan(2_000);
      }
      // Both instances served to the end: a connection that broke under a charge's open
      // transaction must fail that call, not take the server process down with it.
      // Nothing lost, nothing twice: the ledger holds each operation's charge once, and each
      // operation was answered with its own charge.
      const ledger = await ledgerOf(prefix);
      expect(await entryCount(prefix)).toBe(OPERATIONS);
      expect([...ledger.entries].sort((x, y) => x - y)).toStrictEqual(operations.map((op) => op.amount));
      expect(ledger.balance).toBe((OPERATIONS * (OPERATIONS + 1)) / 2);
      for (const op of operations)
        expect(JSON.parse(op.answer ?? '{}')).toMatchObject({ charged: op.amount });

      const slowest = Math.max(...sentWhileDown.map((a) => a.waitedMs));
      console.log(
        `Postgres stream: ${OPERATIONS} operations in ${attempts.length} calls; ${refusals.length} failed closed ` +
          `(${sentWhileDown.length} sent while Postgres was down, each refused within ${slowest.toFixed(0)} ms); ` +
          `${ledger.entries.length} ledger entries`,
      );
    } finally {
      await database()
        .restart()
        .catch(() => {});
      await Promise.all(clients.map((client) => client.close()));
      await Promise.all(instances.map((instance) => instance.stop()));
    }
  }, 60_000);

  it('answers a keyed call with idempotency_store_unavailable within 2 s and charges nothing in process, then executes the same key once Postgres is back', async () => {
    const prefix = newPrefix('down');
    const server = await startHttpInstance([...postgresArgs(prefix), '--ledger', 'memory']);
    const key = randomUUID();
    const params = chargeParams(100, key);
    try {
      let refused: WireAnswer;
      let sent: number;
      await database().kill();
      try {
        sent = performance.now();
        refused = await postToolCall(server.url, params);
        // The in-process ledger still answers: nothing was charged.
        const balance = await postToolCall(server.url, { name: 'get_balance', arguments: {} });
        expect(balance.result?.structuredContent).toStrictEqual({ balance: 0 });
      } finally {
        await database().restart();
      }
      const refusedInMs = refused.at - sent;
      console.log(`Postgres down: the keyed call was refused in ${refusedInMs.toFixed(0)} ms`);
      expect(refusedInMs).toBeLessThan(2_000);
      expect(refused.error).toStrictEqual({
        code: INTERNAL_ERROR,
        message: Messages.storeUnavailable,
        data: { type: IdempotencyErrorType.storeUnavailable, idempotencyKey: key },
      });

      // Back: the server reconnects on its own; the same key then executes, once, and replays.
      const first = await untilAnswered(
        () => postToolCall(server.url, params),
        (answer) => answer.type === IdempotencyErrorType.storeUnavailable,
        10_000,
      );
      expect(first?.result?.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
      const replay = await postToolCall(server.url, params);
      expect(replay.text).toBe(first?.text);
      const balance = await postToolCall(server.url, { name: 'get_balance', arguments: {} });
      expect(balance.result?.structuredContent).toStrictEqual({ balance: 100 });
      const decided = await decisionsFor([server], key, 'replayed');
      expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
      expect(decided).toContain('storeUnavailable');
    } finally {
      await server.stop();
    }
  }, 60_000);
});

// --- 3b. A declined charge, counted in its record's transaction ---
//
// A decline commits no charge, but the ledger counts it, and numbers it: a keyed decline's count
// commits with its record, so a retry on either instance replays that number, and only a call
// without a key is declined again.

describe.skipIf(!postgres)('a declined charge on the Postgres ledger', () => {
  it('replays a keyed decline from the other instance with its own number, declines an unkeyed call next, and charges nothing', async () => {
    const prefix = newPrefix('decline');
    const [one, two] = await Promise.all([
      startHttpInstance(postgresArgs(prefix)),
      startHttpInstance(postgresArgs(prefix)),
    ]);
    const over = CHARGE_LIMIT + 1;
    const declined = (decline: number) => ({
      isError: true,
      content: [{ type: 'text', text: declineMessage(over, CHARGE_LIMIT, decline) }],
    });
    try {
      const params = chargeParams(over, randomUUID());
      const first = await postToolCall(one.url, params);
      expect(first.result).toMatchObject(declined(1));
      const retry = await postToolCall(two.url, params);
      expect(retry.text).toBe(first.text);
      const unkeyed = await postToolCall(two.url, {
        name: 'charge_guarded',
        arguments: { amount: over },
      });
      expect(unkeyed.result).toMatchObject(declined(2));
      expect(await declinesOf(prefix)).toBe(2);
      expect(await ledgerOf(prefix)).toStrictEqual({ balance: 0, entries: [] });
    } finally {
      await Promise.all([one.stop(), two.stop()]);
    }
  }, 60_000);
});

// --- 4. The server killed at each phase of a keyed charge that commits with its record ---
//
// `--store postgres` with its default ledger, the Postgres one: the charge writes its entry in
// the record's transaction, then waits `--charge-latency-ms`, then commits with the record. Over
// stdio, where a killed server is respawned by its client: every retry runs on a fresh process.

describe.skipIf(!postgres)('the server killed at each phase of a keyed charge (transactional ledger)', () => {
  const LATENCY_MS = 1_500;
  const servers: ServerConnection[] = [];
  const spawnServer = async (args: string[]) => {
    const server = await connectToServer(args);
    servers.push(server);
    return server;
  };
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.kill().catch(() => {})));
  });

  /** The retry on a fresh server: in progress only while Postgres ends the dead holder's session. */
  const retryOn = async (server: ServerConnection, call: ReturnType<typeof chargeParams>) => {
    let answer: Awaited<ReturnType<typeof callTool>> | undefined;
    await waitUntil(
      async () => {
        answer = await callTool(server.client, call).catch((error: unknown) => {
          if (idempotencyErrorOf(error)?.type === IdempotencyErrorType.inProgress) return undefined;
          throw error;
        });
        return answer !== undefined;
      },
      2_000,
      10,
    );
    if (!answer) throw new Error('unreachable: waitUntil succeeded');
    return answer;
  };

  it('killed before its write commits: the ledger shows nothing, and the retry on a fresh server executes once', async () => {
    const prefix = newPrefix('phase_a');
    const args = postgresArgs(prefix);
    const call = chargeParams(100, randomUUID());
    const first = await spawnServer([...args, '--charge-latency-ms', String(LATENCY_MS)]);
    const lost = callTool(first.client, call).then(
      () => 'answered',
      () => 'lost',
    );
    // Its entry is written, inside the record's transaction, not committed: nobody else sees it.
    await waitUntil(async () => (await uncommittedWrites()) === 1, 10_000, 5);
    expect(await ledgerOf(prefix)).toStrictEqual({ balance: 0, entries: [] });
    await first.kill();
    expect(await lost).toBe('lost');

    // Postgres rolled the write back with the dead session; the claim it left is the dead holder's.
    await waitUntil(async () => (await uncommittedWrites()) === 0, 5_000);
    expect(await ledgerOf(prefix)).toStrictEqual({ balance: 0, entries: [] });
    expect((await recordOf(prefix, call.idempotencyKey))?.state).toBe('inProgress');

    const second = await spawnServer(args);
    const retry = await retryOn(second, call);
    expect(textOf(retry)).toBe('Charged 100. New balance: 100');
    expect(await entryCount(prefix)).toBe(1);
    expect(await ledgerOf(prefix)).toStrictEqual({ balance: 100, entries: [100] });
    expect(await balanceOf(second.client)).toBe(100);
    const decided = await decisionsFor([second], call.idempotencyKey, 'executed');
    expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
  });

  it('killed after its record committed, before the client read the answer: the retry on a fresh server replays, with no second entry', async () => {
    const prefix = newPrefix('phase_b');
    const args = postgresArgs(prefix);
    const call = chargeParams(100, randomUUID());
    const first = await spawnServer([...args, '--charge-latency-ms', String(LATENCY_MS)]);
    // The client gives up long before the charge commits, so it never reads the answer.
    const lost = callTool(first.client, call, { timeout: LATENCY_MS / 3 }).then(
      () => 'answered',
      () => 'lost',
    );
    expect(await lost).toBe('lost');
    // The server runs the charge to its end all the same; it dies right after recording it.
    await waitUntil(
      async () =>
        (await first.decisions()).some(
          (d) => d.idempotencyKey === call.idempotencyKey && d.decision === 'executed',
        ),
      10_000,
      2,
    );
    await first.kill();
    expect(await ledgerOf(prefix)).toStrictEqual({ balance: 100, entries: [100] });
    expect((await recordOf(prefix, call.idempotencyKey))?.state).toBe('completed');

    const second = await spawnServer(args);
    const retry = await callTool(second.client, call);
    expect(textOf(retry)).toBe('Charged 100. New balance: 100');
    expect(retry.structuredContent).toStrictEqual({ charged: 100, balance: 100 });
    expect(await entryCount(prefix)).toBe(1);
    expect(await balanceOf(second.client)).toBe(100);
    expect(await decisionsFor([second], call.idempotencyKey, 'replayed')).toStrictEqual(['replayed']);
  });

  // Six server processes started one after another, and a seventh: on a busy machine each start-up
  // alone may take most of START_TIMEOUT_MS, which is not what this test is about.
  const OPERATIONS = 6;
  it(
    'killed at random points of a stream of charges: each operation is in the ledger exactly once, and answered with its own charge',
    async () => {
      const prefix = newPrefix('random');
      const STREAM_LATENCY_MS = 400;
      const args = [...postgresArgs(prefix), '--charge-latency-ms', String(STREAM_LATENCY_MS)];
      const operations: StreamedCharge[] = Array.from({ length: OPERATIONS }, (_, i) => ({
        call: chargeParams(i + 1, randomUUID()),
      }));
      const killedWith: Array<'nothing committed' | 'committed'> = [];
      const started = performance.now();
      let server = await spawnServer(args);
      for (const op of operations) {
        // The server that takes over starts meanwhile, as a supervisor's replacement would.
        const next = spawnServer(args);
        // The first attempt dies somewhere between before its claim and after its commit.
        const delayMs = Math.floor(Math.random() * (STREAM_LATENCY_MS + 300));
        const lost = callTool(server.client, op.call).then(
          (result) => textOf(result),
          () => undefined,
        );
        await sleep(delayMs);
        await server.kill();
        const answered = await lost;
        if (answered !== undefined) op.answer = answered;
        await waitUntil(async () => (await uncommittedWrites()) === 0, 5_000);
        const committed = (await ledgerOf(prefix)).entries.includes(op.call.arguments.amount);
        killedWith.push(committed ? 'committed' : 'nothing committed');
        server = await next;
        const retry = await retryOn(server, op.call);
        op.answer ??= textOf(retry);
        expect(textOf(retry)).toMatch(
          new RegExp(`^Charged ${op.call.arguments.amount}\\. New balance: \\d+$`),
        );
      }
      const ledger = await ledgerOf(prefix);
      expect(await entryCount(prefix)).toBe(OPERATIONS);
      expect([...ledger.entries].sort((x, y) => x - y)).toStrictEqual(
        operations.map((op) => op.call.arguments.amount),
      );
      expect(ledger.balance).toBe((OPERATIONS * (OPERATIONS + 1)) / 2);
      expect(await balanceOf(server.client)).toBe(ledger.balance);
      for (const op of operations)
        expect(op.answer).toMatch(new RegExp(`^Charged ${op.call.arguments.amount}\\.`));
      console.log(
        `random kills: ${OPERATIONS} operations in ${((performance.now() - started) / 1000).toFixed(1)} s; ` +
          `killed with ${killedWith.filter((k) => k === 'committed').length} committed, ` +
          `${killedWith.filter((k) => k === 'nothing committed').length} with nothing committed`,
      );
    },
    (OPERATIONS + 1) * START_TIMEOUT_MS,
  );
});

// --- 5. A dead holder's key is taken over at once; a live one's is not ---
//
// Instance A holds the key with the default lease (two minutes: no --in-progress-lease-ms), so
// only the store's liveness check can free it early: a claim whose holder session is gone from
// `pg_stat_activity` is free. A SIGKILL closes A's sockets, Postgres ends its sessions, and B's
// retry executes; a slow A that lives keeps its key, and B is told it is in progress.

describe.skipIf(!postgres)('a dead holder taken over at once, on two instances sharing one Postgres', () => {
  const prefix = newPrefix('holder');
  const DEFAULT_LEASE_MS = 120_000;
  let b: HttpInstance;
  const instances: HttpInstance[] = [];
  const startA = async (chargeMs: number) => {
    const a = await startHttpInstance([...postgresArgs(prefix), '--charge-latency-ms', String(chargeMs)]);
    instances.push(a);
    return a;
  };
  beforeAll(async () => {
    b = await startHttpInstance(postgresArgs(prefix));
    instances.push(b);
  });
  afterAll(async () => {
    await Promise.all(instances.map((instance) => instance.stop()));
  });

  it('executes the retry on instance B within a second of instance A being SIGKILLed mid-charge, once', async () => {
    const before = await ledgerOf(prefix);
    const a = await startA(10_000);
    const key = randomUUID();
    const params = chargeParams(100, key);
    const lost = postToolCall(a.url, params).catch(() => undefined);
    // A is mid-charge: its entry written in the record's transaction, the key claimed for a full lease.
    await waitUntil(async () => (await uncommittedWrites()) === 1, 10_000, 5);
    const claim = await recordOf(prefix, key);
    expect(claim?.state).toBe('inProgress');
    expect(claim?.left_ms).toBeGreaterThan(DEFAULT_LEASE_MS - 10_000);

    const killedAt = performance.now();
    await a.kill();
    const { last, inProgress } = await untilNotInProgress(() => postToolCall(b.url, params), 5_000);
    const takeoverMs = last.at - killedAt;
    console.log(
      `dead-holder takeover: B executed the retry ${takeoverMs.toFixed(0)} ms after A was SIGKILLed ` +
        `(lease ${DEFAULT_LEASE_MS} ms, ${(claim?.left_ms ?? 0).toFixed(0)} ms of it left), after ${inProgress} in-progress answers`,
    );

    expect(takeoverMs).toBeLessThan(1_000);
    expect(await lost).toBeUndefined();
    expect(last.result?.structuredContent).toStrictEqual({ charged: 100, balance: before.balance + 100 });
    expect(await ledgerOf(prefix)).toStrictEqual({
      balance: before.balance + 100,
      entries: [...before.entries, 100],
    });
    const decided = await decisionsFor([b], key, 'executed');
    expect(decided.filter((d) => d === 'executed')).toHaveLength(1);
  });

  it('answers the retry on B idempotency_key_in_progress while a slow but live A runs the charge, then replays A’s answer', async () => {
    const before = await ledgerOf(prefix);
    const a = await startA(2_000);
    const key = randomUUID();
    const params = chargeParams(100, key);
    const original = postToolCall(a.url, params);
    await waitUntil(async () => (await uncommittedWrites()) === 1, 10_000, 5);

    const retry = await postToolCall(b.url, params);
    expect(retry.error).toStrictEqual({
      code: INVALID_PARAMS,
      message: Messages.inProgress,
      data: { type: IdempotencyErrorType.inProgress, idempotencyKey: key },
    });
    expect((await ledgerOf(prefix)).entries).toStrictEqual(before.entries);

    const first = await original;
    expect(first.result?.structuredContent).toStrictEqual({ charged: 100, balance: before.balance + 100 });
    const replay = await postToolCall(b.url, params);
    expect(replay.text).toBe(first.text);
    expect(await ledgerOf(prefix)).toStrictEqual({
      balance: before.balance + 100,
      entries: [...before.entries, 100],
    });
    expect(await decisionsFor([a], key, 'executed')).toStrictEqual(['executed']);
    expect(await decisionsFor([b], key, 'replayed')).toStrictEqual(['inProgress', 'replayed']);
  });
});

// --- 6. Records kept across restarts of the server, and of Postgres itself ---
//
// Raw peers over stdio, so the answers compare as the bytes the server wrote. A fresh peer's
// call has the same id as the first one's (its discovery or initialize is id 1, the call id 2).

describe.skipIf(!postgres)('records kept across restarts, over stdio', () => {
  const call = (key: string) => JSON.stringify(chargeParams(100, key));
  const peers: Peer[] = [];
  const open = async (args: string[], era: Era) => {
    const peer = await stdioPeer(args, era);
    peers.push(peer);
    return peer;
  };
  afterAll(async () => {
    await Promise.all(peers.map((peer) => peer.close()));
  });

  for (const era of ERAS) {
    it(`replays byte for byte after the server process is restarted, ${era}; the ledger has one entry`, async () => {
      const prefix = newPrefix('restart');
      const args = postgresArgs(prefix);
      const key = randomUUID();
      const before = await open(args, era);
      const first = await before.request('tools/call', call(key), 'charge_guarded');
      expect(field(field(first.message, 'result'), 'structuredContent')).toStrictEqual({
        charged: 100,
        balance: 100,
      });
      await before.close();

      const after = await open(args, era);
      const retry = await after.request('tools/call', call(key), 'charge_guarded');
      expect(retry.text).toBe(first.text);
      expect(await ledgerOf(prefix)).toStrictEqual({ balance: 100, entries: [100] });
    });
  }

  it.skipIf(!canRestart)(
    'replays after Postgres itself is shut down and restarted: the running server recovers by itself, a fresh one replays byte for byte',
    async () => {
      const prefix = newPrefix('pgrestart');
      const args = postgresArgs(prefix);
      const key = randomUUID();
      const era = MODERN_PROTOCOL_VERSION;
      const running = await open(args, era);
      const first = await running.request('tools/call', call(key), 'charge_guarded');
      expect(field(field(first.message, 'result'), 'structuredContent')).toStrictEqual({
        charged: 100,
        balance: 100,
      });

      await database().shutdown();
      await database().restart();

      // The same process: it fails closed until its store has reconnected, then replays.
      const again = await untilAnswered(
        () => running.request('tools/call', call(key), 'charge_guarded'),
        (answer) =>
          field(field(field(answer.message, 'error'), 'data'), 'type') ===
          IdempotencyErrorType.storeUnavailable,
        10_000,
      );
      expect(again?.message.result).toStrictEqual(first.message.result);

      const fresh = await open(args, era);
      const retry = await fresh.request('tools/call', call(key), 'charge_guarded');
      expect(retry.text).toBe(first.text);
      expect(await ledgerOf(prefix)).toStrictEqual({ balance: 100, entries: [100] });
    },
    60_000,
  );
});

// --- 7. A tool that takes no transaction: the Postgres store as any store ---
//
// `--ledger memory`: the charge never asks for its record's transaction, so the record is written
// on its own, as with Redis or the memory store, and the same rules hold.

describe.skipIf(!postgres)('the Postgres store with the in-process ledger (--ledger memory)', () => {
  const prefix = newPrefix('memledger');
  let server: HttpInstance;
  beforeAll(async () => {
    server = await startHttpInstance([...postgresArgs(prefix), '--ledger', 'memory']);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('replays a keyed retry from its Postgres record without charging again', async () => {
    const client = await connectHttpClient(server.url);
    try {
      const before = await balanceOf(client);
      const call = chargeParams(100, randomUUID());
      const first = await callTool(client, call);
      const retry = await callTool(client, call);
      expect(retry).toStrictEqual(first);
      expect(first.structuredContent).toStrictEqual({ charged: 100, balance: before + 100 });
      expect(await balanceOf(client)).toBe(before + 100);
      expect((await recordOf(prefix, call.idempotencyKey))?.state).toBe('completed');
      // No ledger tables: the balance is in the server process, out of any transaction's reach.
      const { rows } = await database().admin.query<{ table: string | null }>(
        'SELECT to_regclass($1)::text AS table',
        [`${prefix}ledger_entries`],
      );
      expect(rows[0]?.table).toBeNull();
    } finally {
      await client.close();
    }
  });

  it('rejects the same key with other arguments as a conflict, and charges nothing', async () => {
    const client = await connectHttpClient(server.url);
    try {
      const call = chargeParams(100, randomUUID());
      const first = await callTool(client, call);
      const balance = await balanceOf(client);
      const error = await errorFrom(callTool(client, { ...call, arguments: { amount: 5 } }));
      expect(error instanceof Error ? error.message : '').toBe(Messages.conflict);
      expect(idempotencyErrorOf(error)).toStrictEqual({
        code: INVALID_PARAMS,
        type: IdempotencyErrorType.conflict,
        idempotencyKey: call.idempotencyKey,
      });
      expect(await balanceOf(client)).toBe(balance);
      expect(await callTool(client, call)).toStrictEqual(first);
      expect(await balanceOf(client)).toBe(balance);
    } finally {
      await client.close();
    }
  });
});
