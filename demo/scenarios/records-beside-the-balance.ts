// --- Scenario 16: Postgres, the records in the database the tool writes ---
//
// Two stateless HTTP instances on one Postgres, the balance a table beside the records. A keyed
// charge writes through its record's transaction, so the charge and its record commit together
// or not at all; and a claim names the database session of the instance holding it, so when that
// instance dies its key is free at once, not after the two-minute lease.

import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { DEFAULT_LEASE_MS } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { connectHttpClient, resetLedger, startHttpInstance } from '../processes/launch.js';
import { startPostgres } from '../processes/postgres-server.js';
import { backendFor, POSTGRES_ABSENT } from './installed-backends.js';
import { killedMidCharge } from './killed-mid-charge.js';
import { expect, heading, say, textOf } from './narration.js';
import { SLOW_CHARGE_MS } from './timings.js';

const DEMO_POSTGRES_PREFIX = 'sep3182_demo_';

/** Scenario 16 needs Postgres: a private cluster when its server binaries are installed, else DATABASE_URL. */
export async function runPostgresScenarios(): Promise<void> {
  const postgres = await backendFor('Scenario 16 (Postgres)', startPostgres, POSTGRES_ABSENT);
  if (!postgres) return;
  try {
    await twoInstancesOnPostgres(postgres.url);
  } finally {
    await postgres.drop(DEMO_POSTGRES_PREFIX);
    await postgres.stop();
  }
}

async function twoInstancesOnPostgres(postgresUrl: string): Promise<void> {
  const s = '16 Postgres';
  heading(
    'Scenario 16: two instances on one Postgres; A killed mid-charge',
    `The balance is a table in the same database; a keyed charge commits with its record. Default lease (${DEFAULT_LEASE_MS / 1000} s). Each charge takes ${SLOW_CHARGE_MS} ms between its write and its commit.`,
  );
  const args = [
    '--store',
    'postgres',
    '--postgres-url',
    postgresUrl,
    '--postgres-prefix',
    DEMO_POSTGRES_PREFIX,
  ];
  const [a, b] = await Promise.all([
    startHttpInstance([...args, '--charge-latency-ms', String(SLOW_CHARGE_MS)]),
    startHttpInstance([...args, '--charge-latency-ms', String(SLOW_CHARGE_MS)]),
  ]);
  const [viaA, viaB] = await Promise.all([connectHttpClient(a.url), connectHttpClient(b.url)]);
  try {
    await resetLedger(viaA);
    const replayed = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const first = await callTool(viaA, replayed);
    const retry = await callTool(viaB, replayed);
    say(`  on A: "${textOf(first)}"; the same key on B: "${textOf(retry)}"`);
    expect(s, "a retry on B replays A's record", isDeepStrictEqual(first, retry), textOf(retry));

    await killedMidCharge(s, { client: viaA, kill: () => a.kill() }, viaB);
  } finally {
    await Promise.allSettled([viaA.close(), viaB.close()]);
    await Promise.allSettled([a.stop(), b.stop()]);
  }
}
