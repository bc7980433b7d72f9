// A server process on a SQLite file, for the tests of several processes sharing it: the guard on
// the SQLite store, and a charge tool writing the balance (SqliteLedger) in its record's
// transaction, driven over stdin and stdout instead of MCP, so a test can run many at once, stop
// a call at any phase, and kill the process there (SIGKILL, as a crash would).
//
// Usage: tsx test/support/sqlite-worker.ts FILE [BUSY_TIMEOUT_MS]
// Prints {"ready":PID} once the store is open. Then reads one JSON call per line, each run at
// once beside the others: {"id":1,"key":"…","amount":100,"pause":"claimed"|"written"|"recorded"}.
// For each it prints {"id":1,"phase":"…"} when it reaches its pause (and goes no further: the
// call hangs there until the process is killed), else {"id":1,"answer":{…}}: the charge's result,
// or the JSON-RPC error the guard answered, as a client would read them.

import { createInterface } from 'node:readline';
import { createToolCallGuard, type JsonObject } from 'mcp-request-idempotency';
import { SqliteIdempotencyStore } from 'mcp-request-idempotency/sqlite';
import { SqliteLedger } from '../../demo/hosting/ledgers/sqlite.js';

const [file, busyTimeoutMs] = process.argv.slice(2);
if (!file) throw new Error('usage: sqlite-worker.ts FILE [BUSY_TIMEOUT_MS]');

const store = await SqliteIdempotencyStore.open(file, {
  ...(busyTimeoutMs && { busyTimeoutMs: Number(busyTimeoutMs) }),
});
const ledger = await SqliteLedger.open(store);
const guard = createToolCallGuard({ store, providerKeyRetentionMs: 0, retentionMs: 300_000 });

type Pause = 'claimed' | 'written' | 'recorded';
interface Call {
  id: number;
  key: string;
  amount: number;
  pause?: Pause;
}

const say = (line: object) => process.stdout.write(`${JSON.stringify(line)}\n`);
const forever = () => new Promise<never>(() => {});

async function run({ id, key, amount, pause }: Call): Promise<void> {
  const reached = async (phase: Pause) => {
    if (pause !== phase) return;
    say({ id, phase });
    await forever();
  };
  const dispatch = async (): Promise<JsonObject> => {
    await reached('claimed');
    const balance = await ledger.charge(amount, { idempotencyKey: key });
    await reached('written');
    return { content: [{ type: 'text', text: `Charged ${amount}. New balance: ${balance}` }] };
  };
  let answer: object;
  try {
    answer = {
      result: await guard({ name: 'charge', arguments: { amount }, idempotencyKey: key }, {}, dispatch),
    };
  } catch (error) {
    const { code, message, data } = Object(error);
    answer = { error: { code, message, data } };
  }
  await reached('recorded');
  say({ id, answer });
}

createInterface({ input: process.stdin }).on('line', (line) => void run(JSON.parse(line)));
say({ ready: process.pid });
// The calls keep it running until the test ends it: stdin closing does not.
setInterval(() => {}, 60_000);
