// --- A Postgres server for tests ---
//
// If PostgreSQL's server binaries are installed (initdb, pg_ctl), each test file gets a private
// cluster on a free loopback port, trust authentication, every statement logged (how the tests
// count round trips, as the Redis tests read MONITOR), which it can also kill, shut down and
// restart on the same data directory. Otherwise `DATABASE_URL`, if set, is shared: tests only
// touch tables under their own unique prefix, and the ones that must crash Postgres or read its
// log skip. With neither, `startPostgres` returns undefined and the file skips, saying why.
//
// initdb, pg_ctl and postgres refuse to run as root: as root, they run as the `postgres` user
// (spawned with its uid and gid, as `runuser -u postgres` would run them, without a runuser
// process in between: runuser stops itself whenever its child is stopped, as su does, which the
// freeze test does to the postmaster), in a directory made for the test and handed to that user.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { chown, mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { START_TIMEOUT_MS, WAIT_MS, waitUntil } from './bounds.js';

export const POSTGRES_SKIP_REASON =
  'Postgres tests skipped: set DATABASE_URL or install PostgreSQL server binaries (initdb, pg_ctl)';

/** Debian and Ubuntu keep the server binaries off PATH, one directory per major version. */
const DEBIAN_POSTGRES_ROOT = '/usr/lib/postgresql';

/** The user initdb and pg_ctl run as when the tests run as root. */
const POSTGRES_USER = 'postgres';

export interface TestPostgres {
  url: string;
  /** True when this helper started the cluster: only then may a test kill, shut down or restart it. */
  owned: boolean;
  /** An admin pool for looking behind a store's back; it reconnects by itself after a restart. */
  admin: pg.Pool;
  /** Drops every table and function whose name starts with `prefix`, and nothing else. */
  drop(prefix: string): Promise<void>;
  /** SIGKILL of the postmaster and every backend, as a crash would; resolves once they are gone. */
  kill(): Promise<void>;
  /** SIGSTOP of the postmaster and every backend: the port stays open but nothing answers, as with a hung Postgres. */
  freeze(): void;
  /** SIGCONT after `freeze`. */
  thaw(): void;
  /** A clean shutdown (`pg_ctl stop -m fast`): every committed transaction is on disk. */
  shutdown(): Promise<void>;
  /** Starts a killed or shut-down cluster again, same port, same data directory. */
  restart(): Promise<void>;
  /**
   * The statements Postgres received from sessions named `applicationName` while `action` ran,
   * as its log shows them (log_statement = all): one per round trip. Owned clusters only. A new
   * pooled connection's settings (the store's `SESSION_SETTINGS`) are left out: they go ahead of
   * its first statement, pipelined, and cost no round trip of their own.
   */
  statementsDuring<T>(
    applicationName: string,
    action: () => Promise<T>,
  ): Promise<{ statements: string[]; value: T }>;
  /** Closes the admin pool, and stops and deletes the cluster if this helper started it. */
  stop(): Promise<void>;
}

/** A table prefix no other test file or run shares, even on a shared `DATABASE_URL`. */
export function uniqueTablePrefix(label: string): string {
  return `t_${label}_${process.pid}_${randomUUID().slice(0, 8)}_`;
}

export async function startPostgres(): Promise<TestPostgres | undefined> {
  const bin = findServerBinaries();
  const shared = process.env.DATABASE_URL;
  if (!bin) return shared ? withAdmin(shared, undefined) : undefined;
  const cluster = await PrivateCluster.start(bin);
  try {
    return await withAdmin(cluster.url, cluster);
  } catch (error) {
    await cluster.destroy();
    throw error;
  }
}

async function withAdmin(url: string, cluster: PrivateCluster | undefined): Promise<TestPostgres> {
  const admin = new pg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: WAIT_MS });
  admin.on('error', () => {}); // expected while a test has the cluster down
  await admin.query('SELECT 1');
  const owned = (): PrivateCluster => {
    if (!cluster) throw new Error('only a cluster started by the test can be killed or restarted');
    return cluster;
  };
  return {
    url,
    owned: cluster !== undefined,
    admin,
    async drop(prefix) {
      // LIKE's `_` matches any character: escaped, so only names with this exact prefix match.
      const pattern = `${prefix.replace(/[\\_%]/g, '\\$&')}%`;
      await admin.query(
        `DO $drop$ DECLARE name text; BEGIN
           FOR name IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE '${pattern}'
             LOOP EXECUTE format('DROP TABLE IF EXISTS %I CASCADE', name); END LOOP;
           FOR name IN SELECT p.oid::regprocedure::text FROM pg_proc p
               WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE '${pattern}'
             LOOP EXECUTE 'DROP FUNCTION IF EXISTS ' || name; END LOOP;
         END $drop$`,
      );
    },
    kill: () => owned().kill(),
    freeze: () => owned().signalAll('SIGSTOP'),
    thaw: () => owned().signalAll('SIGCONT'),
    shutdown: () => owned().shutdown(),
    restart: async () => {
      await owned().restart();
      await waitUntil(
        async () => (await admin.query('SELECT 1').catch(() => undefined)) !== undefined,
        WAIT_MS,
      );
    },
    statementsDuring: (applicationName, action) => owned().statementsDuring(admin, applicationName, action),
    async stop() {
      await admin.end().catch(() => {});
      await cluster?.destroy();
    },
  };
}

