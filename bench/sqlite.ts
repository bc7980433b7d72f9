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

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODERN_PROTOCOL_VERSION } from 'mcp-request-idempotency/client';
import {
  type Endpoint,
  makeVariants,
  openServer,
  type Server,
  SLOW_CHARGE_MS,
  type SqliteTarget,
  type VariantName,
} from './calls.js';
import { type Group, interleave, type Report, table, us, type Variant, yesNo } from './harness.js';

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
const TARGETS: Partial<Record<VariantName, number>> = { first: 1.1, replay: 1.02 };

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
