// --- What does keeping the records in a SQLite file cost a stdio call, against memory? ---
//
// The SQLite store is for the stdio server a desktop host starts, so that is where it is
// measured: the same four decisions (first execution, replay, conflict, in progress) over stdio
// on the memory store and on a SQLite file, interleaved in the same rounds (harness.ts), each
// ratio a median over the memory store's median for the same decision. The file at the
// durability the store chooses (synchronous=NORMAL: a commit survives a process crash) is held
// to the targets; at FULL (a commit survives a power loss: an fsync per commit) its figures are
// beside it. One more server keeps the balance in the file too, so a keyed charge commits with
// its record: what that atomicity adds to a first execution.
//
// Under it, in one process, the store's statements alone: what the second commit of a first
// execution costs (the claim and the record in two write transactions, as the store runs them,
// against one BEGIN IMMEDIATE held from the claim to the record across an instant tool), and what
// the replays a process remembers save against reading the record from the file.

import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import { SqliteIdempotencyStore } from 'mcp-request-idempotency/sqlite';
import { SqliteConnection } from '../../packages/idempotency/stores/sqlite/driver.js';
import { configure, migrate, type SqliteSynchronous } from '../../packages/idempotency/stores/sqlite/file.js';
import { monotonicMs } from '../../packages/idempotency/stores/sqlite/liveness.js';
import { SQL } from '../../packages/idempotency/stores/sqlite/sql.js';
import {
  type Endpoint,
  makeVariants,
  openServer,
  type Server,
  SLOW_CHARGE_MS,
  type SqliteTarget,
  type VariantName,
} from './calls.js';
import {
  answerIfMain,
  type Group,
  interleave,
  quantile,
  type Report,
  rotate,
  table,
  us,
  type Variant,
  yesNo,
} from './harness.js';

export interface SqlitePlan {
  rounds: number;
  warmupRounds: number;
  /** Calls per variant per round. */
  batchCalls: number;
}

/** The four ways a store can be set up here, each a pair of servers (an instant and a slow charge). */
const SETUPS = [
  { name: 'memory', label: 'memory' },
  { name: 'normal', label: 'SQLite, synchronous=NORMAL (the default)' },
  { name: 'full', label: 'SQLite, synchronous=FULL' },
  { name: 'ledger', label: 'SQLite NORMAL, the charge in the record’s transaction' },
] as const;
type SetupName = (typeof SETUPS)[number]['name'];

/** The decisions compared, and which setups answer each (only a first execution writes the ledger). */
const DECISIONS: ReadonlyArray<{ variant: VariantName; setups: readonly SetupName[] }> = [
  { variant: 'first', setups: ['memory', 'normal', 'full', 'ledger'] },
  { variant: 'replay', setups: ['memory', 'normal', 'full'] },
  { variant: 'conflict', setups: ['memory', 'normal', 'full'] },
  { variant: 'inProgress', setups: ['memory', 'normal', 'full'] },
];

/** Ratios to the memory store's same decision, at the default durability. */
const TARGETS: Partial<Record<VariantName, number>> = { first: 1.6, replay: 1.02 };

const DECISION_LABEL: Record<string, string> = {
  first: 'keyed first execution',
  replay: 'keyed replay',
  conflict: 'conflict answer',
  inProgress: 'in-progress answer',
};