class PrivateCluster {
  private readonly killOnExit = () => {
    for (const pid of this.processes()) signal(pid, 'SIGKILL');
  };

  /** The running postmaster, this process' child. */
  private child: ChildProcess | undefined;
  /** Who the server binaries run as: the postgres user when the tests run as root. */
  private user: { uid: number; gid: number } | undefined;

  private constructor(
    private readonly bin: string,
    readonly port: number,
    /** Owned by the user the server runs as; holds the data directory, the socket and the log. */
    private readonly dir: string,
  ) {}

  get url(): string {
    return `postgres://${POSTGRES_USER}@127.0.0.1:${this.port}/postgres`;
  }

  private get dataDir(): string {
    return join(this.dir, 'data');
  }

  private get logFile(): string {
    return join(this.dir, 'postgres.log');
  }

  static async start(bin: string): Promise<PrivateCluster> {
    const dir = await mkdtemp(join(tmpdir(), 'sep3182-postgres-'));
    const cluster = new PrivateCluster(bin, await freePort(), dir);
    // A test run that dies before `destroy` must not leave a postmaster behind.
    process.once('exit', cluster.killOnExit);
    try {
      if (userInfo().uid === 0) {
        cluster.user = await userIds(POSTGRES_USER);
        await chown(dir, cluster.user.uid, cluster.user.gid);
      }
      await cluster.run('initdb', [
        ...['-D', cluster.dataDir, '-U', POSTGRES_USER, '-A', 'trust'],
        ...['--encoding', 'UTF8', '--no-locale', '--no-sync'],
      ]);
      await cluster.restart();
    } catch (error) {
      await cluster.destroy();
      throw error;
    }
    return cluster;
  }

  /**
   * Starts the postmaster as this process' child, not with
   * `pg_ctl start`: pg_ctl leaves it to whoever reaps orphans, and a postmaster killed by a test
   * would stay a zombie there, whose pid in postmaster.pid makes the next start refuse to run.
   * Resolves once the cluster accepts connections, bounded.
   */
  async restart(): Promise<void> {
    if (this.child) throw new Error('the cluster is still running; kill or shut it down first');
    const settings = [
      ...['listen_addresses=127.0.0.1', `port=${this.port}`, `unix_socket_directories=${this.dir}`],
      // Tests only: no fsync (a killed process loses nothing the kernel already has; only a
      // machine crash would), every statement in the log for `statementsDuring`.
      ...['fsync=off', 'log_statement=all', 'log_line_prefix=%a|%p| '],
    ];
    const args = ['-D', this.dataDir, ...settings.flatMap((setting) => ['-c', setting])];
    const log = await open(this.logFile, 'a');
    try {
      const child = this.spawnTool('postgres', args, log.fd);
      this.child = child;
      child.once('exit', () => {
        if (this.child === child) this.child = undefined;
      });
    } finally {
      await log.close();
    }
    try {
      await waitUntil(async () => {
        if (!this.child) throw new Error('postgres exited at startup');
        return accepts(this.url);
      }, START_TIMEOUT_MS);
    } catch (error) {
      await this.kill();
      throw new Error(
        `postgres did not start on port ${this.port}: ${String(error)}\n${(await this.log()).slice(-2000)}`,
      );
    }
  }

  async kill(): Promise<void> {
    const pids = this.processes();
    for (const pid of pids) signal(pid, 'SIGKILL');
    await waitUntil(async () => !this.child && pids.every((pid) => !isAlive(pid)), WAIT_MS);
  }

  /** The postmaster and its backends. */
  signalAll(name: NodeJS.Signals): void {
    for (const pid of this.processes()) signal(pid, name);
  }

  async shutdown(): Promise<void> {
    await this.run('pg_ctl', ['-D', this.dataDir, '-m', 'fast', '-w', '-t', String(WAIT_MS / 1000), 'stop']);
    await waitUntil(async () => !this.child, WAIT_MS);
  }

