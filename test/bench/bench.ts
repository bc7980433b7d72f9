// --- What the SEP-3182 guard costs: `npm run bench` ---
//
//   npm run bench               the full run, a few minutes on a 2-core machine
//   npm run bench -- --quick    a smoke run (CI), 60 to 90 s on a busy 2-core machine;
//                               its figures are rough, so its verdicts read "not judged"
//   npm run bench -- peers      the guard beside other idempotency libraries alone (also part
//                               of the full run), installed apart first: npm run peers:install
//
// One question per file (transports, guard-alone, otel, redis, postgres, sqlite, memory, scaling,
// concurrency, peers/measure); harness.ts is how they measure, calls.ts what they call. Tables go to stdout, the
// figures and the machine to test/bench/results/latest.json, which the README quotes (a quick run writes
// to the temporary directory). Targets are reported, never asserted: only a wrong answer (a figure
// from the wrong path) or a broken setup fails. Every server, Redis and Postgres started here is
// stopped, on error and on Ctrl-C too.

import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { z } from 'zod';
import { startPostgres } from '../../demo/processes/postgres-server.js';
import { startRedis } from '../../demo/processes/redis-server.js';
import {
  openServer,
  type ServerPair,
  type StoreName,
  type StoreTargets,
  type TransportName,
  WrongAnswerError,
} from './calls.js';
import { measureConcurrency } from './concurrency.js';
import { PEERS_REDIS_URL_ENV, type Report, runChild, table, UNJUDGED_ENV, yesNo } from './harness.js';
import { measureStatements } from './postgres.js';
import { measureRoundTrips } from './redis.js';
import { measureSqlite, measureStatements as measureSqliteStatements } from './sqlite.js';
import { measureTransports, SETUPS } from './transports.js';

const FULL = {
  mode: 'full',
  // Over 20 rounds the medians repeat within a few percent from run to run on a busy 2-core
  // machine in process and over stdio, within about 5% over HTTP, whose calls spread wide.
  transports: {
    rounds: 20,
    warmupRounds: 2,
    batchCalls: { 'in-process': 1_000, stdio: 300, http: 60, '100 KB': 20 },
  },
  pieces: { rounds: 20, msPerPiece: 5 },
  roundTripCalls: 200,
  memoryCalls: 1_000_000,
  scaling: { rounds: 10, batchCalls: 500, sizes: [1e3, 1e5, 1e6] },
  concurrency: { rounds: 3, phaseMs: 400 },
  sqlite: { rounds: 20, warmupRounds: 2, batchCalls: 300 },
  sqliteStatements: { rounds: 10, calls: 1_000 },
  // The libraries' memory calls take microseconds, their Redis calls hundreds.
  peers: { rounds: 20, memoryCalls: 2_000, redisCalls: 300 },
};

const QUICK: typeof FULL = {
  mode: 'quick',
  transports: {
    rounds: 3,
    warmupRounds: 1,
    batchCalls: { 'in-process': 200, stdio: 50, http: 10, '100 KB': 3 },
  },
  pieces: { rounds: 3, msPerPiece: 2 },
  roundTripCalls: 20,
  memoryCalls: 150_000,
  scaling: { rounds: 2, batchCalls: 100, sizes: [1e3, 1e4, 1e5] },
  concurrency: { rounds: 1, phaseMs: 100 },
  sqlite: { rounds: 3, warmupRounds: 1, batchCalls: 50 },
  sqliteStatements: { rounds: 2, calls: 200 },
  // Not run: a quick run does not install the other libraries.
  peers: { rounds: 0, memoryCalls: 0, redisCalls: 0 },
};

// --- Cleanup: whatever was started is stopped, however the run ends ---

const closers: Array<() => Promise<unknown>> = [];
async function closeAll(): Promise<void> {
  for (let close = closers.pop(); close; close = closers.pop()) await close().catch(() => {});
}
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true;
    process.stderr.write(`\n${signal}: stopping servers…\n`);
    void closeAll().finally(() => process.exit(130));
  });
}

const say = (line: string) => process.stdout.write(`${line}\n`);
const note = (line: string) =>
  process.stderr.write(`  … ${(performance.now() / 1000).toFixed(0)} s: ${line}\n`);

/** The other libraries, installed apart, each measured on memory and on `redisUrl`'s Redis. */
async function measurePeers(redisUrl: string | undefined, peers: typeof FULL.peers): Promise<Report[]> {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  await promisify(execFile)('npm', ['run', '-s', 'peers:install'], { cwd: root });
  const reports = [await runChild('peers/measure.ts', [0, peers.rounds, peers.memoryCalls], [])];
  if (!redisUrl) return reports;
  process.env[PEERS_REDIS_URL_ENV] = redisUrl;
  return [...reports, await runChild('peers/measure.ts', [1, peers.rounds, peers.redisCalls], [])];
}

