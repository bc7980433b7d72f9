// --- What the SEP-3182 guard costs: `npm run bench` ---
//
//   npm run bench               the full run, a few minutes on a 2-core machine
//   npm run bench -- --quick    a smoke run (CI), well under a minute; its figures are rough
//
// Prints every table on stdout and writes the same figures, with the machine, the Node
// version and the date, to bench/results/latest.json, the reference the README quotes (a
// quick run writes to the temporary directory instead, so it never replaces it). Targets are reported, never asserted:
// the only failures are a wrong answer (a figure from the wrong path) or a broken setup.
// Every server and Redis it starts is stopped before it exits, on error and on Ctrl-C too.

import { mkdir, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { MemoryIdempotencyStore } from '../idempotency/index.js';
import { MemoryLedger } from '../ledger.js';
import { connectInProcess } from '../test/support/in-process.js';
import { runChild } from './child.js';
import { type ConcurrencyRow, runConcurrency } from './concurrency.js';
import {
  type EndpointPair,
  openPair,
  SLOW_CHARGE_MS,
  STORES,
  type StoreName,
  TRANSPORTS,
  type TransportName,
} from './endpoints.js';
import { LogLineResult } from './log-line.js';
import { type MatrixGroup, type MatrixRow, runMatrix } from './matrix.js';
import { MemoryResult } from './memory.js';
import { jsonBytes, orderArgumentsOfSize } from './payloads.js';
import { type PieceRow, runPieces } from './pieces.js';
import { type BenchRedis, CommandMonitor, openRedis, redisVersion } from './redis.js';
import {
  formatConcurrency,
  formatLargeArguments,
  formatMatrix,
  formatMemory,
  formatPieces,
  formatRoundTrips,
  formatScaling,
  formatTargets,
} from './report.js';
import { countRoundTrips, type RoundTripRow } from './round-trips.js';
import { ScalingResult } from './scaling.js';
import { checkTargets } from './targets.js';
import { AMOUNT, makeVariants, WrongAnswerError } from './variants.js';

const HERE = dirname(fileURLToPath(import.meta.url));

// --- How much of everything: the full run, and the quick smoke run ---

interface Plan {
  mode: 'full' | 'quick';
  matrix: {
    rounds: number;
    /**
     * Timed calls per variant per round. Over 20 rounds the medians repeat within a few percent
     * from run to run on a busy 2-core machine (in process, stdio), within about 5% over HTTP,
     * where a call takes 2 ms and its spread is wide; each row's round-to-round ratio spread
     * is in the JSON (`roundRatio`).
     */
    batchCalls: Record<TransportName, number>;
    warmupCalls: Record<TransportName, number>;
  };
  pieces: { rounds: number; batchMs: number };
  largeArguments: { rounds: number; batchCalls: Record<string, number> };
  roundTripCalls: number;
  memoryCalls: number;
  scaling: { rounds: number; batchCalls: number; sizes: number[] };
  concurrency: { rounds: number; phaseMs: number };
}

const FULL: Plan = {
  mode: 'full',
  matrix: {
    rounds: 20,
    batchCalls: { 'in-process': 1_000, stdio: 300, http: 60 },
    warmupCalls: { 'in-process': 2_000, stdio: 500, http: 100 },
  },
  pieces: { rounds: 30, batchMs: 5 },
  largeArguments: { rounds: 10, batchCalls: { small: 100, '1 KB': 100, '100 KB': 10 } },
  roundTripCalls: 200,
  memoryCalls: 1_000_000,
  scaling: { rounds: 10, batchCalls: 500, sizes: [1e3, 1e5, 1e6] },
  concurrency: { rounds: 3, phaseMs: 400 },
};

const QUICK: Plan = {
  mode: 'quick',
  matrix: {
    rounds: 3,
    batchCalls: { 'in-process': 200, stdio: 50, http: 10 },
    warmupCalls: { 'in-process': 200, stdio: 50, http: 10 },
  },
  pieces: { rounds: 5, batchMs: 2 },
  largeArguments: { rounds: 2, batchCalls: { small: 10, '1 KB': 10, '100 KB': 2 } },
  roundTripCalls: 20,
  memoryCalls: 150_000,
  scaling: { rounds: 2, batchCalls: 100, sizes: [1e3, 1e4, 1e5] },
  concurrency: { rounds: 1, phaseMs: 100 },
};

// --- Cleanup: whatever was started is stopped, however the run ends ---

const closers: Array<() => Promise<unknown>> = [];

async function closeAll(): Promise<void> {
  while (closers.length > 0)
    await closers
      .pop()?.()
      .catch(() => {});
}

let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true;
    process.stderr.write(`\n${signal}: stopping servers…\n`);
    void closeAll().finally(() => process.exit(130));
  });
}

