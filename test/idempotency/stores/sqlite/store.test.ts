// The SQLite store on a real file: what only a file shared by processes can get wrong. The store
// contract every store keeps, and a tool's writes in its record's transaction, are
// test/idempotency/stores/contract.test.ts; here, processes racing on one file (each key executed once, counted on
// the ledger in the same file), a process SIGKILLed at each phase of a call, a dead holder's key taken
// at once, records replayed byte for byte after a restart, statements that would end a record's
// transaction under it, and failing closed, never executing twice, on a file that is locked,
// read-only, deleted, full, damaged, or of another schema.

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import {
  createToolCallGuard,
  IdempotencyErrorType,
  idempotencyErrorOf,
  type JsonObject,
  type RecordId,
  StoreUnavailableError,
} from 'mcp-request-idempotency';
import { SqliteIdempotencyStore, type SqliteStoreOptions } from 'mcp-request-idempotency/sqlite';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { SqliteLedger } from '../../../../demo/hosting/ledgers/sqlite.js';
import { START_TIMEOUT_MS, waitUntil } from '../../../../demo/processes/bounds.js';
import { ROOT } from '../../../../demo/processes/launch.js';
import { CHARGE_LIMIT, declineMessage } from '../../../../ledger.js';
import {
  claimTicket,
  ERROR,
  FINGERPRINT,
  LEASE_MS,
  newId,
  OTHER_FINGERPRINT,
  RESULT,
  RETENTION_MS,
  replayOf,
  SHORT_MS,
} from '../../../support/store-fixtures.js';

const dir = mkdtempSync(join(tmpdir(), 'sep3182-sqlite-store-'));
/** A new file for each test: no test sees another's records. */
const newFile = () => join(dir, `${randomUUID()}.sqlite`);

const stores: SqliteIdempotencyStore[] = [];
const children: ChildProcess[] = [];

async function openStore(file: string, options: SqliteStoreOptions = {}): Promise<SqliteIdempotencyStore> {
  const store = await SqliteIdempotencyStore.open(file, options);
  stores.push(store);
  return store;
}

afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

// --- Server processes on the file (test/support/sqlite-worker.ts) ---

type Pause = 'claimed' | 'written' | 'recorded';
type Answer = { result: JsonObject } | { error: { code: number; message: string; data?: unknown } };

/** A line the worker prints. */
interface WorkerLine {
  ready?: number;
  id?: number;
  phase?: Pause;
  answer?: Answer;
}

interface Worker {
  pid: number;
  /** Runs a keyed charge; resolves with its answer, or once it reaches `pause` (then it hangs there). */
  call(key: string, amount?: number, pause?: Pause): Promise<Answer | { phase: Pause }>;
  /** SIGKILL, as a crash would; resolves once the process is gone. */
  kill(): Promise<void>;
}

const WORKER = join(ROOT, 'test', 'support', 'sqlite-worker.ts');