export async function measureSqlite(plan: SqlitePlan, progress: (line: string) => void): Promise<Report> {
  const dir = await mkdtemp(join(tmpdir(), 'sep3182-bench-sqlite-'));
  const opened: Server[] = [];
  try {
    const target = (synchronous: SqliteTarget['synchronous'], ledger: SqliteTarget['ledger']) => ({
      sqlite: { dir, synchronous, ledger },
    });
    const open = async (setup: SetupName): Promise<{ fast: Endpoint; slow: Endpoint }> => {
      const store = setup === 'memory' ? 'memory' : 'sqlite';
      const stores = target(setup === 'full' ? 'full' : 'normal', setup === 'ledger' ? 'sqlite' : 'memory');
      const servers = await Promise.all([
        openServer('stdio', store, 'fast', stores),
        openServer('stdio', store, 'slow', stores),
      ]);
      opened.push(...servers);
      const [fast, slow] = await Promise.all(
        servers.map((server) => server.connect(MODERN_PROTOCOL_VERSION)),
      );
      if (!fast || !slow) throw new Error('no server');
      return { fast, slow };
    };
    const variants = new Map<SetupName, Record<VariantName, Variant>>();
    const endpoints: Endpoint[] = [];
    for (const { name, label } of SETUPS) {
      const { fast, slow } = await open(name);
      endpoints.push(fast, slow);
      variants.set(name, makeVariants(fast, slow, `stdio, ${label}`));
    }
    const afterRound = async () => void (await Promise.all(endpoints.map((endpoint) => endpoint.refresh())));
    const groups: Array<Group<{ decision: VariantName; setup: SetupName }>> = [];
    for (const { variant, setups } of DECISIONS) {
      for (const setup of setups) {
        const chosen = variants.get(setup)?.[variant];
        if (!chosen) throw new Error(`no ${variant} on ${setup}`);
        // One group per decision, its setups side by side; the memory store's is the baseline.
        const group = groups.find((g) => g.meta.decision === variant);
        if (group) group.variants.push({ ...chosen, name: setup });
        else
          groups.push({
            meta: { decision: variant, setup },
            variants: [{ ...chosen, name: setup }],
            batchCalls: plan.batchCalls,
            afterRound,
          });
      }
    }
    const rows = (await interleave(groups, plan, progress)).map((row) => ({
      decision: row.decision,
      setup: row.variant,
      medianUs: row.medianUs,
      p99Us: row.p99Us,
      ratio: row.ratio,
      target: row.variant === 'normal' ? TARGETS[row.decision] : undefined,
    }));
    const label = (setup: string) => SETUPS.find((s) => s.name === setup)?.label ?? setup;
    return {
      title: 'SQLite against memory, over stdio: what keeping the records in a file costs a call',
      how:
        `${plan.rounds} interleaved rounds (after ${plan.warmupRounds} of warm-up) of ${plan.batchCalls} calls per variant; ` +
        'one client per server, one call at a time.\n' +
        "ratio = median / the memory store's median for the same decision, measured in the same rounds.\n" +
        'NORMAL: a commit survives a process crash (the store’s default); FULL: a power loss too (an fsync per commit).\n' +
        `In progress: the original runs on an identical server whose charge takes ${SLOW_CHARGE_MS} ms (its balance in memory).`,
      table: table(
        'decision | store | median µs | p99 µs | × memory | target',
        rows.map((row) => [
          DECISION_LABEL[row.decision] ?? row.decision,
          label(row.setup),
          us(row.medianUs),
          us(row.p99Us),
          row.ratio.toFixed(3),
          row.target === undefined ? '' : `≤ ${row.target.toFixed(2)} ${yesNo(row.ratio <= row.target)}`,
        ]),
      ),
      checks: rows.flatMap((row) =>
        row.target === undefined
          ? []
          : [
              {
                target: `stdio, SQLite (NORMAL), ${DECISION_LABEL[row.decision]} ≤ ${row.target} × memory's`,
                figure: `${row.ratio.toFixed(3)} × (${row.medianUs.toFixed(1)} µs)`,
                met: row.ratio <= row.target,
              },
            ],
      ),
      figures: rows,
    };
  } finally {
    await Promise.allSettled(opened.map((server) => server.close()));
    await rm(dir, { recursive: true, force: true });
  }
}

// --- The store's statements alone: one commit or two, a replay from memory or from the file ---

export interface StatementsPlan {
  rounds: number;
  /** First executions (or replays) per variant per round. */
  calls: number;
}

/** A first execution's statements on `db`, as the store runs them: in two write transactions, or held in one. */
function firstExecution(db: SqliteConnection, commits: 1 | 2): void {
  const scope = 'bench';
  const key = randomUUID();
  const token = randomUUID();
  const now = Date.now();
  const monotonic = monotonicMs();
  const mine = [scope, key, token, now, monotonic] as const;
  db.run('BEGIN IMMEDIATE');
  db.run(
    SQL.claim,
    scope,
    key,
    'fingerprint',
    now + 120_000,
    token,
    process.pid,
    '1',
    'bench',
    monotonic === null ? null : monotonic + 120_000,
  );
  db.run(SQL.count, scope, 1, 0, now + 120_000);
  if (commits === 2) {
    db.run('COMMIT');
    db.run('BEGIN IMMEDIATE');
  }
  // The tool: instant. Then the record.
  const json = '{"result":{"content":[{"type":"text","text":"Charged 100. New balance: 100"}]}}';
  db.get(SQL.mine, ...mine);
  db.run(SQL.settle, 'completed', json, json.length, now + 86_400_000, ...mine);
  db.run(SQL.count, scope, 0, json.length, now + 86_400_000);
  db.run('COMMIT');
}

