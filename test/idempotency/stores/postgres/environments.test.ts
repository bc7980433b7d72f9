// The Postgres store in the environments production servers put it in: straight to Postgres, a
// role whose idle sessions the server ends, and PgBouncer in front in each pool mode, its server
// connections recycled while a call runs. In every cell one keyed charge runs on one instance
// while a second instance retries it again and again; the charge's executions are counted. Each
// cell executes the charge once, or the store refuses to start there, saying which setting and
// what to do.

import { type ChildProcess, execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  createToolCallGuard,
  type Dispatch,
  IdempotencyErrorType,
  idempotencyErrorOf,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import {
  type PostgresConnectOptions,
  PostgresEnvironmentError,
  PostgresIdempotencyStore,
  type PostgresStoreOptions,
} from 'mcp-request-idempotency/postgres';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  POSTGRES_STATEMENT_TIMEOUT_MS,
  START_TIMEOUT_MS,
  sleep,
  waitUntil,
} from '../../../../demo/processes/bounds.js';
import { uniqueTablePrefix } from '../../../../demo/processes/postgres-server.js';
import { postgresForFile } from '../../../support/backends.js';
import {
  PGBOUNCER_SKIP_REASON,
  pgBouncerInstalled,
  startPgBouncer,
  type TestPgBouncer,
} from '../../../support/pgbouncer.js';
import { startHolder } from '../../../support/postgres-holders.js';

const postgres = await postgresForFile(
  'Postgres environment tests skipped: they create roles and poolers, so need a private cluster',
);
// Roles, databases and poolers of the test's own: not on a shared DATABASE_URL.
const cluster = postgres?.owned ? postgres : undefined;
if (cluster && !pgBouncerInstalled()) console.warn(PGBOUNCER_SKIP_REASON);
const canBounce = cluster !== undefined && pgBouncerInstalled();

const ROOT = join(import.meta.dirname, '..', '..', '..', '..');
const prefix = uniqueTablePrefix('env');
const stores: PostgresIdempotencyStore[] = [];
const closers: Array<() => Promise<void>> = [];
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => {});
  await postgres?.drop(prefix);
});

function server() {
  if (!cluster) throw new Error('unreachable: these tests are skipped without a private cluster');
  return cluster;
}

/** A store instance at `url`, as each server instance opens one. */
async function openStore(
  url: string,
  options: PostgresStoreOptions & PostgresConnectOptions = {},
): Promise<PostgresIdempotencyStore> {
  const store = await PostgresIdempotencyStore.connect(url, {
    tablePrefix: prefix,
    statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
    ...options,
  });
  stores.push(store);
  return store;
}

/** A PgBouncer for one describe, stopped with the file. */
async function pooler(
  poolMode: 'session' | 'transaction',
  settings?: Record<string, string>,
): Promise<TestPgBouncer> {
  const started = await startPgBouncer({ postgresUrl: server().url, poolMode, settings });
  if (!started) throw new Error('unreachable: skipped without pgbouncer');
  closers.push(() => started.stop());
  return started;
}

/** What one answer to the retrying instance was: an idempotency error's type, or what it said. */
const answerOf = (error: unknown) => idempotencyErrorOf(error)?.type ?? String(error);

/**
 * One keyed charge, run by instance A at `url` until `during` has happened, while instance B
 * retries it every few milliseconds; then A finishes and B retries once more. Answers how many
 * times the charge executed, what B was answered while A ran, A's answer and B's last, and the
 * backends of both instances' liveness sessions before and after.
 */
async function chargeWhileRunning(url: string, during: () => Promise<void>) {
  const [first, second] = await Promise.all([openStore(url), openStore(url)]);
  const liveness = () => [first, second].map((store) => store.livenessLock.pids);
  const livenessBefore = liveness();
  const [a, b] = [createToolCallGuard({ store: first }), createToolCallGuard({ store: second })];
  let executions = 0;
  let finish = () => {};
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const charge: Dispatch = async () => {
    executions += 1;
    const run = executions;
    // The first execution is the running call; another is the defect, counted and answered at once.
    if (run === 1) await finished;
    return { content: [{ type: 'text', text: `Charged 100 (run ${run})` }] };
  };
  const params = { name: 'charge', arguments: { amount: 100 }, idempotencyKey: randomUUID() };

  // Each answer as it came, an error by its type: a cell that fails shows what each instance was told.
  const running = a(params, {}, charge).catch(answerOf);
  await waitUntil(async () => executions === 1);
  const answeredWhileRunning = new Set<string>();
  let retrying = true;
  const retries = (async () => {
    while (retrying) {
      const answer = await b(params, {}, charge).then(() => 'answered', answerOf);
      answeredWhileRunning.add(answer);
      await sleep(5);
    }
  })();
  try {
    await during();
  } finally {
    // Every answer B had was given while A still ran.
    retrying = false;
    await retries;
    finish();
  }
  const result = await running;
  const replayed = await b(params, {}, charge).catch(answerOf);
  return { executions, answeredWhileRunning, result, replayed, livenessBefore, livenessAfter: liveness() };
}