async function startWorker(file: string, busyTimeoutMs?: number): Promise<Worker> {
  const args = ['--import', 'tsx', WORKER, file, ...(busyTimeoutMs ? [String(busyTimeoutMs)] : [])];
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  const waiting = new Map<number, (line: WorkerLine) => void>();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const ready = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the worker did not start')), START_TIMEOUT_MS);
    void exited.then(() => reject(new Error('the worker exited')));
    if (!child.stdout) throw new Error('no stdout');
    createInterface({ input: child.stdout }).on('line', (text) => {
      const line: WorkerLine = JSON.parse(text);
      if (line.ready !== undefined) {
        clearTimeout(timer);
        resolve(line.ready);
      } else waiting.get(Number(line.id))?.(line);
    });
  });
  let ids = 0;
  return {
    pid: await ready,
    call: (key: string, amount = 100, pause?: Pause) => {
      const id = ++ids;
      const answered = new Promise<Answer | { phase: Pause }>((resolve, reject) => {
        waiting.set(id, ({ phase, answer }) => {
          if (phase) resolve({ phase });
          else if (answer) resolve(answer);
          else reject(new Error(`the worker answered call ${id} with nothing`));
        });
      });
      child.stdin?.write(`${JSON.stringify({ id, key, amount, pause })}\n`);
      return answered;
    },
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

const charged = (amount: number, balance: number) => ({
  result: { content: [{ type: 'text', text: `Charged ${amount}. New balance: ${balance}` }] },
});
const errorType = (answer: Answer | { phase: Pause }) =>
  'error' in answer ? idempotencyErrorOf(answer.error)?.type : undefined;

/** The ledger's balance and the charges it holds per key, read from the file. */
async function ledgerOf(file: string): Promise<{ balance: number; entries: Map<string, number> }> {
  const store = await openStore(file);
  const ledger = await SqliteLedger.open(store);
  const rows = await store.transaction((db) =>
    db.all(
      'SELECT idempotency_key AS key, count(*) AS n FROM sep3182_ledger_entries GROUP BY idempotency_key',
    ),
  );
  return {
    balance: await ledger.balance(),
    entries: new Map(rows.map((row) => [String(row.key), Number(row.n)])),
  };
}

describe('several processes on one file', () => {
  it(
    'executes each key once when three processes race on the same keys, and the ledger counts each once',
    async () => {
      const file = newFile();
      const processes = await Promise.all([startWorker(file), startWorker(file), startWorker(file)]);
      const keys = Array.from({ length: 15 }, () => randomUUID());

      // Every process sends every key, all at once: 45 calls for 15 keys.
      const answers = await Promise.all(
        processes.flatMap((worker) => keys.map(async (key) => ({ key, answer: await worker.call(key, 1) }))),
      );

      const ledger = await ledgerOf(file);
      expect(ledger.balance).toBe(keys.length);
      expect([...ledger.entries.values()]).toStrictEqual(keys.map(() => 1));
      for (const key of keys) {
        const mine = answers.filter((a) => a.key === key).map((a) => a.answer);
        const results = mine.filter((answer) => 'result' in answer);
        // One execution, and every other answer is its replay or "in progress".
        expect(new Set(results.map((r) => JSON.stringify(r))).size, key).toBe(1);
        expect(mine.filter((a) => !('result' in a)).map(errorType)).toStrictEqual(
          Array(mine.length - results.length).fill(IdempotencyErrorType.inProgress),
        );
      }
      // Done, every process replays every key's one answer.
      const replays = await Promise.all(processes.map((worker) => worker.call(keys[0] ?? '', 1)));
      expect(new Set(replays.map((r) => JSON.stringify(r))).size).toBe(1);
      expect(replays[0]).toMatchObject({ result: { content: [{ type: 'text' }] } });
    },
    4 * START_TIMEOUT_MS,
  );

  it(
    "answers another process's duplicate in progress at once, even while the original holds the file's write lock",
    async () => {
      const file = newFile();
      const [holding, other] = await Promise.all([startWorker(file), startWorker(file, 300)]);
      const key = randomUUID();
      expect(await holding.call(key, 100, 'written')).toStrictEqual({ phase: 'written' });

      // A duplicate only reads: no writer blocks it.
      expect(errorType(await other.call(key))).toBe(IdempotencyErrorType.inProgress);
      // A new key must write, and waits for the lock: past its bound (300 ms here), it fails
      // closed, nothing executed, rather than wait on.
      const fresh = randomUUID();
      const refused = await other.call(fresh);
      expect(errorType(refused)).toBe(IdempotencyErrorType.storeUnavailable);

      await holding.kill();
      expect(await other.call(fresh)).toStrictEqual(charged(100, 100));
      expect(await other.call(key)).toStrictEqual(charged(100, 200));
      expect((await ledgerOf(file)).entries).toStrictEqual(
        new Map([
          [fresh, 1],
          [key, 1],
        ]),
      );
    },
    3 * START_TIMEOUT_MS,
  );

  it(
    "replays a declined charge to its key in another process, numbers another key's decline next, and charges nothing",
    async () => {
      const file = newFile();
      const [one, two] = await Promise.all([startWorker(file), startWorker(file)]);
      const key = randomUUID();
      const over = CHARGE_LIMIT + 1;
      const declined = await one.call(key, over);
      expect(declined).toMatchObject({ error: { message: declineMessage(over, CHARGE_LIMIT, 1) } });

      // The decline was counted in the file, with its record: the other process replays it.
      expect(await two.call(key, over)).toMatchObject({
        error: { message: declineMessage(over, CHARGE_LIMIT, 1) },
      });
      expect(await two.call(randomUUID(), over)).toMatchObject({
        error: { message: declineMessage(over, CHARGE_LIMIT, 2) },
      });
      expect(await ledgerOf(file)).toStrictEqual({ balance: 0, entries: new Map() });

      // A reset zeroes the count every process reads.
      await (await SqliteLedger.open(await openStore(file))).reset();
      expect(await one.call(randomUUID(), over)).toMatchObject({
        error: { message: declineMessage(over, CHARGE_LIMIT, 1) },
      });
    },
    3 * START_TIMEOUT_MS,
  );
});

describe('the replays a process remembers', () => {
  it(
    'are forgotten once another process clears the file: the key executes again there',
    async () => {
      const file = newFile();
      const server = await startWorker(file);
      const key = randomUUID();
      const first = await server.call(key);
      expect(await server.call(key)).toStrictEqual(first);

      await (await openStore(file)).clear();

      // Within CLEAR_SEEN_WITHIN_MS (100 ms) the process sees the clear; until then it may replay.
      let after = first;
      await waitUntil(async () => {
        after = await server.call(key);
        return JSON.stringify(after) !== JSON.stringify(first);
      });
      expect([first, after]).toStrictEqual([charged(100, 100), charged(100, 200)]);
    },
    2 * START_TIMEOUT_MS,
  );
});

describe('a process SIGKILLed at each phase of a call', () => {
  // Killed before its record: its charge goes with it, and the retry elsewhere executes once, at
  // once (its holder is gone). Killed after its record: the retry replays it.
  it.each([
    ['after its claim, before the tool ran', 'claimed'],
    ['after the tool wrote its charge, before its record', 'written'],
  ] as const)(
    'killed %s: the retry in another process executes at once, and the ledger shows one charge',
    async (_when, pause) => {
      const file = newFile();
      const [dying, retrying] = await Promise.all([startWorker(file), startWorker(file)]);
      const key = randomUUID();
      expect(await dying.call(key, 100, pause)).toStrictEqual({ phase: pause });
      expect(errorType(await retrying.call(key))).toBe(IdempotencyErrorType.inProgress);

      const killed = performance.now();
      await dying.kill();
      const answer = await retrying.call(key);
      const tookMs = performance.now() - killed;

      console.log(
        `dead-holder takeover (${pause}): executed ${tookMs.toFixed(0)} ms after SIGKILL (lease 120 000 ms)`,
      );
      expect(answer).toStrictEqual(charged(100, 100));
      // Its key came free with its process, not with its two-minute lease.
      expect(tookMs).toBeLessThan(1_000);
      expect(await ledgerOf(file)).toStrictEqual({ balance: 100, entries: new Map([[key, 1]]) });
    },
    3 * START_TIMEOUT_MS,
  );

  it(
    'killed after its record, before it answered: a process started afterwards replays the record, byte for byte, and charges nothing',
    async () => {
      const file = newFile();
      const dying = await startWorker(file);
      const key = randomUUID();
      expect(await dying.call(key, 100, 'recorded')).toStrictEqual({ phase: 'recorded' });
      await dying.kill();

      const later = await startWorker(file);
      expect(await later.call(key)).toStrictEqual(charged(100, 100));
      expect(await ledgerOf(file)).toStrictEqual({ balance: 100, entries: new Map([[key, 1]]) });
    },
    3 * START_TIMEOUT_MS,
  );
});

describe('a holder process, alive or dead', () => {
  /** Writes `id`'s in-progress record as a holder process with this identity would have. */
  async function heldBy(
    store: SqliteIdempotencyStore,
    id: RecordId,
    pid: number,
    started: string,
    host: string,
  ) {
    await store.transaction((db) =>
      db.run(
        `INSERT INTO sep3182_idem_records (scope, idempotency_key, state, fingerprint, expires_at, token,
           holder_pid, holder_started, holder_host) VALUES (?, ?, 'inProgress', ?, ?, 'elsewhere', ?, ?, ?)`,
        id.scope,
        id.idempotencyKey,
        OTHER_FINGERPRINT,
        Date.now() + LEASE_MS,
        pid,
        started,
        host,
      ),
    );
    await store.transaction((db) =>
      db.run(
        'INSERT INTO sep3182_idem_usage VALUES (?, 1, 0, 0) ON CONFLICT DO UPDATE SET records = records + 1',
        id.scope,
      ),
    );
  }

  /** This process's identity as the store records it (its first claim's row). */
  async function ownIdentity(store: SqliteIdempotencyStore) {
    const id = newId();
    await claimTicket(store, id);
    const row = await store.transaction((db) =>
      db.get(
        'SELECT holder_pid AS pid, holder_started AS started, holder_host AS host FROM sep3182_idem_records WHERE idempotency_key = ?',
        id.idempotencyKey,
      ),
    );
    return { pid: Number(row?.pid), started: String(row?.started), host: String(row?.host) };
  }

  it('names the holder by its pid and start time (Linux: /proc/<pid>/stat field 22)', async () => {
    const store = await openStore(newFile());
    const me = await ownIdentity(store);
    expect(me.pid).toBe(process.pid);
    if (process.platform === 'linux') {
      const stat = readFileSync(`/proc/${process.pid}/stat`, 'latin1');
      expect(me.started).toBe(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
    }
  });

  it('takes the key of a pid that now names another process (reused), and keeps that of a live holder', async () => {
    const store = await openStore(newFile());
    const me = await ownIdentity(store);
    const [reused, live, elsewhere] = [newId(), newId(), newId()];
    // This process's pid, started at another time: the holder was an earlier process under it.
    await heldBy(store, reused, me.pid, '1', me.host);
    await heldBy(store, live, me.pid, me.started, me.host);
    // A pid namespace (or boot) this process cannot see into: never judged dead.
    await heldBy(store, elsewhere, 1, '1', 'linux:another-boot:pid:[1]');

    expect((await store.claim(reused, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
    expect(await store.claim(live, FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'inProgress',
      fingerprint: OTHER_FINGERPRINT,
    });
    expect((await store.claim(elsewhere, FINGERPRINT, LEASE_MS)).state).toBe('inProgress');
  });

  it(
    'still answers in progress for a live holder process, past the time a dead one takes to come free',
    async () => {
      const file = newFile();
      const holding = await startWorker(file);
      const key = randomUUID();
      await holding.call(key, 100, 'claimed');
      const store = await openStore(file);
      await new Promise((resolve) => setTimeout(resolve, 1_000));

      expect((await store.claim({ scope: 'local', idempotencyKey: key }, FINGERPRINT, LEASE_MS)).state).toBe(
        'inProgress',
      );
    },
    2 * START_TIMEOUT_MS,
  );

  it(
    'answers in progress for a live holder when the claiming process cannot read /proc (out of file descriptors)',
    async () => {
      const file = newFile();
      const store = await openStore(file);
      const id = newId();
      await claimTicket(store, id);

      // Another server on the file, at its descriptor limit: every read of /proc fails (EMFILE).
      const starved = join(ROOT, 'test', 'support', 'sqlite-starved.ts');
      const command = `ulimit -n 200; exec "${process.execPath}" --import tsx "${starved}" "$@"`;
      const printed = execFileSync('sh', ['-c', command, 'sh', file, id.scope, id.idempotencyKey], {
        encoding: 'utf8',
        timeout: START_TIMEOUT_MS,
      });
      const answer = JSON.parse(printed);

      // This process, the holder, is running: its key is not free to execute again.
      expect(answer.descriptorsTaken).toBeGreaterThan(0);
      expect(answer.state).toBe('inProgress');
    },
    2 * START_TIMEOUT_MS,
  );

  it("keeps a live holder's key through a forward step of the wall clock, and the holder still records it", async () => {
    const file = newFile();
    let step = 0;
    const holding = await openStore(file, { now: () => Date.now() + step });
    // Another server on the file, reading the clock after it stepped past the lease (120 s).
    const stepped = await openStore(file, { now: () => Date.now() + LEASE_MS + 1_000 });
    const id = newId();
    const ticket = await claimTicket(holding, id);
    step = LEASE_MS + 1_000;

    expect(await stepped.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toStrictEqual({
      state: 'inProgress',
      fingerprint: FINGERPRINT,
    });
    // Enough claims of other keys to sweep the file: the running call's claim is no expired row.
    for (let n = 0; n < 64; n++) await claimTicket(stepped, newId('others'));
    expect(await holding.renew(ticket, LEASE_MS)).toBe(true);
    expect(await holding.complete(ticket, RESULT, RETENTION_MS)).toBe(true);
    expect(await stepped.claim(id, OTHER_FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
  });

  it('brings a file of the schema before monotonic leases up to date, its records kept', async () => {
    const file = newFile();
    const [done, running] = [newId(), newId()];
    const writer = await openStore(file);
    await claimTicket(writer, done).then((ticket) => writer.complete(ticket, RESULT, RETENTION_MS));
    // The file as the previous schema wrote it: no lease on the monotonic clock, and a claim of
    // a holder on another machine, whose lease is on the wall clock alone.
    await writer.transaction((db) => {
      db.run('ALTER TABLE sep3182_idem_records DROP COLUMN holder_lease_until');
      db.run('UPDATE sep3182_idem_schema SET version = 1');
    });
    await heldBy(writer, running, 4242, '1', 'linux:another-machine');
    await writer.close();

    const reader = await openStore(file);
    expect(await reader.claim(done, FINGERPRINT, LEASE_MS)).toStrictEqual(replayOf(RESULT));
    expect(await reader.claim(running, OTHER_FINGERPRINT, LEASE_MS)).toMatchObject({ state: 'inProgress' });
    const later = await openStore(file, { now: () => Date.now() + LEASE_MS + 1_000 });
    const ticket = await claimTicket(later, running);
    expect(await later.complete(ticket, RESULT, RETENTION_MS)).toBe(true);
    const schema = await reader.transaction((db) => db.get('SELECT version FROM sep3182_idem_schema'));
    expect(schema?.version).toBe(2);
  });

  it('leaves the claims of a store that closed to be taken at once, as an exited process does', async () => {
    const file = newFile();
    const [leaving, staying] = [await openStore(file), await openStore(file)];
    const id = newId();
    await claimTicket(leaving, id);

    await leaving.close();

    expect((await staying.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
  });
});

describe('expired records', () => {
  it('are deleted, with their usage, even of callers that never come back', async () => {
    let now = 1_000_000;
    const store = await openStore(newFile(), { now: () => now });
    for (let n = 0; n < 100; n++)
      await store.complete(await claimTicket(store, newId(`gone-${n}`)), RESULT, SHORT_MS);
    const left = async () =>
      store.transaction((db) => ({
        records: db.get("SELECT count(*) AS n FROM sep3182_idem_records WHERE scope LIKE 'gone-%'")?.n,
        usage: db.get("SELECT count(*) AS n FROM sep3182_idem_usage WHERE scope LIKE 'gone-%'")?.n,
      }));
    expect(await left()).toStrictEqual({ records: 100, usage: 100 });

    now += SHORT_MS;
    // Only others call from now on: a few hundred of their claims sweep the whole file.
    for (let n = 0; n < 300; n++) await claimTicket(store, newId('still-here'));

    expect(await left()).toStrictEqual({ records: 0, usage: 0 });
  });
});

describe('kept across restarts', () => {
  it('replays a record, byte for byte, after the store is closed and opened again', async () => {
    const file = newFile();
    const id = newId();
    const first = await openStore(file);
    await first.complete(await claimTicket(first, id), RESULT, RETENTION_MS);
    await first.close();

    const reopened = await openStore(file);
    const replay = await reopened.claim(id, FINGERPRINT, LEASE_MS);

    expect(replay).toStrictEqual(replayOf(RESULT));
    if (replay.state !== 'completed') throw new Error('unreachable');
    expect(JSON.stringify(replay.response)).toBe(JSON.stringify(RESULT));
  });
});

describe("a tool's writes in its record's transaction", () => {
  async function setUp() {
    const file = newFile();
    const store = await openStore(file);
    await store.transaction((db) => db.run('CREATE TABLE effects (idempotency_key TEXT NOT NULL)'));
    const effectsOf = async (id: RecordId) =>
      Number(
        (
          await store.transaction((db) =>
            db.get('SELECT count(*) AS n FROM effects WHERE idempotency_key = ?', id.idempotencyKey),
          )
        )?.n,
      );
    return { file, store, effectsOf };
  }

  it('refuses a statement that would commit or roll back the record’s transaction under it', async () => {
    const { store } = await setUp();
    const tx = await store.begin(await claimTicket(store, newId()));

    for (const sql of ['COMMIT', 'rollback', ' END TRANSACTION', 'BEGIN'])
      expect(() => tx.run(sql), sql).toThrow(/commits the record's transaction/);
  });

  it.each([
    ['a comment before it', '/* x */ COMMIT'],
    ['a line comment before it', '-- x\nCOMMIT'],
  ])(
    'refuses a COMMIT with %s: the write still waits for its record, and commits with it',
    async (_, sql) => {
      const { file, store, effectsOf } = await setUp();
      const other = await openStore(file);
      const id = newId();
      const ticket = await claimTicket(store, id);
      const tx = await store.begin(ticket);
      tx.run('INSERT INTO effects VALUES (?)', id.idempotencyKey);

      expect(() => tx.run(sql)).toThrow(/commits the record's transaction/);

      // Another connection sees neither the write nor a record yet; then both, together.
      const read = () => other.read((db) => db.get('SELECT count(*) AS n FROM effects')?.n);
      expect(await read()).toBe(0);
      expect(await store.complete(ticket, RESULT, RETENTION_MS)).toBe(true);
      expect(await effectsOf(id)).toBe(1);
      expect(await other.claim(id, FINGERPRINT, LEASE_MS)).toMatchObject({
        state: 'completed',
        response: RESULT,
      });
    },
  );

  it('refuses every statement after one failed at the file-size bound: a later charge never commits without its record', async () => {
    const file = newFile();
    const store = await openStore(file, { maxFileBytes: 64 * 1024 });
    await store.transaction((db) =>
      db.run('CREATE TABLE effects (idempotency_key TEXT NOT NULL, note BLOB)'),
    );
    const other = await openStore(file);
    const id = newId();
    const ticket = await claimTicket(store, id);
    const tx = await store.begin(ticket);

    // A best-effort write too large for the bound fails (SQLITE_FULL); the tool catches it, and
    // charges anyway.
    expect(() => tx.run('INSERT INTO effects VALUES (?, ?)', 'log', new Uint8Array(128 * 1024))).toThrow(
      /full/,
    );
    let refused: unknown;
    try {
      tx.run('INSERT INTO effects VALUES (?, NULL)', id.idempotencyKey);
    } catch (error) {
      refused = error;
    }

    // The process dies before its record: the charge must not stand on its own.
    const charges = () =>
      other.read(
        (db) => db.get('SELECT count(*) AS n FROM effects WHERE idempotency_key = ?', id.idempotencyKey)?.n,
      );
    expect(await charges()).toBe(0);
    expect(String(refused)).toMatch(/an earlier statement failed/);
    expect(await store.complete(ticket, ERROR, RETENTION_MS)).toBe(true);
    expect(await charges()).toBe(0);
  });
});

describe("a server's reads of its own tables", () => {
  it('reads the last commit at once while another connection holds the write lock, and refuses to write', async () => {
    const file = newFile();
    const writer = await openStore(file);
    const reader = await openStore(file, { busyTimeoutMs: 200 });
    await writer.transaction((db) => {
      db.run('CREATE TABLE balance (amount INTEGER NOT NULL)');
      db.run('INSERT INTO balance VALUES (100)');
    });
    // A keyed call's transaction: the file's write lock, and a write not yet committed.
    const ticket = await claimTicket(writer, newId());
    (await writer.begin(ticket)).run('UPDATE balance SET amount = 150');

    const amount = async () => (await reader.read((db) => db.get('SELECT amount FROM balance')))?.amount;
    expect(await amount()).toBe(100);
    const write = reader.read((db) => db.run('UPDATE balance SET amount = 0'));
    await expect(write).rejects.toThrow(/readonly/i);
    // The caller's own mistake, not the file failing.
    await expect(write).rejects.not.toBeInstanceOf(StoreUnavailableError);

    await writer.complete(ticket, RESULT, RETENTION_MS);
    expect(await amount()).toBe(150);
    await reader.transaction((db) => db.run('UPDATE balance SET amount = amount + 1'));
    expect(await amount()).toBe(151);
  });
});

describe('fail closed: a file the store cannot use never means executing without a record', () => {
  it('rejects a claim with StoreUnavailableError once another connection has held the write lock past the bound, and claims once it is free', async () => {
    const file = newFile();
    const holding = await openStore(file);
    const store = await openStore(file, { busyTimeoutMs: 200 });
    const held = await claimTicket(holding, newId());
    await holding.begin(held); // BEGIN IMMEDIATE: the file's write lock, until the record

    const id = newId();
    await expect(store.claim(id, FINGERPRINT, LEASE_MS)).rejects.toThrow(
      /stayed locked by another write past the busy timeout/,
    );

    await holding.complete(held, RESULT, RETENTION_MS);
    expect((await store.claim(id, FINGERPRINT, LEASE_MS)).state).toBe('claimed');
  });

  it('refuses a read-only file at open, saying so, and replays its records once it may be written again', async () => {
    const file = newFile();
    const id = newId();
    const first = await openStore(file);
    await first.complete(await claimTicket(first, id), RESULT, RETENTION_MS);
    await first.close();
    // Root may write a file whatever its mode; the immutable attribute stops root too.
    const root = process.getuid?.() === 0;
    const readOnly = (on: boolean) =>
      root ? execFileSync('chattr', [on ? '+i' : '-i', file]) : chmodSync(file, on ? 0o444 : 0o644);
    readOnly(true);
    try {
      await expect(SqliteIdempotencyStore.open(file)).rejects.toThrow(
        new StoreUnavailableError(
          new Error(
            `${file} is read-only (attempt to write a readonly database): the store must write its records there`,
          ),
        ),
      );
    } finally {
      readOnly(false);
    }

    expect(await (await openStore(file)).claim(id, FINGERPRINT, LEASE_MS)).toMatchObject({
      response: RESULT,
    });
  });

  it('refuses to claim once its file is deleted under it, and still replays what it recorded', async () => {
    const gone = mkdtempSync(join(dir, 'gone-'));
    const file = join(gone, 'records.sqlite');
    const store = await openStore(file);
    const recorded = newId();
    await store.complete(await claimTicket(store, recorded), RESULT, RETENTION_MS);

    rmSync(gone, { recursive: true, force: true });

    // A claim there would be written where no other process looks: a retry elsewhere would run again.
    await expect(store.claim(newId(), FINGERPRINT, LEASE_MS)).rejects.toThrow(
      `${file} was deleted or replaced while the store had it open`,
    );
    expect(await store.claim(recorded, FINGERPRINT, LEASE_MS)).toMatchObject({ response: RESULT });
  });

  it('answers full at its size bound (the guard: idempotency_store_full, nothing executed), and replays every record', async () => {
    const file = newFile();
    const store = await openStore(file, { maxFileBytes: 64 * 1024 });
    const recorded = newId();
    await store.complete(await claimTicket(store, recorded), RESULT, RETENTION_MS);
    const guard = createToolCallGuard({ store, providerKeyRetentionMs: 0, retentionMs: RETENTION_MS });
    let executions = 0;
    const call = (key: string) =>
      guard({ name: 'charge', arguments: { amount: 1 }, idempotencyKey: key }, {}, async () => {
        executions += 1;
        return { content: [{ type: 'text', text: 'x'.repeat(1_000) }] };
      });
    let answered = 0;
    let refusal: unknown;
    while (refusal === undefined) {
      await call(randomUUID()).then(
        () => (answered += 1),
        (error: unknown) => (refusal = error),
      );
    }

    expect(idempotencyErrorOf(refusal)?.type).toBe(IdempotencyErrorType.storeFull);
    expect(executions).toBe(answered);
    expect(await store.claim(recorded, FINGERPRINT, LEASE_MS)).toMatchObject({ response: RESULT });
  });

  it('executes a call whose response can never fit under the size bound once: its retries answer full', async () => {
    const store = await openStore(newFile(), { maxFileBytes: 256 * 1024 });
    const leaseMs = 300;
    const guard = createToolCallGuard({
      store,
      providerKeyRetentionMs: 0,
      retentionMs: RETENTION_MS,
      leaseMs,
    });
    let executions = 0;
    const call = () =>
      guard({ name: 'report', arguments: {}, idempotencyKey: 'too-large' }, {}, async () => {
        executions += 1;
        return { content: [{ type: 'text', text: 'x'.repeat(300_000) }] };
      });

    const first = await call();
    // Past the lease, as a client's retry of a lost answer comes.
    await new Promise((resolve) => setTimeout(resolve, 2 * leaseMs));
    const retry = await call().catch((error: unknown) => error);

    expect(first).toMatchObject({ content: [{ type: 'text' }] });
    expect(idempotencyErrorOf(retry)?.type).toBe(IdempotencyErrorType.storeFull);
    expect(executions).toBe(1);
  });

  it('fails claims closed on a damaged file, saying so, and leaves the file as it was', async () => {
    const file = newFile();
    const store = await openStore(file);
    const ids = Array.from({ length: 200 }, () => newId());
    for (const id of ids) await store.complete(await claimTicket(store, id), RESULT, RETENTION_MS);
    const root = await store.transaction((db) =>
      db.get("SELECT rootpage FROM sqlite_schema WHERE name = 'sep3182_idem_records'"),
    );
    await store.close();
    // The records' root page, overwritten: every lookup of a record goes through it.
    const fd = openSync(file, 'r+');
    writeSync(fd, Buffer.alloc(4_096, 0xa5), 0, 4_096, (Number(root?.rootpage) - 1) * 4_096);
    const damaged = readFileSync(file);

    const reopened = await openStore(file);
    for (const id of [ids[0], newId()]) {
      if (!id) continue;
      await expect(reopened.claim(id, FINGERPRINT, LEASE_MS)).rejects.toThrow(
        new StoreUnavailableError(
          new Error(
            `${file} is damaged (database disk image is malformed): restore it from a backup, or move it aside to start with no records`,
          ),
        ),
      );
    }
    await reopened.close();
    expect(readFileSync(file).equals(damaged)).toBe(true);
  });

  it('refuses a file that is no SQLite database, and one of another schema, at open, and leaves each as it was', async () => {
    const notes = newFile();
    writeFileSync(notes, 'my notes\n'.repeat(1_000));
    await expect(SqliteIdempotencyStore.open(notes)).rejects.toThrow(
      `${notes} is not a SQLite database (file is not a database): give the store a file of its own`,
    );
    expect(readFileSync(notes, 'utf8')).toBe('my notes\n'.repeat(1_000));

    const newer = newFile();
    await (await openStore(newer)).transaction((db) => db.run('UPDATE sep3182_idem_schema SET version = 7'));
    await expect(SqliteIdempotencyStore.open(newer)).rejects.toThrow(
      `${newer}: it holds idempotency records of schema version 7; this store reads version 2 (a newer package wrote it?)`,
    );

    const foreign = newFile();
    const app = await openStore(foreign);
    await app.transaction((db) => {
      db.run('DROP TABLE sep3182_idem_schema');
      db.run('DROP TABLE sep3182_idem_records');
      db.run('CREATE TABLE sep3182_idem_records (id INTEGER PRIMARY KEY, note TEXT)');
      db.run("INSERT INTO sep3182_idem_records (note) VALUES ('theirs')");
    });
    await expect(SqliteIdempotencyStore.open(foreign)).rejects.toThrow(
      /it holds tables named .*sep3182_idem_records.* that this store did not create/,
    );
    expect((await app.transaction((db) => db.get('SELECT note FROM sep3182_idem_records')))?.note).toBe(
      'theirs',
    );
  });
});

describe('what the store is opened with', () => {
  it('runs on node:sqlite where Node has it, and on better-sqlite3 on Node 20', async () => {
    const store = await openStore(newFile());
    const major = Number(process.versions.node.split('.')[0]);
    if (major === 20) expect(store.driver).toBe('better-sqlite3');
    if (major >= 23) expect(store.driver).toBe('node:sqlite');
    expect(SqliteIdempotencyStore.driver).toBe(store.driver);
  });

  it('keeps its file in WAL mode, with synchronous NORMAL unless told FULL', async () => {
    const file = newFile();
    const settingsOf = (store: SqliteIdempotencyStore) =>
      store.transaction((db) => ({
        journal: db.get('PRAGMA journal_mode')?.journal_mode,
        // 1: NORMAL, 2: FULL
        synchronous: db.get('PRAGMA synchronous')?.synchronous,
      }));
    expect(await settingsOf(await openStore(file))).toStrictEqual({ journal: 'wal', synchronous: 1 });
    expect(await settingsOf(await openStore(file, { synchronous: 'full' }))).toStrictEqual({
      journal: 'wal',
      synchronous: 2,
    });
  });

  it('refuses options that are no setting, and a path that is no file, in the words every store uses', async () => {
    for (const name of ['busyTimeoutMs', 'maxFileBytes'] as const)
      for (const bad of [0, -1, Number.NaN, 1.5])
        await expect(SqliteIdempotencyStore.open(newFile(), { [name]: bad })).rejects.toThrow(
          new RangeError(`${name} must be a positive integer, got ${bad}`),
        );
    // As a JavaScript caller, or a configuration file, could pass it.
    const off: SqliteStoreOptions = JSON.parse('{"synchronous":"off"}');
    await expect(SqliteIdempotencyStore.open(newFile(), off)).rejects.toThrow(
      new RangeError('synchronous must be normal or full, got off'),
    );
    for (const path of ['', ':memory:', 'file::memory:'])
      await expect(SqliteIdempotencyStore.open(path)).rejects.toThrow(/keeps its records in a file/);
  });
});