  async destroy(): Promise<void> {
    this.signalAll('SIGCONT'); // a frozen cluster cannot act on a shutdown
    if (this.child) await this.shutdown().catch(() => this.kill());
    process.off('exit', this.killOnExit);
    await rm(this.dir, { recursive: true, force: true });
  }

  async statementsDuring<T>(
    admin: pg.Pool,
    applicationName: string,
    action: () => Promise<T>,
  ): Promise<{ statements: string[]; value: T }> {
    const before = (await this.log()).length;
    const value = await action();
    // Each statement is logged before it runs, so before its reply; the marker shows the log has caught up.
    const marker = `sep3182-marker-${randomUUID()}`;
    await admin.query(`SELECT '${marker}'`);
    await waitUntil(async () => (await this.log()).includes(marker), WAIT_MS);
    // e.g. `sep3182-…|12345| LOG:  execute <unnamed>: SELECT answer, …`
    const statements = (await this.log())
      .slice(before)
      .split('\n')
      .flatMap((line) => {
        const [, name, text] = /^([^|]*)\|\d+\| LOG: {2}(?:statement|execute [^:]*): (.*)$/.exec(line) ?? [];
        const settings = text?.startsWith("SELECT set_config('statement_timeout'");
        return name === applicationName && text !== undefined && !settings ? [text] : [];
      });
    return { statements, value };
  }

  private log(): Promise<string> {
    return readFile(this.logFile, 'utf8').catch(() => '');
  }

  /** The postmaster (first line of postmaster.pid) and its children, the backends. */
  private processes(): number[] {
    let postmaster: number;
    try {
      const text = readFileSync(join(this.dataDir, 'postmaster.pid'), 'utf8');
      postmaster = Number.parseInt(text.split('\n')[0] ?? '', 10);
    } catch {
      return [];
    }
    if (!Number.isSafeInteger(postmaster) || !isAlive(postmaster)) return [];
    return [postmaster, ...childrenOf(postmaster)];
  }

  private spawnTool(tool: string, args: string[], output: number): ChildProcess {
    return spawn(join(this.bin, tool), args, {
      ...this.user,
      cwd: this.dir,
      stdio: ['ignore', output, output],
    });
  }

  /** Runs one of the server binaries to its end, bounded. */
  private async run(tool: string, args: string[]): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      // initdb writes a whole cluster: a start-up, not a wait.
      const options = { ...this.user, timeout: START_TIMEOUT_MS, cwd: this.dir };
      execFile(join(this.bin, tool), args, options, (error, stdout, stderr) => {
        if (error)
          reject(new Error(`${tool} ${args.join(' ')} failed: ${String(error)}\n${stdout}${stderr}`));
        else resolve();
      });
    });
  }
}

/** The server binaries' directory: pg_ctl on PATH, else the newest of Debian's versions. */
function findServerBinaries(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && isExecutable(join(dir, 'pg_ctl')) && isExecutable(join(dir, 'initdb'))) return dir;
  }
  let versions: string[];
  try {
    versions = readdirSync(DEBIAN_POSTGRES_ROOT);
  } catch {
    return undefined;
  }
  const newest = versions
    .filter((version) => /^\d+$/.test(version))
    .sort((a, b) => Number(b) - Number(a))
    .map((version) => join(DEBIAN_POSTGRES_ROOT, version, 'bin'))
    .find((dir) => isExecutable(join(dir, 'pg_ctl')) && isExecutable(join(dir, 'initdb')));
  return newest;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The uid and gid of `user`, from `id` (Node has no getpwnam). */
export async function userIds(user: string): Promise<{ uid: number; gid: number }> {
  const read = (flag: string) =>
    new Promise<number>((resolve, reject) => {
      execFile('id', [flag, user], (error, stdout) => {
        const id = Number.parseInt(stdout, 10);
        if (error || !Number.isSafeInteger(id)) reject(new Error(`no user ${user} to run Postgres as`));
        else resolve(id);
      });
    });
  return { uid: await read('-u'), gid: await read('-g') };
}

/** Direct children of `pid`, from /proc (the postmaster's backends and auxiliary processes). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(join('/proc', entry, 'stat'), 'utf8');
      // The fourth field, after the parenthesised command name (which may contain spaces).
      const ppid = Number.parseInt(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] ?? '', 10);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return children;
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // exited meanwhile
  }
}

/** True while `pid` runs; a zombie (killed, not yet reaped by whoever inherited it) counts as gone. */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(join('/proc', String(pid), 'stat'), 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** True once a session to `url` answers `SELECT 1`. */
async function accepts(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

/** Asks the OS for a free loopback port. Another process could take it before Postgres binds; rare enough. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no TCP port from the OS');
  return address.port;
}
