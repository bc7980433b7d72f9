// A Postgres store instance's liveness, on a real Postgres: its lock is held, shared, by two
// sessions of its own on backends of their own (never its pool's), so no claim can take it while
// the instance runs; every session ended at once is a gap that closes by itself, both sessions
// reconnecting to hold the lock again; the lock is let go when the instance closes; and a refusal
// of a pooler is one line naming the setting and the fix, told to the operator once.

import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_STATEMENT_TIMEOUT_MS, waitUntil } from '../../../../demo/processes/bounds.js';
import {
  Liveness,
  PostgresEnvironmentError,
} from '../../../../packages/idempotency/stores/postgres/liveness.js';
import { postgresForFile } from '../../../support/backends.js';

const postgres = await postgresForFile();

const opened: Array<{ liveness: Liveness; pool: pg.Pool }> = [];
afterEach(async () => {
  for (const { liveness, pool } of opened.splice(0)) {
    await liveness.close();
    await pool.end();
  }
});

/** An instance's liveness and pool, started; what it told the operator. */
async function started() {
  if (!postgres) throw new Error('unreachable: these tests are skipped without Postgres');
  const errors: unknown[] = [];
  const liveness = new Liveness({
    config: { connectionString: postgres.url, application_name: 'liveness-test' },
    statementTimeoutMs: POSTGRES_STATEMENT_TIMEOUT_MS,
    onError: (error) => errors.push(error),
  });
  const pool = new pg.Pool({ connectionString: postgres.url });
  opened.push({ liveness, pool });
  await liveness.start(pool);
  return { liveness, pool, errors };
}

/** Whether a claim could take the lock now: the try an exclusive claim makes. */
async function free(lock: string): Promise<boolean> {
  const { rows } = await (postgres as NonNullable<typeof postgres>).admin.query<{ free: boolean }>(
    'SELECT pg_try_advisory_xact_lock($1::bigint) AS free',
    [lock],
  );
  return rows[0]?.free === true;
}

/** The backends that hold an advisory lock shared, of those named. */
async function sharedHolders(pids: number[]): Promise<number[]> {
  const { rows } = await (postgres as NonNullable<typeof postgres>).admin.query<{ pid: number }>(
    `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted AND pid = ANY($1)
      ORDER BY pid`,
    [pids],
  );
  return rows.map((row) => row.pid);
}

describe.skipIf(!postgres)("an instance's liveness lock", () => {
  it('is held, shared, by two sessions on backends of their own, not its pool’s: no claim can take it', async () => {
    const { liveness, pool } = await started();
    const pids = liveness.pids;
    expect(liveness.held).toBe(true);
    expect(new Set(pids).size).toBe(2);
    expect(await sharedHolders(pids)).toStrictEqual([...pids].sort((a, b) => a - b));
    const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(pids).not.toContain(rows[0]?.pid);
    expect(await free(liveness.lock)).toBe(false);
    // A key no `pg_advisory_lock(hashtext(…))` can take.
    expect(BigInt(liveness.lock) > 2_147_483_647n || BigInt(liveness.lock) < -2_147_483_648n).toBe(true);
  });

  it('is held again by two new sessions after every session was ended at once, the operator told', async () => {
    const { liveness, errors } = await started();
    const before = liveness.pids;
    await postgres?.admin.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [before]);
    await waitUntil(async () => {
      const now = liveness.pids;
      return (
        now.length === 2 &&
        now.every((pid) => !before.includes(pid)) &&
        (await sharedHolders(now)).length === 2
      );
    });
    expect(await free(liveness.lock)).toBe(false);
    expect(errors.length).toBeGreaterThan(0);
  });

  it('is let go when the instance closes', async () => {
    const { liveness } = await started();
    await liveness.close();
    expect(liveness.held).toBe(false);
    expect(liveness.pids).toStrictEqual([]);
    await waitUntil(() => free(liveness.lock));
  });
});

describe.skipIf(!postgres)('a refusal of a pooler that shares server sessions', () => {
  it('is one line naming the server, the setting and the fix, told to the operator once', async () => {
    const { liveness, errors } = await started();
    const refusal = liveness.refuse();
    expect(liveness.refuse()).toBe(refusal);
    expect(liveness.refused).toBe(refusal);
    expect(errors).toStrictEqual([refusal]);
    expect(refusal).toBeInstanceOf(PostgresEnvironmentError);
    expect(refusal.message).not.toMatch('\n');
    expect(refusal.message).toMatch(/^Postgres at [^ ]+:\d+ shares its server sessions between clients/);
    expect(refusal.message).toMatch('set pool_mode = session');
  });
});