async function main(): Promise<void> {
  const options = { quick: { type: 'boolean', default: false }, out: { type: 'string' } } as const;
  const { values, positionals } = parseArgs({ options, allowPositionals: true });
  const plan = values.quick ? QUICK : FULL;
  if (positionals[0] === 'peers') return peersAlone(values.out);
  if (values.quick) process.env[UNJUDGED_ENV] = '1';
  const latest = join(dirname(fileURLToPath(import.meta.url)), 'results', 'latest.json');
  const out = values.out ?? (values.quick ? join(tmpdir(), 'sep3182-bench-quick.json') : latest);
  const started = performance.now();
  const machine = {
    date: new Date().toISOString(),
    node: process.version,
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: availableParallelism(),
    memoryGB: Math.round(totalmem() / 2 ** 30),
    loadAverageAtStart: loadavg().map((n) => Number(n.toFixed(2))),
  };
  say('SEP-3182 request idempotency: what the guard costs');
  say(`${machine.cpu}, ${machine.cores} cores, Node ${machine.node}, ${machine.date}; ${plan.mode} run`);
  const reports: Record<string, Report> = {};

  // The guard alone first, before any server runs.
  note('the guard alone, and its pieces');
  const pieces = [plan.pieces.rounds, plan.pieces.msPerPiece];
  reports.guardAlone = await runChild('guard-alone.ts', pieces, ['--expose-gc']);
  note("the guard's OpenTelemetry figures");
  reports.otel = await runChild('otel.ts', pieces, ['--expose-gc']);

  // A private redis-server if one is installed, else REDIS_URL; keys under a prefix of this run's own.
  const redis = await startRedis();
  const prefix = `sep3182-bench:${process.pid}-${randomUUID().slice(0, 8)}:`;
  if (redis) closers.push(() => redis.flush(prefix).finally(() => redis.stop()));
  // A private Postgres cluster if its server binaries are installed, else DATABASE_URL; tables
  // under a prefix of this run's own (a table name takes no `:` or `-`).
  const postgres = await startPostgres();
  const tables = `bench_${process.pid}_${randomUUID().slice(0, 8)}_`;
  if (postgres) closers.push(() => postgres.drop(tables).finally(() => postgres.stop()));
  const stores: StoreTargets = {
    redis: redis && { url: redis.url, prefix },
    postgres: postgres && { url: postgres.url, prefix: tables },
  };
  // Every transport and store the transports question measures (the others call the same
  // servers), each with its fast and its slow server.
  const pairs: ServerPair[] = [];
  const serversOf = (transport: TransportName, store: StoreName) =>
    pairs.find((pair) => pair.transport === transport && pair.store === store);
  for (const [transport, store] of SETUPS) {
    if (serversOf(transport, store) || (store !== 'memory' && !stores[store])) continue;
    const fast = await openServer(transport, store, 'fast', stores);
    closers.push(fast.close);
    const slow = await openServer(transport, store, 'slow', stores);
    closers.push(slow.close);
    pairs.push({ transport, store, fast, slow });
  }
  note('transports');
  reports.transports = await measureTransports(serversOf, plan.transports, note);
  const stdioRedis = serversOf('stdio', 'redis');
  if (redis && stores.redis && stdioRedis) {
    note('Redis round trips');
    reports.roundTrips = await measureRoundTrips(redis, stores.redis, stdioRedis, plan.roundTripCalls);
  }
  const httpPostgres = serversOf('http', 'postgres');
  if (postgres && stores.postgres && httpPostgres) {
    // Only a cluster of this run's own has a statement log to read.
    if (!postgres.owned) note('Postgres round trips skipped: DATABASE_URL has no statement log to read');
    else {
      note('Postgres round trips');
      const calls = plan.roundTripCalls;
      reports.postgresRoundTrips = await measureStatements(postgres, stores.postgres, httpPostgres, calls);
    }
  }
  note('concurrency');
  // Stdio has no second client: one process serves one connection.
  const concurrent = pairs.filter((pair) => pair.transport !== 'stdio');
  reports.concurrency = await measureConcurrency(concurrent, plan.concurrency);
  if (plan.peers.rounds > 0) {
    note('beside other idempotency libraries');
    const [memory, onRedis] = await measurePeers(redis?.url, plan.peers);
    if (memory) reports.peersMemory = memory;
    if (onRedis) reports.peersRedis = onRedis;
  }
  await closeAll();
  note('SQLite against memory, over stdio');
  reports.sqlite = await measureSqlite(plan.sqlite, note);
  note("SQLite, the store's statements alone");
  reports.sqliteStatements = await measureSqliteStatements(plan.sqliteStatements);

  note(`memory: ${plan.memoryCalls.toLocaleString('en')} keyed calls`);
  reports.memory = await runChild('memory.ts', [plan.memoryCalls], ['--expose-gc']);
  note('scaling with stored records');
  const scaling = [plan.scaling.rounds, plan.scaling.batchCalls, ...plan.scaling.sizes];
  reports.scaling = await runChild('scaling.ts', scaling, ['--max-old-space-size=4096']);

  // One target spans two questions: the 100 KB fingerprint against a small call's stdio round trip.
  const Row = z.object({
    input: z.string(),
    transport: z.string(),
    variant: z.string(),
    medianUs: z.number(),
  });
  const rows = (report: Report) => z.array(Row.partial()).parse(report.figures);
  const fingerprint = rows(reports.guardAlone).find((row) => row.input?.startsWith('100 KB'))?.medianUs;
  const small = rows(reports.transports).find(
    (row) => row.transport === 'stdio' && row.variant === 'baseline',
  );
  const roundTrip = small?.medianUs;
  const checks = Object.values(reports).flatMap((report) => report.checks);
  if (fingerprint && roundTrip) {
    const target = 'fingerprint of 100 KB arguments well under (≤ 0.5 ×) a small call over stdio';
    const figure = `${fingerprint.toFixed(0)} µs = ${(fingerprint / roundTrip).toFixed(2)} × ${roundTrip.toFixed(0)} µs`;
    checks.push({ target, figure, met: fingerprint <= 0.5 * roundTrip });
  }
  const order = [
    'transports',
    'guardAlone',
    'otel',
    'roundTrips',
    'postgresRoundTrips',
    'sqlite',
    'sqliteStatements',
    'memory',
    'scaling',
    'concurrency',
    'peersMemory',
    'peersRedis',
  ];
  for (const report of order.flatMap((name) => reports[name] ?? [])) {
    say(`\n== ${report.title}\n${report.how}\n\n${report.table}`);
  }
  const targets = checks.map((c) => [c.target, c.figure, yesNo(c.met)]);
  const judged = values.quick ? "a quick run's figures, too rough to judge" : 'reported, not asserted';
  say(`\n== Targets: ${judged}\n\n${table('target | figure | met?', targets)}`);

  const durationSeconds = Number(((performance.now() - started) / 1000).toFixed(1));
  const loadAverageAtEnd = loadavg().map((n) => Number(n.toFixed(2)));
  const figures = Object.fromEntries(Object.entries(reports).map(([name, report]) => [name, report.figures]));
  const results = { ...machine, loadAverageAtEnd, durationSeconds, plan, ...figures, checks };
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, `${JSON.stringify(results, null, 2)}\n`);
  say(`\n${plan.mode} run took ${durationSeconds.toFixed(0)} s; figures in ${shownPath(out)}`);
}