/** µs of each of `calls` calls of `run`. */
function samplesUs(calls: number, run: () => unknown): number[] {
  const samples: number[] = [];
  for (let n = 0; n < calls; n++) {
    const start = performance.now();
    run();
    samples.push((performance.now() - start) * 1_000);
  }
  return samples;
}

export async function measureStatements(plan: StatementsPlan): Promise<Report> {
  const dir = await mkdtemp(join(tmpdir(), 'sep3182-bench-sqlite-statements-'));
  const closers: Array<() => unknown> = [];
  try {
    const connection = (synchronous: SqliteSynchronous) => {
      const db = SqliteConnection.open(join(dir, `${synchronous}.sqlite`));
      closers.push(() => db.close());
      configure(db, { synchronous });
      migrate(db);
      return db;
    };
    const normal = connection('normal');
    const full = connection('full');
    const store = await SqliteIdempotencyStore.open(join(dir, 'replays.sqlite'));
    closers.push(() => store.close());
    const id = { scope: 'bench', idempotencyKey: 'replayed' };
    const claim = await store.claim(id, 'fingerprint', 120_000);
    if (claim.state !== 'claimed') throw new Error(`the replayed key was ${claim.state}`);
    await store.complete(claim.ticket, { result: { content: [] } }, 86_400_000);
    const reader = SqliteConnection.open(join(dir, 'replays.sqlite'));
    closers.push(() => reader.close());

    const variants: Array<{ name: string; label: string; run: () => unknown }> = [
      // A first execution at each durability, its two commits against the one held across the tool.
      ...[
        { level: 'normal', db: normal },
        { level: 'full', db: full },
      ].flatMap(({ level, db }) => [
        {
          name: `two-${level}`,
          label: `first execution, two commits (the store), ${level.toUpperCase()}`,
          run: () => firstExecution(db, 2),
        },
        {
          name: `one-${level}`,
          label: `first execution, one commit held across the tool, ${level.toUpperCase()}`,
          run: () => firstExecution(db, 1),
        },
      ]),
      // The store's claim of a completed key it knows, against the read it saves (the same row
      // read on a connection to the file, its response parsed).
      {
        name: 'replay-memory',
        label: 'replay a process remembers (the store)',
        run: () => store.claim(id, 'fingerprint', 120_000),
      },
      {
        name: 'replay-file',
        label: 'replay read from the file',
        run: () => JSON.parse(String(reader.get(SQL.find, id.scope, id.idempotencyKey)?.response)),
      },
    ];
    const samples = new Map(variants.map((variant) => [variant.name, [] as number[]]));
    for (let round = 0; round < plan.rounds; round++)
      for (const variant of rotate(variants, round))
        samples.get(variant.name)?.push(...samplesUs(plan.calls, variant.run));
    const rows = variants.map(({ name, label }) => {
      const all = samples.get(name) ?? [];
      return { name, label, medianUs: quantile(all, 0.5), p99Us: quantile(all, 0.99), samples: all.length };
    });
    const median = (name: string) => rows.find((row) => row.name === name)?.medianUs ?? Number.NaN;
    return {
      title:
        "SQLite, the store's statements alone: one commit or two for a first execution, a replay from memory or the file",
      how:
        `${plan.rounds} rounds of ${plan.calls} calls per variant, in one process, variants rotated each round; µs per call.\n` +
        "Two commits: the claim, then the record, each its own BEGIN IMMEDIATE … COMMIT (the store's way); one commit: BEGIN IMMEDIATE held from the claim to the record across an instant tool.\n" +
        `The second commit costs ${us(median('two-normal') - median('one-normal'))} µs at NORMAL, ${us(median('two-full') - median('one-full'))} µs at FULL; remembering a replay saves ${us(median('replay-file') - median('replay-memory'))} µs of a read.`,
      table: table(
        'statements | median µs | p99 µs | calls',
        rows.map((row) => [row.label, us(row.medianUs), us(row.p99Us), String(row.samples)]),
      ),
      checks: [],
      figures: rows,
    };
  } finally {
    for (const close of closers.reverse()) await close();
    await rm(dir, { recursive: true, force: true });
  }
}

// `tsx test/bench/sqlite.ts [ROUNDS CALLS]`: the statements alone, as one report.
await answerIfMain(import.meta.url, ([rounds = 10, calls = 1_000]) => measureStatements({ rounds, calls }));
