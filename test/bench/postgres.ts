// --- How many Postgres round trips does each decision take? Counted on the Postgres side ---
//
// For each decision, N calls through a real HTTP server with `--store postgres`, and the
// statements the private cluster logged meanwhile from the server's sessions (log_statement = all,
// read by test/support/postgres.ts's `statementsDuring` by application name; one statement, one
// round trip, but for a transaction's COMMIT, which goes out with the record before its answer). The server's Postgres ledger shares the store's pool, so its sessions carry the
// same application name: its statements are told apart by text instead. The ledger's name its own
// tables; BEGIN and COMMIT are the transaction it asks for, so that a keyed charge commits with its
// record or not at all; anything else is counted as the store's, so a statement misread cannot
// flatter the target.

import { DEFAULT_POSTGRES_APPLICATION_NAME } from 'mcp-request-idempotency/postgres';
import type { TestPostgres } from '../../demo/processes/postgres-server.js';
import {
  countPerDecision,
  type PostgresTarget,
  perCall,
  postgresPrefix,
  ROUND_TRIP_TARGETS,
  type ServerPair,
  VARIANT_LABEL,
} from './calls.js';
import { type Report, table, yesNo } from './harness.js';

type Sender = 'store' | 'transaction' | 'ledger';

/** Who sent a statement, and a short name for it (`claim`, `UPDATE`, `BEGIN`, `charge`). */
function senderOf(statement: string, ledgerTables: string): { sender: Sender; name: string } {
  const [first = ''] = statement.trimStart().split(/\s/, 1);
  if (/^(BEGIN|COMMIT|ROLLBACK)$/i.test(first)) return { sender: 'transaction', name: first };
  if (statement.includes(ledgerTables)) return { sender: 'ledger', name: 'charge' };
  const name = ['claim', 'settle'].find((fn) => statement.includes(`${fn}(`)) ?? first;
  return { sender: 'store', name };
}

export async function measureStatements(
  postgres: TestPostgres,
  tables: PostgresTarget,
  servers: ServerPair,
  calls: number,
): Promise<Report> {
  const counted = await countPerDecision(servers, calls, async (name, run) => {
    const speed = name === 'inProgress' ? 'slow' : 'fast';
    const ledgerTables = `${postgresPrefix(tables, servers.transport, speed)}ledger_`;
    const { statements } = await postgres.statementsDuring(DEFAULT_POSTGRES_APPLICATION_NAME, run);
    return statements.map((statement) => senderOf(statement, ledgerTables));
  });
  const rows = counted.map(({ variant, counted: sent }) => {
    const by = (sender: Sender) => sent.filter((s) => s.sender === sender).length / calls;
    const target = ROUND_TRIP_TARGETS[variant];
    const roundTrips = by('store');
    // COMMIT goes out behind the record without waiting for its answer: not a round trip of its own.
    const transaction =
      sent.filter((s) => s.sender === 'transaction' && !/^COMMIT$/i.test(s.name)).length / calls;
    const ledger = by('ledger');
    const names = sent.map((s) => s.name);
    return { variant, calls, roundTrips, transaction, ledger, sent: perCall(names, calls), target };
  });
  const met = (row: (typeof rows)[number]) => row.roundTrips <= row.target;
  return {
    title: 'Postgres round trips per decision',
    how:
      `${calls} calls per decision through an HTTP server with --store postgres and its Postgres ledger, ` +
      'counted on the Postgres side from its statement log (log_statement = all).\n' +
      "Store: the store's own statements, the target. Transaction: the round trips of BEGIN and COMMIT around the\n" +
      "ledger's write and the record, which commit together or not at all: what that atomicity costs (COMMIT goes out\n" +
      'with the record, so only BEGIN counts). Ledger: the charge itself, which an unkeyed call sends too.\n' +
      'In progress is answered by the slow server, whose ledger is in process.',
    table: table(
      'decision | store | target | transaction | ledger | sent per call',
      rows.map((row) => [
        ...[
          VARIANT_LABEL[row.variant] ?? '',
          row.roundTrips.toFixed(2),
          `≤ ${row.target} ${yesNo(met(row))}`,
        ],
        ...[row.transaction.toFixed(2), row.ledger.toFixed(2), row.sent],
      ]),
    ),
    checks: rows.map((row) => ({
      target: `Postgres store, ${VARIANT_LABEL[row.variant]}: ≤ ${row.target} round trip${row.target === 1 ? '' : 's'}`,
      figure: row.roundTrips.toFixed(2),
      met: met(row),
    })),
    figures: rows.map((row) => ({ ...row, met: met(row) })),
  };
}
