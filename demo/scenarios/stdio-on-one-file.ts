// --- Scenario 19: stdio servers on one SQLite file, killed and started again ---
//
// The server most users run: over stdio, started by a desktop host, with no database server.
// `--store sqlite` keeps its records, and the balance beside them, in a file. Two server processes
// on the file are two instances: each answers the other's duplicate in progress and replays the
// other's record. A process SIGKILLed mid-charge leaves neither its charge nor its record, and its
// key is free at once (the claim names its process, which is gone); one SIGKILLed after answering
// leaves its record, which a process started afterwards replays.

import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { DEFAULT_LEASE_MS, IdempotencyErrorType, idempotencyErrorOf } from 'mcp-request-idempotency';
import { callTool } from 'mcp-request-idempotency/client';
import { balanceOf, connectToServer, resetLedger, type ServerConnection } from '../processes/launch.js';
import { skipped } from './installed-backends.js';
import { killedMidCharge } from './killed-mid-charge.js';
import { errorFrom, expect, heading, say, textOf } from './narration.js';
import { SLOW_CHARGE_MS, sleep } from './timings.js';

/** Node 20 has no node:sqlite, and the root install leaves its binding out: compiling it takes minutes. */
const SQLITE_ABSENT = `Node ${process.versions.node} has no node:sqlite and better-sqlite3 is not installed. \`npm run sqlite:install\` enables it`;

/** Whether this Node can open a SQLite file: with node:sqlite, or better-sqlite3 where that is missing. */
function sqliteBindingInstalled(): boolean {
  if (process.getBuiltinModule('node:sqlite')) return true;
  try {
    createRequire(import.meta.url).resolve('better-sqlite3');
    return true;
  } catch {
    return false;
  }
}

/** Scenario 19: needs nothing but this package, and on Node 20 the SQLite binding. */
export async function runSqliteScenarios(): Promise<void> {
  if (!sqliteBindingInstalled()) return skipped('Scenario 19', SQLITE_ABSENT);
  const dir = await mkdtemp(join(tmpdir(), 'sep3182-demo-sqlite-'));
  try {
    await stdioServersOnOneFile(join(dir, 'records.sqlite'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function stdioServersOnOneFile(file: string): Promise<void> {
  const s = '19 SQLite';
  heading(
    'Scenario 19: stdio servers on one SQLite file; A killed mid-charge, B killed after answering',
    `--store sqlite --sqlite-path ${file}: the records, and the balance beside them, in one file. Default lease (${DEFAULT_LEASE_MS / 1000} s). Each charge takes ${SLOW_CHARGE_MS} ms between its write and its commit.`,
  );
  const args = ['--store', 'sqlite', '--sqlite-path', file, '--charge-latency-ms', String(SLOW_CHARGE_MS)];
  const servers: ServerConnection[] = [];
  const start = async () => {
    const server = await connectToServer(args);
    servers.push(server);
    return server;
  };
  try {
    const [a, b] = await Promise.all([start(), start()]);
    await resetLedger(a.client);

    const shared = { name: 'charge_guarded', arguments: { amount: 100 }, idempotencyKey: randomUUID() };
    const original = callTool(a.client, shared);
    await sleep(SLOW_CHARGE_MS / 4); // A has claimed the key, and is charging
    const duplicate = idempotencyErrorOf(await errorFrom(callTool(b.client, shared)));
    const first = await original;
    const retry = await callTool(b.client, shared);
    say(`  the key on A, and on B while A charges: B answers ${duplicate?.type ?? 'no error'}`);
    say(`  on A: "${textOf(first)}"; the same key on B afterwards: "${textOf(retry)}"`);
    expect(
      s,
      "B answers A's duplicate in progress at once",
      duplicate?.type === IdempotencyErrorType.inProgress,
      String(duplicate?.type),
    );
    expect(s, "B replays A's record", isDeepStrictEqual(first, retry), textOf(retry));

    const { call: killed, answer } = await killedMidCharge(s, a, b.client);
    await b.kill();
    const c = await start();
    const replayed = await callTool(c.client, killed);
    const after = await balanceOf(c.client);
    say(`  B SIGKILLed after answering; C, started on the file: "${textOf(replayed)}", balance ${after}`);
    expect(
      s,
      "C, a process started after B died, replays B's record, and charges nothing",
      isDeepStrictEqual(replayed, answer) && after === 100,
      `${textOf(replayed)}; balance ${after}`,
    );
  } finally {
    await Promise.allSettled(servers.map((server) => server.close()));
  }
}