/** What every cell that starts must show: one execution, B told to retry meanwhile, then A's answer. */
function expectExecutedOnce(outcome: Awaited<ReturnType<typeof chargeWhileRunning>>): void {
  const charged = { content: [{ type: 'text', text: 'Charged 100 (run 1)' }] };
  const { executions, result, replayed } = outcome;
  expect({ executions, result, replayed }).toStrictEqual({
    executions: 1,
    result: charged,
    replayed: charged,
  });
  // Told "in progress" (or, failing closed, "unavailable"), never anything that executed.
  for (const answer of outcome.answeredWhileRunning) {
    expect([IdempotencyErrorType.inProgress, IdempotencyErrorType.storeUnavailable]).toContain(answer);
  }
}

/** How long after a SIGKILL of a holder at `url` another instance's claim takes its key (lease 120 s). */
async function takeoverAfterKill(url: string): Promise<number> {
  const store = await openStore(url);
  const id = { scope: `dead-${randomUUID()}`, idempotencyKey: randomUUID() };
  const { child } = await startHolder(url, prefix, id, 120_000);
  children.push(child);
  expect((await store.claim(id, 'fingerprint-of-the-holder', 120_000)).state).toBe('inProgress');
  const killed = performance.now();
  child.kill('SIGKILL');
  let claimedAfterMs = Number.POSITIVE_INFINITY;
  await waitUntil(
    async () => {
      const claim = await store.claim(id, 'fingerprint-of-the-holder', 120_000);
      if (claim.state === 'claimed') claimedAfterMs = performance.now() - killed;
      return claim.state === 'claimed';
    },
    5_000,
    10,
  );
  return claimedAfterMs;
}

/** The line a store refuses a pooler that shares server sessions with. */
function sharedSessionsRefusal(url: string): string {
  return (
    `Postgres at ${new URL(url).host} shares its server sessions between clients, so the store cannot ` +
    'tell a live holder from a dead one: a pooler in transaction or statement pooling, or one that ' +
    "keeps a session for the next client without DISCARD ALL; set pool_mode = session for the store's " +
    'database or user (with server_reset_query = DISCARD ALL, the default), or connect to Postgres directly'
  );
}

/** What a store refused with: at start, its own error; a claim, the refusal behind StoreUnavailableError. */
async function refusalOf(refusing: Promise<unknown>): Promise<unknown> {
  const error = await refusing.then(
    () => 'not refused',
    (error: unknown) => error,
  );
  const refusal = error instanceof StoreUnavailableError ? error.cause : error;
  return refusal instanceof PostgresEnvironmentError ? refusal.message : error;
}

describe.skipIf(!cluster)('straight to Postgres', () => {
  it('executes a running charge once while another instance retries it', async () => {
    expectExecutedOnce(await chargeWhileRunning(server().url, () => sleep(1_000)));
  });
});

describe.skipIf(!cluster)('a role a DBA tuned: idle sessions ended after 2 s, commits asynchronous', () => {
  let url = '';
  beforeAll(async () => {
    // A role and a database of its own, so the settings touch no session but the store's.
    const role = `tuned_${randomUUID().slice(0, 8)}`;
    await server().admin.query(`CREATE ROLE ${role} LOGIN`);
    await server().admin.query(`CREATE DATABASE ${role} OWNER ${role}`);
    await server().admin.query(`ALTER ROLE ${role} SET idle_session_timeout = '2s'`);
    await server().admin.query(`ALTER ROLE ${role} SET idle_in_transaction_session_timeout = '2s'`);
    await server().admin.query(`ALTER ROLE ${role} SET synchronous_commit = off`);
    const reaped = new URL(server().url);
    reaped.username = role;
    reaped.pathname = `/${role}`;
    url = reaped.toString();
    closers.push(async () => {
      await server().admin.query(`DROP DATABASE IF EXISTS ${role} WITH (FORCE)`);
      await server().admin.query(`DROP ROLE IF EXISTS ${role}`);
    });
  });

  it('executes a charge running through three periods of the timeout once, its liveness sessions never ended', async () => {
    const outcome = await chargeWhileRunning(url, () => sleep(6_500));
    expectExecutedOnce(outcome);
    expect(outcome.livenessAfter).toStrictEqual(outcome.livenessBefore);
  });

  it('commits its claims and records durably all the same (synchronous_commit at least on)', async () => {
    const store = await openStore(url);
    const { rows } = await store.pool.query('SHOW synchronous_commit');
    expect(rows).toStrictEqual([{ synchronous_commit: 'on' }]);
  });
});