/** `npm run bench -- peers`: the question beside other libraries alone, its figures in results/peers.json. */
async function peersAlone(out: string | undefined): Promise<void> {
  const date = new Date().toISOString();
  const loadAverageAtStart = loadavg().map((n) => Number(n.toFixed(2)));
  say('SEP-3182 request idempotency: the guard beside other idempotency libraries');
  say(`${cpus()[0]?.model ?? 'unknown'}, ${availableParallelism()} cores, Node ${process.version}, ${date}`);
  const redis = await startRedis();
  if (redis) closers.push(() => redis.stop());
  const reports = await measurePeers(redis?.url, FULL.peers);
  for (const report of reports) say(`\n== ${report.title}\n${report.how}\n\n${report.table}`);
  const loadAverageAtEnd = loadavg().map((n) => Number(n.toFixed(2)));
  const file = out ?? join(dirname(fileURLToPath(import.meta.url)), 'results', 'peers.json');
  const figures = reports.map((report) => report.figures);
  const results = {
    date,
    node: process.version,
    loadAverageAtStart,
    loadAverageAtEnd,
    plan: FULL.peers,
    figures,
  };
  await writeFile(file, `${JSON.stringify(results, null, 2)}\n`);
  say(`\nfigures in ${shownPath(file)}`);
}

/** A path inside the repository relative to its root, as the docs name it; any other, absolute. */
function shownPath(path: string): string {
  const inRepository = relative(join(dirname(fileURLToPath(import.meta.url)), '..', '..'), path);
  return inRepository.startsWith('..') || isAbsolute(inRepository) ? resolve(path) : inRepository;
}

main()
  .catch((error: unknown) => {
    // Stopping the servers on Ctrl-C fails whatever call was in flight: not news.
    if (interrupted) return;
    const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
    const wrong =
      error instanceof WrongAnswerError ? ' (a call took the wrong path: its figure is void)' : '';
    process.stderr.write(`\nbenchmark failed${wrong}.\n${message}\n`);
    process.exitCode = 1;
  })
  .finally(closeAll);