function say(line = ''): void {
  process.stdout.write(`${line}\n`);
}

function note(line: string): void {
  process.stderr.write(`  … ${line}\n`);
}

function section(title: string, how: string): void {
  say();
  say(`== ${title}`);
  if (how) say(how);
  say();
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { quick: { type: 'boolean', default: false }, out: { type: 'string' } },
  });
  const plan = values.quick ? QUICK : FULL;
  const out =
    values.out ??
    (plan.mode === 'full'
      ? join(HERE, 'results', 'latest.json')
      : join(tmpdir(), 'sep3182-bench-quick.json'));
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
  say(
    `${machine.cpu}, ${machine.cores} cores, Node ${machine.node}, ${machine.date}; ${plan.mode} run (load average at start ${machine.loadAverageAtStart.join(' ')})`,
  );

  // --- The guard's pieces, before any server runs ---
  note('pieces');
  const pieces: PieceRow[] = await runPieces(plan.pieces, note);

  // --- Servers: every transport with every store, a fast and a slow one each ---
  const redisOpened = await openRedis();
  let redis: BenchRedis | undefined;
  let redisSkipped: string | undefined;
  let redisServerVersion = 'unknown';
  if (redisOpened.ok) {
    redis = redisOpened.redis;
    closers.push(() => redisOpened.redis.close());
    redisServerVersion = await redisVersion(redis.admin).catch(() => 'unknown');
  } else {
    redisSkipped = redisOpened.reason;
  }
  const stores = STORES.filter((store) => store === 'memory' || redis);
  note(`starting servers (${TRANSPORTS.length * stores.length * 2})`);
  const pairs: EndpointPair[] = await Promise.all(
    TRANSPORTS.flatMap((transport) => stores.map((store) => openPair(transport, store, redis?.target))),
  );
  for (const pair of pairs) closers.push(() => pair.close());
  const pairOf = (transport: TransportName, store: StoreName) =>
    pairs.find((pair) => pair.transport === transport && pair.store === store);

  // --- The matrix: five variants × three transports × two stores ---
  const groups: MatrixGroup[] = pairs.map((pair) => ({
    transport: pair.transport,
    store: pair.store,
    argumentsLabel: 'small',
    variants: makeVariants(pair.fast, pair.slow, `${pair.transport}, ${pair.store} store`),
    endpoints: [pair.fast, pair.slow],
    batchCalls: plan.matrix.batchCalls[pair.transport],
    warmupCalls: plan.matrix.warmupCalls[pair.transport],
  }));
  note('matrix');
  const matrix: MatrixRow[] = await runMatrix(groups, plan.matrix.rounds, note);

  // --- Larger arguments over stdio: the fingerprint's share of a real round trip ---
  const stdioMemory = pairOf('stdio', 'memory');
  if (!stdioMemory) throw new Error('no stdio server');
  const sizes = [
    { label: 'small', args: { amount: AMOUNT } },
    { label: '1 KB', args: orderArgumentsOfSize(1_024) },
    { label: '100 KB', args: orderArgumentsOfSize(100 * 1_024) },
  ];
  note('larger arguments over stdio');
  const largeArguments = await runMatrix(
    sizes.map((size) => ({
      transport: 'stdio',
      store: 'memory',
      argumentsLabel: `${size.label} (${jsonBytes(size.args)} B)`,
      variants: makeVariants(stdioMemory.fast, stdioMemory.slow, `stdio, ${size.label}`, size.args).filter(
        (variant) => variant.name === 'baseline' || variant.name === 'first',
      ),
      endpoints: [stdioMemory.fast],
      batchCalls: plan.largeArguments.batchCalls[size.label] ?? 1,
      warmupCalls: plan.largeArguments.batchCalls[size.label] ?? 1,
    })),
    plan.largeArguments.rounds,
    () => {},
  );

  // --- Redis round trips per decision, through the stdio server ---
  let roundTrips: RoundTripRow[] | undefined;
  const stdioRedis = pairOf('stdio', 'redis');
  if (redis && stdioRedis) {
    note('Redis round trips');
    const monitor = await CommandMonitor.start(redis.target.url, redis.admin, redis.target.prefix);
    try {
      roundTrips = await countRoundTrips(stdioRedis, redis.target, monitor, plan.roundTripCalls);
    } finally {
      monitor.stop();
    }
  }

  // --- Throughput with concurrent clients: in process (one thread), and HTTP ---
  note('concurrency');
  const concurrency: ConcurrencyRow[] = [];
  const sharedStore = new MemoryIdempotencyStore({ maxRecords: 10_000_000, maxRecordsPerScope: 10_000_000 });
  const sharedLedger = new MemoryLedger();
  concurrency.push(
    ...(await runConcurrency(
      'in-process',
      'memory',
      async () => connectInProcess({ store: sharedStore, ledger: sharedLedger }),
      plan.concurrency,
    )),
  );
  for (const pair of pairs.filter((p) => p.transport === 'http')) {
    const connect = pair.fast.connectAnother;
    if (connect) concurrency.push(...(await runConcurrency('http', pair.store, connect, plan.concurrency)));
  }
  await closeAll();

  // --- In processes of their own: memory, and scaling with stored records ---
  note(`memory: ${plan.memoryCalls.toLocaleString('en')} keyed calls`);
  const memory = await runChild('memory.ts', [String(plan.memoryCalls)], ['--expose-gc'], MemoryResult, note);
  note('scaling with stored records');
  const scaling = await runChild(
    'scaling.ts',
    [String(plan.scaling.rounds), String(plan.scaling.batchCalls), ...plan.scaling.sizes.map(String)],
    ['--max-old-space-size=4096'],
    ScalingResult,
    note,
  );

  note("the demo server's decision log line");
  const logLine = await runChild(
    'log-line.ts',
    [String(plan.pieces.rounds), '1000'],
    [],
    LogLineResult,
    note,
  );
  pieces.push(
    {
      piece: 'decision log line (server.ts)',
      input: `${Math.round(logLine.lineBytes)} B JSON line, built only`,
      batchCalls: logLine.batchCalls,
      samples: logLine.batches,
      medianUs: logLine.builtMedianUs,
      p99Us: logLine.builtP99Us,
      callsPerSecond: 1e6 / logLine.builtMedianUs,
    },
    {
      piece: 'decision log line (server.ts)',
      input: 'built and written to stderr (a pipe)',
      batchCalls: logLine.batchCalls,
      samples: logLine.batches,
      medianUs: logLine.writtenMedianUs,
      p99Us: logLine.writtenP99Us,
      callsPerSecond: 1e6 / logLine.writtenMedianUs,
    },
  );

  // --- The report ---
  const iterations = {
    matrix: {
      rounds: plan.matrix.rounds,
      callsPerVariantPerRound: plan.matrix.batchCalls,
      samplesPerVariant: Object.fromEntries(
        TRANSPORTS.map((t) => [t, plan.matrix.rounds * plan.matrix.batchCalls[t]]),
      ),
      warmupCallsPerVariant: plan.matrix.warmupCalls,
    },
    pieces: plan.pieces,
    largeArguments: plan.largeArguments,
    roundTripCallsPerDecision: plan.roundTripCalls,
    memoryCalls: plan.memoryCalls,
    scaling: plan.scaling,
    concurrency: plan.concurrency,
  };
  const targets = checkTargets({ matrix, pieces, roundTrips, memory, scaling });
  const samples = iterations.matrix.samplesPerVariant;
  section(
    'Per-call latency of tools/call, by transport and store',
    [
      `${plan.matrix.rounds} interleaved rounds; per round and variant ${describeCounts(plan.matrix.batchCalls)} timed calls`,
      `(${describeCounts(samples)} samples per variant), after ${describeCounts(plan.matrix.warmupCalls)} warm-up calls.`,
      'One client, one call at a time; small arguments ({"amount":1}). ratio = median / the unkeyed median on the same',
      `transport and store. In progress: the original runs on an identical server whose charge takes ${SLOW_CHARGE_MS} ms.`,
      'Latency targets apply to the memory store; the Redis store is held to round trips (below).',
    ].join('\n'),
  );
  say(formatMatrix(matrix, redisSkipped));
  section(
    "The guard's pieces, on their own",
    `Interleaved batches (${plan.pieces.rounds} per piece, ~${plan.pieces.batchMs} ms each); a sample is a batch's time / its calls.\n` +
      'Guard alone: the real guard in front of a no-op tool, no transport and no SDK parsing.\n' +
      "Decision log line: server.ts's logDecision, which a stdio or HTTP server runs once per keyed call\n" +
      "(in a process of its own whose stderr is a pipe, as a server's is).",
  );
  say(formatPieces(pieces));
  section(
    'Larger arguments over stdio (memory store)',
    `${plan.largeArguments.rounds} interleaved rounds; calls per round: ${describeCounts(plan.largeArguments.batchCalls)}.`,
  );
  say(formatLargeArguments(largeArguments));
  section(
    'Redis round trips per decision',
    redis && roundTrips
      ? `${plan.roundTripCalls} calls per decision through a stdio server with --store redis (${redis.source}, Redis ${redisServerVersion}),\n` +
          "counted on the Redis side with MONITOR. The ledger's INCRBY is the tool's, shown apart.\n" +
          'Commands run inside the EVAL script cost no round trip of their own.'
      : (redisSkipped ?? 'skipped'),
  );
  if (roundTrips) say(formatRoundTrips(roundTrips));
  section(
    `Memory after ${memory.calls.toLocaleString('en')} distinct keyed calls (default cap ${memory.cap.toLocaleString('en')}, retention 300 s)`,
    'The demo server, its guard and its McpServer dispatch, called directly with raw tools/call requests\n' +
      '(in a process of its own, figures after global.gc()).',
  );
  say(formatMemory(memory));
  section(
    'Scaling: keyed first execution with records already stored (in process, memory store)',
    `Stores filled through claim and complete (${scaling.fillSeconds.toFixed(1)} s), one process, ${plan.scaling.rounds} interleaved rounds of ${plan.scaling.batchCalls} calls.`,
  );
  say(formatScaling(scaling));
  section(
    'Throughput with concurrent clients',
    `Each client calls one at a time, in ${plan.concurrency.rounds} alternating ${plan.concurrency.phaseMs} ms phases per variant; ratio = keyed / unkeyed calls/s.\n` +
      'In process: every client has its own McpServer sharing one store and ledger. HTTP: clients of one server process.',
  );
  say(formatConcurrency(concurrency));
  section('Targets: reported, not asserted', '');
  say(formatTargets(targets));

  const durationSeconds = (performance.now() - started) / 1000;
  const results = {
    ...machine,
    loadAverageAtEnd: loadavg().map((n) => Number(n.toFixed(2))),
    mode: plan.mode,
    durationSeconds: Number(durationSeconds.toFixed(1)),
    iterations,
    redis: redis ? { source: redis.source, version: redisServerVersion } : { skipped: redisSkipped },
    rows: matrix,
    pieces,
    largeArguments,
    roundTrips: roundTrips ?? { skipped: redisSkipped },
    memory,
    scaling,
    concurrency,
    targets,
  };
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, `${JSON.stringify(results, null, 2)}\n`);
  say();
  say(
    `${plan.mode} run took ${durationSeconds.toFixed(0)} s; figures written to ${relative(process.cwd(), out)}`,
  );
}

function describeCounts(counts: Record<string, number>): string {
  return Object.entries(counts)
    .map(([name, n]) => `${name} ${n.toLocaleString('en')}`)
    .join(', ');
}

main()
  .catch(async (error: unknown) => {
    // Stopping the servers on Ctrl-C fails whatever call was in flight: not news.
    if (interrupted) return;
    const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
    process.stderr.write(
      error instanceof WrongAnswerError
        ? `\nbenchmark aborted: a call took the wrong path, so its figure would be meaningless.\n${message}\n`
        : `\nbenchmark failed: ${message}\n`,
    );
    process.exitCode = 1;
  })
  .finally(closeAll);