describe.skipIf(!canBounce)('through PgBouncer, session pooling', () => {
  let bouncer: TestPgBouncer;
  beforeAll(async () => {
    // Server connections recycled once unused for a second, or a second old: never a client's own.
    bouncer = await pooler('session', { server_lifetime: '1', server_idle_timeout: '1' });
  });

  it('starts with PgBouncer as it comes, its statement timeout in force on the server session', async () => {
    const store = await openStore(bouncer.url);
    // What Postgres stops a statement the store gave up on by (10 s here, the tests' bound).
    expect((await store.pool.query('SHOW statement_timeout')).rows).toStrictEqual([
      { statement_timeout: `${POSTGRES_STATEMENT_TIMEOUT_MS / 1000}s` },
    ]);
  });

  it('executes a running charge once while another instance retries it', async () => {
    expectExecutedOnce(await chargeWhileRunning(bouncer.url, () => sleep(1_000)));
  });

  it('sees a SIGKILLed holder dead within 1 s, though its lease had 120 s to run', async () => {
    const afterMs = await takeoverAfterKill(bouncer.url);
    console.log(`session pooling: claimed ${afterMs.toFixed(0)} ms after the holder's SIGKILL`);
    expect(afterMs).toBeLessThan(1_000);
  });

  it('executes a running charge once while the pooler recycles its server connections (RECONNECT)', async () => {
    const outcome = await chargeWhileRunning(bouncer.url, async () => {
      for (let i = 0; i < 3; i++) {
        await bouncer.admin('RECONNECT');
        await sleep(400);
      }
    });
    expectExecutedOnce(outcome);
    // Each client kept its server session: a linked one is recycled only once its client lets go.
    expect(outcome.livenessAfter).toStrictEqual(outcome.livenessBefore);
  });
});

describe.skipIf(!canBounce)('through PgBouncer, transaction pooling', () => {
  // PgBouncer as it comes; with what a server author adds when a client's start-up parameters
  // are refused; and handing out its server connections in turn rather than the latest first,
  // with several of them already open (each check of the probe at connect has a case to catch).
  const cases: Array<{ settings: Record<string, string>; warm: number }> = [
    { settings: {}, warm: 0 },
    { settings: { ignore_startup_parameters: 'extra_float_digits, statement_timeout, options' }, warm: 0 },
    { settings: { server_round_robin: '1' }, warm: 3 },
  ];
  for (const { settings, warm } of cases) {
    it(`refuses to start, naming pool_mode (${JSON.stringify(settings)}, ${warm} server connections open)`, async () => {
      const bouncer = await pooler('transaction', settings);
      await Promise.all(
        Array.from({ length: warm }, async () => {
          const client = new pg.Client({ connectionString: bouncer.url });
          await client.connect();
          await client.query('SELECT pg_sleep(0.2)');
          await client.end();
        }),
      );
      // Refused at start: not unavailable (retrying cannot help), but this error of its own.
      await expect(openStore(bouncer.url)).rejects.toBeInstanceOf(PostgresEnvironmentError);
      expect(await refusalOf(openStore(bouncer.url))).toBe(sharedSessionsRefusal(bouncer.url));
    });
  }

  it('refuses every claim, naming pool_mode, once its pooler is switched to transaction pooling as it runs', async () => {
    const bouncer = await pooler('session');
    const errors: unknown[] = [];
    const store = await openStore(bouncer.url, { onError: (error) => errors.push(error) });
    expect((await store.claim(newId(), 'fingerprint', 120_000)).state).toBe('claimed');

    await bouncer.reload({ pool_mode: 'transaction' });

    const refusal = sharedSessionsRefusal(bouncer.url);
    await waitUntil(
      async () => (await refusalOf(store.claim(newId(), 'fingerprint', 120_000))) === refusal,
      10_000,
    );
    expect(errors).toContainEqual(new PostgresEnvironmentError(refusal));
  });

  it('refuses the store from the first claim that runs on a liveness session’s backend', async () => {
    const store = await openStore(server().url, { maxConnections: 1 });
    // The one pooled connection marked as a liveness session's, as a sharing pooler leaves it.
    await store.pool.query("SELECT set_config('sep3182.liveness', '1', false)");

    const refusal = sharedSessionsRefusal(server().url);
    expect(await refusalOf(store.claim(newId(), 'fingerprint', 120_000))).toBe(refusal);
    await store.pool.query("SELECT set_config('sep3182.liveness', '', false)");
    expect(await refusalOf(store.claim(newId(), 'fingerprint', 120_000))).toBe(refusal);
  });
});

describe.skipIf(!canBounce)('the demo server through PgBouncer in transaction pooling', () => {
  it('refuses to start, on one line that names the setting and the fix', async () => {
    const bouncer = await pooler('transaction');
    const argv = [
      '--import',
      'tsx',
      join(ROOT, 'server.ts'),
      '--store',
      'postgres',
      '--postgres-url',
      bouncer.url,
    ];
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, argv, { cwd: ROOT, timeout: START_TIMEOUT_MS }, (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
      );
    });
    expect(run).toStrictEqual({
      code: 1,
      stdout: '',
      stderr: `server.ts: ${sharedSessionsRefusal(bouncer.url)}\n`,
    });
  });
});

const newId = () => ({ scope: 'alice', idempotencyKey: randomUUID() });
